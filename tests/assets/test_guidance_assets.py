import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.checks import guidance_cache_valid
from newsmotion_engine.guidance.cache import load_guidance
from newsmotion_assets.partitions import loop_partitions
from newsmotion_assets.resources import StorageResource

# Unset root: $NEWSMOTION_STORAGE, which tests/conftest.py points at each test's own folder.
RESOURCES = {"storage": StorageResource()}


def test_materialize_one_loop_with_metadata_and_passing_check(storage):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        result = dg.materialize([guidance_cache, guidance_cache_valid], partition_key="nod", instance=instance, resources=RESOURCES)
        assert result.success
        (mat,) = result.asset_materializations_for_node("guidance_cache")
        meta = {k: v.value for k, v in mat.metadata.items()}
        assert meta["frames"] == 120 and meta["fps"] == 30 and meta["source"] == "procedural"
        assert meta["warm_load_ms_p50"] > 0 and meta["bytes"] > 120 * 133 * 3 * 4
        assert meta["confidence_body"] > 0.5 and "data:image/png;base64," in meta["preview"]
        # The cache's digest is the data version: downstream renders go stale when it changes.
        assert mat.tags["dagster/data_version"] == meta["digest"] == load_guidance(storage, "nod").digest
        checks = result.get_asset_check_evaluations()
        assert [c.passed for c in checks] == [True]
    assert (storage.guidance_dir("nod") / "keypoints.npy").is_file()


def test_check_fails_on_a_damaged_cache(storage):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        assert dg.materialize([guidance_cache], partition_key="nod", instance=instance, resources=RESOURCES).success
        path = storage.guidance_dir("nod") / "keypoints.npy"
        data = bytearray(path.read_bytes())
        data[-4:] = b"\x00\x00\xc0\x7f"  # a NaN, same size: only the hash check sees it
        path.write_bytes(bytes(data))
        # The asset's cheap validation (sizes, headers) reuses the cache; the check hashes it.
        result = dg.materialize(
            [guidance_cache, guidance_cache_valid], partition_key="nod", instance=instance, resources=RESOURCES, raise_on_error=False
        )
        (check,) = result.get_asset_check_evaluations()
        assert not check.passed and "sha256" in check.metadata["problem"].value


def test_bad_driving_video_fails_its_run_with_a_clear_message(storage):
    driving = storage.driving_dir
    driving.mkdir(parents=True)
    (driving / "bogus.mp4").write_text("this is not a video")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["bogus"])
        result = dg.materialize([guidance_cache], partition_key="bogus", instance=instance, resources=RESOURCES, raise_on_error=False)
        assert not result.success
        failure = result.get_step_failure_events()[0]
        message = failure.event_specific_data.error.to_string()
        assert "bogus.mp4: not a readable video" in message
    assert not storage.guidance_dir("bogus").exists()
