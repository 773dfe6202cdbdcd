import dagster as dg

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.partitions import loop_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.render.backends.wan_animate import caches as wan_caches

STORAGE = {"storage": StorageResource()}  # root: $NEWSMOTION_STORAGE, this test's own folder
WAN_TINY = RendererResource(
    backend="wan-animate", options={"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32"}, width=64, height=128
)


def _meta(result, node):
    (mat,) = result.asset_materializations_for_node(node)
    return {k: v.value for k, v in mat.metadata.items()}


def test_warp_needs_no_backend_artifacts(upstream_caches, storage):
    resources = {"renderer": RendererResource(width=360, height=640), **STORAGE}
    with dg.instance_for_test() as instance:
        upstream_caches(instance)
        loop = dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources)
        persona = dg.materialize([backend_persona_cache], partition_key="anchor", instance=instance, resources=resources)
        for meta in (_meta(loop, "backend_guidance_cache"), _meta(persona, "backend_persona_cache")):
            assert meta["artifacts"] == "warp needs no backend artifacts"
            assert (meta["backend"], meta["size"], meta["built"]) == ("warp", "360x640", 0)
        # Unchanged inputs, same data version: renders downstream do not turn stale.
        again = dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources)
        (first,) = loop.asset_materializations_for_node("backend_guidance_cache")
        (second,) = again.asset_materializations_for_node("backend_guidance_cache")
        assert first.tags["dagster/data_version"] == second.tags["dagster/data_version"] == _meta(again, "backend_guidance_cache")["digest"]


def test_missing_upstream_cache_names_the_asset_to_materialize():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        result = dg.materialize(
            [backend_guidance_cache], partition_key="nod", instance=instance,
            resources={"renderer": RendererResource(), **STORAGE}, raise_on_error=False,
        )  # fmt: skip
        assert not result.success
        message = result.get_step_failure_events()[0].event_specific_data.error.to_string()
        assert "materialize guidance_cache[nod] first" in message


def test_wan_animate_tiny_builds_its_sub_caches_once(upstream_caches, storage):
    resources = {"renderer": WAN_TINY, **STORAGE}
    with dg.instance_for_test() as instance:
        upstream_caches(instance)
        loop = dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources)
        persona = dg.materialize([backend_persona_cache], partition_key="anchor", instance=instance, resources=resources)
        assert _meta(loop, "backend_guidance_cache")["built"] == 1
        assert _meta(persona, "backend_persona_cache")["built"] == 1
        assert "prompt_embeds" in _meta(loop, "backend_guidance_cache")["artifacts"]
        assert "ref_latents" in _meta(persona, "backend_persona_cache")["artifacts"]
        assert wan_caches.guidance_artifacts_dir(storage.guidance_dir("nod"), 64, 128).is_dir()
        assert wan_caches.persona_artifacts_dir(storage.persona_dir("anchor"), 64, 128).is_dir()
        again = dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources)
        meta = _meta(again, "backend_guidance_cache")
        assert (meta["built"], meta["reused"]) == (0, 1)


def test_a_speech_option_reads_the_storage_speeches(monkeypatch, tmp_path):
    """echomimic-v3's `speech` names a speech of the storage: the resource fills `speech_root` as
    the CLI does, so a Dagster render needs no path in its options."""
    from newsmotion_assets.resources import release_warm_backends
    from newsmotion_engine.storage import Storage

    monkeypatch.setenv("NEWSMOTION_STORAGE", str(tmp_path / "store"))
    renderer = RendererResource(backend="echomimic-v3", options={"preset": "tiny", "speech": "intro", "device": "cpu"})
    try:
        assert renderer.loaded.options.speech_root == str(Storage(tmp_path / "store").speech_root)
    finally:
        release_warm_backends()
