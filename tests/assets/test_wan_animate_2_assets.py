"""wan-animate-2 through Dagster (tiny preset, CPU, random weights): backend caches + a render
through the renderer resource, and the ab_comparison asset."""

import json

import dagster as dg
import pytest

pytest.importorskip("diffusers")

from newsmotion_assets.assets.ab import ab_comparison  # noqa: E402
from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache  # noqa: E402
from newsmotion_assets.assets.render import render  # noqa: E402
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends  # noqa: E402
from newsmotion_engine.render.telemetry import RenderTelemetry  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2 import caches as C  # noqa: E402
from newsmotion_engine.video.encode import probe_video  # noqa: E402

STORAGE = {"storage": StorageResource()}
# 61-frame segments: the 120-frame loop is 2 segments; one step keeps the CPU test short.
TINY2 = {"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32", "segment_frames": 61}
KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})


def test_render_through_the_renderer_resource(upstream_caches, storage):
    resources = {"renderer": RendererResource(backend="wan-animate-2", options=TINY2, width=64, height=128), **STORAGE}
    try:
        with dg.instance_for_test() as instance:
            upstream_caches(instance)
            failed = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources, raise_on_error=False)
            assert not failed.success  # renders only load: the backend caches are not there yet
            assert dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=resources).success
            assert dg.materialize([backend_persona_cache], partition_key="anchor", instance=instance, resources=resources).success
            assert C.guidance_artifacts_dir(storage.guidance_dir("nod"), 64, 128).is_dir()
            assert C.persona_artifacts_dir(storage.persona_dir("anchor"), 64, 128).is_dir()
            result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
            assert result.success
            mp4 = storage.render_path("anchor", "nod", "wan-animate-2")
            info = probe_video(mp4)
            assert (info["width"], info["height"], info["frames"]) == (64, 128, 120)
            tele = RenderTelemetry.read(mp4.with_suffix(".json"))
            assert tele.weights == "random weights" and (tele.guidance_cache, tele.persona_cache) == ("hit", "hit")
    finally:
        release_warm_backends()


def test_ab_comparison_asset_writes_per_frame_measures(upstream_caches, storage):
    # Two tiny models rendering at once on two threads (two CUDA streams on a GPU).
    config = {"a_label": "fp32", "a_backend": "wan-animate-2", "a_options": TINY2, "concurrency": "streams",
              "b_label": "two-steps", "b_backend": "wan-animate-2", "b_options": {**TINY2, "steps": 2}}  # fmt: skip
    resources = {"renderer": RendererResource(width=64, height=128), **STORAGE}
    with dg.instance_for_test() as instance:
        upstream_caches(instance)
        result = dg.materialize([ab_comparison], partition_key=KEY, instance=instance, resources=resources,
                                run_config={"ops": {"ab_comparison": {"config": config}}})  # fmt: skip
        assert result.success
        (mat,) = result.asset_materializations_for_node("ab_comparison")
        assert mat.metadata["frames"].value == 120 and mat.metadata["concurrency"].value == "streams"
        out = storage.ab_dir("anchor", "nod")
        record = json.loads((out / "comparison.json").read_text())
        assert record["kind"] == "ab-comparison" and len(record["per_frame"]) == 120
        assert {record["a"]["label"], record["b"]["label"]} == {"fp32", "two-steps"}
        assert record["sides"]["fp32"]["weights"] == "random weights" and record["concurrency"]["mode"] == "streams"
        assert record["summary"]["identical_frames"] < 120  # 1 vs 2 steps: different clips
        assert (out / "fp32.mp4").is_file() and (out / "two-steps.mp4").is_file()
        assert all(f["ssim"] <= 1.0 and f["mean_abs_diff"] >= 0 for f in record["per_frame"])
        bad = dg.materialize([ab_comparison], partition_key=KEY, instance=instance, resources=resources, raise_on_error=False,
                             run_config={"ops": {"ab_comparison": {"config": {**config, "b_label": "fp32"}}}})  # fmt: skip
        assert not bad.success
