"""Declarative automation from the real definitions: a failed blocking check upstream stops it."""

import dagster as dg

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.checks import guidance_cache_valid, persona_cache_valid
from newsmotion_assets.definitions import defs
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.persona.sources import install_source

LOOP_ASSETS = [guidance_cache, guidance_cache_valid, backend_guidance_cache]
PERSONA_ASSETS = [persona_cache, persona_cache_valid, backend_persona_cache]


def _materialize(instance, resources, key, selection, raise_on_error=True):
    assets = LOOP_ASSETS if key in ("nod", "welcome") else PERSONA_ASSETS
    return dg.materialize(
        assets, selection=selection, partition_key=key, instance=instance, resources=resources, raise_on_error=raise_on_error
    )


def _damage(path):
    """Flip a byte, same size: the asset's cheap validation reuses the cache on its next
    materialization, its check (which hashes every file) fails."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_persona_that_failed_its_blocking_check_gets_no_backend_cache_and_no_renders(astronaut_png, storage):
    install_source(storage, astronaut_png, "good")
    install_source(storage, astronaut_png, "bad")
    resources = {"storage": StorageResource(), "renderer": RendererResource(width=360, height=640)}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["good", "bad"])
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert tick.total_requested == 0  # nothing upstream exists yet

        # Two runs, as the demo does: the base cache and its backend cache have different backfill policies.
        _materialize(instance, resources, "nod", [guidance_cache, guidance_cache_valid])
        _materialize(instance, resources, "nod", [backend_guidance_cache])
        _materialize(instance, resources, "good", [persona_cache, persona_cache_valid])
        _materialize(instance, resources, "bad", [persona_cache])
        _damage(storage.persona_dir("bad") / "landmarks.npy")
        checked = _materialize(instance, resources, "bad", [persona_cache, persona_cache_valid], False)
        assert checked.asset_materializations_for_node("persona_cache")
        assert [c.passed for c in checked.get_asset_check_evaluations()] == [False]

        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(backend_persona_cache.key) == {"good"}
        assert not tick.get_requested_partitions(render.key)  # its backend cache comes first

        # Even with a backend cache there (built before, or by hand), "bad" is not rendered.
        _materialize(instance, resources, "good", [backend_persona_cache])
        _materialize(instance, resources, "bad", [backend_persona_cache])
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        good = dg.MultiPartitionKey({"persona": "good", "loop": "nod"})
        assert tick.get_requested_partitions(render.key) == {good}
        assert not tick.get_requested_partitions(backend_persona_cache.key)


def test_a_loop_that_failed_its_blocking_check_gets_no_backend_cache(storage):
    resources = {"storage": StorageResource(), "renderer": RendererResource(width=360, height=640)}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod", "welcome"])
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        _materialize(instance, resources, "welcome", [guidance_cache, guidance_cache_valid])
        _materialize(instance, resources, "nod", [guidance_cache])
        _damage(storage.guidance_dir("nod") / "keypoints.npy")
        checked = _materialize(instance, resources, "nod", [guidance_cache, guidance_cache_valid], False)
        assert [c.passed for c in checked.get_asset_check_evaluations()] == [False]
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(backend_guidance_cache.key) == {"welcome"}
