import json

import dagster as dg

from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import scorecard
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, release_warm_backends
from newsmotion_engine import storage
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.video.encode import probe_video


def test_render_partition_then_scorecard(astronaut_png, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    install_source(astronaut_png, "anchor")
    key = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        resources = {"renderer": RendererResource(width=360, height=640)}
        result = dg.materialize([render], partition_key=key, instance=instance, resources=resources)
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        assert mat.metadata["renders"].value == 1 and mat.metadata["weights"].value == "none"
        assert "data:image/png;base64," in mat.metadata["contact_sheet"].value
        mp4 = storage.render_path("anchor", "nod", "warp")
        info = probe_video(mp4)
        assert (info["codec"], info["width"], info["height"], info["frames"]) == ("h264", 360, 640, 120)
        tele = json.loads(mp4.with_suffix(".json").read_text())
        # The render built both caches itself (nothing upstream was materialized in this instance).
        assert tele["guidance_cache"] == "rebuilt" and tele["persona_cache"] == "rebuilt"

        again = dg.materialize([render], partition_key=key, instance=instance, resources=resources)
        tele = json.loads(mp4.with_suffix(".json").read_text())
        assert again.success and tele["guidance_cache"] == "hit" and tele["persona_cache"] == "hit"

        card = dg.materialize([scorecard], instance=instance)
        (mat,) = card.asset_materializations_for_node("scorecard")
        assert mat.metadata["dagster/row_count"].value == 1
        rows = json.loads(open(mat.metadata["json"].value).read())
        assert rows[0]["persona_id"] == "anchor" and rows[0]["loop_id"] == "nod" and rows[0]["frames"] == 120
    release_warm_backends()


def test_render_unknown_persona_fails_its_run():
    key = dg.MultiPartitionKey({"persona": "ghost", "loop": "nod"})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["ghost"])
        result = dg.materialize(
            [render], partition_key=key, instance=instance, resources={"renderer": RendererResource()}, raise_on_error=False
        )
        assert not result.success
        assert "unknown persona 'ghost'" in result.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert not storage.render_path("ghost", "nod", "warp").exists()


def test_bad_renderer_config_fails_before_rendering():
    key = dg.MultiPartitionKey({"persona": "ghost", "loop": "nod"})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["ghost"])
        result = dg.materialize(
            [render], partition_key=key, instance=instance, resources={"renderer": RendererResource(width=721)},
            raise_on_error=False,
        )
        assert not result.success
        failures = [e for e in result.all_events if "FAILURE" in e.event_type_value]
        assert any("render width 721 is odd" in str(e.event_specific_data) for e in failures)


def test_wan_animate_tiny_through_the_resource(astronaut_png):
    """The diffusion backend plugs into the same resource and asset (tiny preset, random weights)."""
    install_source(astronaut_png, "anchor")
    key = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
    renderer = RendererResource(
        backend="wan-animate", options={"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32"}, width=64, height=128
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        result = dg.materialize([render], partition_key=key, instance=instance, resources={"renderer": renderer})
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        assert "random weights" in mat.metadata["weights"].value
    mp4 = storage.render_path("anchor", "nod", "wan-animate")
    assert probe_video(mp4)["frames"] == 120
    assert "random weights" in json.loads(mp4.with_suffix(".json").read_text())["backend_info"]["weights"]
