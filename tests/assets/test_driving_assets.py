import dagster as dg

from newsmotion_assets.assets.backend import backend_guidance_cache
from newsmotion_assets.assets.driving import driving_clip
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.partitions import loop_partitions
from newsmotion_assets.resources import RendererResource, StorageResource

STORAGE = {"storage": StorageResource()}
ANIMATE2 = RendererResource(backend="wan-animate-2", options={"preset": "tiny", "device": "cpu"}, width=64, height=128)


def _meta(result):
    (mat,) = result.asset_materializations_for_node("driving_clip")
    return mat, {k: v.value for k, v in mat.metadata.items()}


def test_driving_clip_is_built_once_per_loop_for_wan_animate_2(storage):
    resources = {"renderer": ANIMATE2, **STORAGE}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        assert dg.materialize([guidance_cache], partition_key="nod", instance=instance, resources=STORAGE).success
        first, meta = _meta(dg.materialize([driving_clip], partition_key="nod", instance=instance, resources=resources))
        assert (meta["origin"], meta["frames"], meta["fps"], meta["size"], meta["built"]) == ("driver-render", 96, 24, "64x128", True)
        assert (storage.guidance_dir("nod") / "driving" / "64x128" / "frames.npy").is_file()
        second, meta = _meta(dg.materialize([driving_clip], partition_key="nod", instance=instance, resources=resources))
        assert meta["built"] is False
        assert first.tags["dagster/data_version"] == second.tags["dagster/data_version"] == meta["digest"]


def test_keypoint_driven_backends_skip_it(storage):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        _, meta = _meta(dg.materialize([driving_clip], partition_key="nod", instance=instance,
                                       resources={"renderer": RendererResource(), **STORAGE}))  # fmt: skip
        assert "driven by keypoints" in meta["skipped"]
        assert not storage.guidance_dir("nod").exists()


def test_missing_guidance_names_the_asset_and_the_sub_cache_depends_on_the_clip():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        result = dg.materialize([driving_clip], partition_key="nod", instance=instance,
                                resources={"renderer": ANIMATE2, **STORAGE}, raise_on_error=False)  # fmt: skip
        assert not result.success
        assert "materialize it first" in result.get_step_failure_events()[0].event_specific_data.error.to_string()
    deps = backend_guidance_cache.asset_deps[dg.AssetKey("backend_guidance_cache")]
    assert dg.AssetKey("driving_clip") in deps and dg.AssetKey("guidance_cache") in deps
