import dagster as dg

from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.checks import persona_cache_valid
from newsmotion_assets.partitions import persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.persona.cache import load_persona
from newsmotion_engine.persona.sources import install_source, rejection_reason

RESOURCES = {"storage": StorageResource()}  # root: $NEWSMOTION_STORAGE, this test's own folder


def test_materialize_persona_with_metadata_and_check(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        result = dg.materialize([persona_cache, persona_cache_valid], partition_key="anchor", instance=instance, resources=RESOURCES)
        assert result.success
        (mat,) = result.asset_materializations_for_node("persona_cache")
        meta = {k: v.value for k, v in mat.metadata.items()}
        assert meta["matte_method"] == "selfie-segmentation"
        assert "face" in meta["visible_parts"] and "body" in meta["visible_parts"]
        assert 0 < meta["coverage_person"] < 1 and meta["warm_load_ms_p50"] > 0
        assert "data:image/png;base64," in meta["preview"]
        assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
        assert mat.tags["dagster/data_version"] == meta["digest"] == load_persona(storage, "anchor").digest
    assert storage.persona_dir("anchor").is_dir()


def test_persona_without_source_fails_clearly():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["ghost"])
        result = dg.materialize([persona_cache], partition_key="ghost", instance=instance, resources=RESOURCES, raise_on_error=False)
        assert not result.success
        message = result.get_step_failure_events()[0].event_specific_data.error.to_string()
        assert "unknown persona 'ghost': no source portrait" in message


def test_portrait_without_a_person_is_rejected_and_its_partition_removed(coffee_jpg, storage):
    install_source(storage, coffee_jpg, "mug")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["mug", "anchor"])
        result = dg.materialize(
            [persona_cache, persona_cache_valid], partition_key="mug", instance=instance, resources=RESOURCES,
            raise_on_error=False,
        )  # fmt: skip
        assert not result.success
        (failure,) = result.get_step_failure_events()
        reason = failure.event_specific_data.user_failure_data.description
        assert "\n" not in reason and reason.startswith("mug.jpg: no person detected")
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["anchor"]
        assert not result.get_asset_check_evaluations()  # nothing to check: no cache was written
    rejected = storage.persona_rejected / "mug.jpg"
    assert rejected.read_bytes() == coffee_jpg.read_bytes()
    assert rejection_reason(rejected).startswith("no person detected")
    assert storage.find_persona_source("mug") is None and not storage.persona_dir("mug").exists()
