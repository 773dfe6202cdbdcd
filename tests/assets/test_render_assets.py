"""The render asset: loads the upstream caches (fails naming what to materialize), skips an unchanged
render, and reports the render's input digest as its data version."""

import dagster as dg
from PIL import Image

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import scorecard
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.video.encode import probe_video

KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})


def _instance_with(instance, persona="anchor", loop="nod"):
    instance.add_dynamic_partitions(loop_partitions.name, [loop])
    instance.add_dynamic_partitions(persona_partitions.name, [persona])
    return instance


def _resources(**renderer):
    # The storage root is unset: $NEWSMOTION_STORAGE, which tests/conftest.py points at this test's folder.
    return {"renderer": RendererResource(**renderer), "storage": StorageResource()}


def _caches(instance, persona="anchor", loop="nod"):
    storage = {"storage": StorageResource()}
    assert dg.materialize([guidance_cache], partition_key=loop, instance=instance, resources=storage).success
    assert dg.materialize([persona_cache], partition_key=persona, instance=instance, resources=storage).success


def test_render_partition_skip_data_version_then_scorecard(astronaut_png, storage, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    install_source(storage, astronaut_png, "anchor")
    resources = _resources(width=360, height=640)
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        assert mat.metadata["renders"].value == 1 and mat.metadata["weights"].value == "none"
        assert mat.metadata["rendered"].value == 1 and mat.metadata["skipped"].value == 0
        assert "data:image/png;base64," in mat.metadata["contact_sheet"].value
        assert mat.metadata["studio_page"].value == "http://127.0.0.1:8765/render/anchor/nod/warp.html"
        mp4 = storage.render_path("anchor", "nod", "warp")
        info = probe_video(mp4)
        assert (info["codec"], info["width"], info["height"], info["frames"]) == ("h264", 360, 640, 120)
        tele = RenderTelemetry.read(mp4.with_suffix(".json"))
        assert (tele.guidance_cache, tele.persona_cache) == ("hit", "hit")  # built upstream, only loaded here
        # The input digest is the data version, and the caches' digests are its inputs' versions.
        assert mat.tags["dagster/data_version"] == tele.input_digest == mat.metadata["input_digest"].value
        assert mat.tags["dagster/input_data_version/persona_cache"] == tele.provenance.persona_digest
        assert mat.tags["dagster/input_data_version/guidance_cache"] == tele.provenance.guidance_digest

        stamp = mp4.stat().st_mtime_ns
        again = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        (mat2,) = again.asset_materializations_for_node("render")
        assert mat2.metadata["skipped"].value == 1 and mat2.metadata["outcome"].value == "skipped"
        assert mp4.stat().st_mtime_ns == stamp and mat2.tags["dagster/data_version"] == tele.input_digest

        # A new portrait: the persona cache's data version changes, so the render's recorded input
        # version is out of date (stale in the UI) until it is rendered again, with a new digest.
        flipped = tmp_path / "flipped.png"
        Image.open(astronaut_png).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(flipped)
        install_source(storage, flipped, "anchor")
        rebuilt = dg.materialize([persona_cache], partition_key="anchor", instance=instance, resources=_resources())
        new_persona = rebuilt.asset_materializations_for_node("persona_cache")[0].tags["dagster/data_version"]
        assert new_persona != mat2.tags["dagster/input_data_version/persona_cache"]
        redone = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        (mat3,) = redone.asset_materializations_for_node("render")
        assert mat3.metadata["rendered"].value == 1 and mp4.stat().st_mtime_ns != stamp
        assert mat3.tags["dagster/input_data_version/persona_cache"] == new_persona
        assert mat3.tags["dagster/data_version"] != tele.input_digest

        card = dg.materialize([scorecard], instance=instance, resources={"storage": StorageResource()})
        (mat,) = card.asset_materializations_for_node("scorecard")
        assert mat.metadata["dagster/row_count"].value == 1
        table = mat.metadata["renders"].value
        assert [c.name for c in table.schema.columns] == list(RenderTelemetry.SUMMARY)
        assert table.records[0].data["persona_id"] == "anchor" and table.records[0].data["frames"] == 120
        assert mat.metadata["chart"].value.startswith("![Seconds per stage, per render](data:image/png;base64,")
    release_warm_backends()


def test_render_with_missing_caches_fails_naming_what_to_materialize(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        _instance_with(instance)
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=_resources(), raise_on_error=False)
        assert not result.success
        message = result.get_step_failure_events()[0].event_specific_data.error.to_string()
        assert "guidance cache for loop 'nod' is missing: materialize guidance_cache[nod]" in message
    assert not storage.guidance_dir("nod").exists() and not storage.render_path("anchor", "nod", "warp").exists()


def test_render_unknown_persona_fails_its_run(storage):
    key = dg.MultiPartitionKey({"persona": "ghost", "loop": "nod"})
    with dg.instance_for_test() as instance:
        _instance_with(instance, persona="ghost")
        result = dg.materialize([render], partition_key=key, instance=instance, resources=_resources(), raise_on_error=False)
        assert not result.success
        assert "unknown persona 'ghost'" in result.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert not storage.render_path("ghost", "nod", "warp").exists()


def test_bad_renderer_config_fails_before_rendering():
    key = dg.MultiPartitionKey({"persona": "ghost", "loop": "nod"})
    with dg.instance_for_test() as instance:
        _instance_with(instance, persona="ghost")
        result = dg.materialize(
            [render], partition_key=key, instance=instance, resources=_resources(width=721), raise_on_error=False
        )
        assert not result.success
        failures = [e for e in result.all_events if "FAILURE" in e.event_type_value]
        assert any("render width 721 is odd" in str(e.event_specific_data) for e in failures)


def test_wan_animate_tiny_through_the_resource(astronaut_png, storage):
    """The diffusion backend plugs into the same resource and asset (tiny preset, random weights)."""
    install_source(storage, astronaut_png, "anchor")
    resources = _resources(
        backend="wan-animate", options={"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32"}, width=64, height=128
    )
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        # Renders only load: without the backend's sub-caches the asset fails naming what to build.
        failed = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources, raise_on_error=False)
        assert not failed.success
        assert any("materialize backend_guidance_cache[nod]" in str(e.event_specific_data) for e in failed.all_events)
        # The backend sub-cache assets build them through the same resource.
        assert dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources).success
        assert dg.materialize([backend_persona_cache], partition_key="anchor", instance=instance, resources=resources).success
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        assert "random weights" in mat.metadata["weights"].value
    mp4 = storage.render_path("anchor", "nod", "wan-animate")
    assert probe_video(mp4)["frames"] == 120
    assert "random weights" in RenderTelemetry.read(mp4.with_suffix(".json")).weights
