import dagster as dg

from newsmotion_assets.assets.persona import persona_cache, persona_cache_valid
from newsmotion_assets.partitions import persona_partitions
from newsmotion_engine import storage
from newsmotion_engine.persona.sources import install_source


def test_materialize_persona_with_metadata_and_check(astronaut_png):
    install_source(astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        result = dg.materialize([persona_cache, persona_cache_valid], partition_key="anchor", instance=instance)
        assert result.success
        (mat,) = result.asset_materializations_for_node("persona_cache")
        meta = {k: v.value for k, v in mat.metadata.items()}
        assert meta["matte_method"] == "selfie-segmentation"
        assert "face" in meta["visible_parts"] and "body" in meta["visible_parts"]
        assert 0 < meta["coverage_person"] < 1 and meta["warm_load_ms_p50"] > 0
        assert "data:image/png;base64," in meta["preview"]
        assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
    assert storage.persona_dir("anchor").is_dir()


def test_persona_without_source_fails_clearly():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["ghost"])
        result = dg.materialize([persona_cache], partition_key="ghost", instance=instance, raise_on_error=False)
        assert not result.success
        message = result.get_step_failure_events()[0].event_specific_data.error.to_string()
        assert "persona 'ghost' has no source portrait" in message
