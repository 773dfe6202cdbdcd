"""`make demo` records its runs in the instance `make dev` opens, so afterwards the UI shows them
as current: neither the sensors nor automation request anything. And Dagster warns of nothing on
the way: the demo's output is its progress lines and tables."""

import dagster as dg

from newsmotion_assets import sensors
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.story import story
from newsmotion_assets.definitions import defs
from newsmotion_assets.demo import run_demo
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends


def test_after_the_demo_dagster_dev_requests_nothing(tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    with dg.instance_for_test() as instance:
        try:
            run_demo(instance, RendererResource(width=90, height=160, keep_warm=True))
        finally:
            release_warm_backends()
        assert len(instance.get_materialized_partitions(render.key)) == 7
        # e.g. a run of assets with different backfill policies
        warned = [f"{w.category.__name__}: {w.message}" for w in recwarn if issubclass(w.category, UserWarning)]
        assert warned == []

        # The first ticks of `dagster dev` on this instance: the folder sensors (no cursor yet)...
        for sensor in (sensors.loop_sensor, sensors.persona_inbox_sensor, sensors.story_sensor):
            context = dg.build_sensor_context(instance=instance, resources={"storage": StorageResource()})
            result = sensor(context)
            assert result.run_requests == [], (sensor.name, result.run_requests)
        # The story sensor takes a file once it stayed unchanged over two ticks: the demo's story,
        # rendered already, is not requested again.
        assert len(instance.get_materialized_partitions(story.key)) == 1
        context = dg.build_sensor_context(instance=instance, resources={"storage": StorageResource()})
        cursor = sensors.story_sensor(context).cursor
        context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": StorageResource()})
        assert sensors.story_sensor(context).run_requests == []
        # ...and the automation sensor's first evaluation.
        evaluation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert evaluation.total_requested == 0, [
            (r.key, r.true_subset.size) for r in evaluation.results if r.true_subset.size
        ]
