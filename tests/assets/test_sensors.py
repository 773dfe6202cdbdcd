import shutil

import dagster as dg

from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.sensors import loop_sensor, persona_inbox_sensor
from newsmotion_engine.guidance.palette import LOOP_IDS


def _tick(sensor, instance, cursor=None):
    # The storage resource's root is unset: $NEWSMOTION_STORAGE, this test's own folder.
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": StorageResource()})
    result = sensor(context)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def test_loop_sensor_adds_canonical_loops_and_settled_driving_videos(storage):
    driving = storage.driving_dir
    driving.mkdir(parents=True)
    (driving / "weather_point.mp4").write_bytes(b"\x00" * 100)
    (driving / "Bad Name.mp4").write_bytes(b"\x00" * 100)
    (driving / "nod.mp4").write_bytes(b"\x00" * 100)  # clashes with a canonical loop
    (driving / "notes.txt").write_text("hello")
    with dg.instance_for_test() as instance:
        first = _tick(loop_sensor, instance)
        assert set(instance.get_dynamic_partitions(loop_partitions.name)) == set(LOOP_IDS)
        assert {r.partition_key for r in first.run_requests} == set(LOOP_IDS)
        second = _tick(loop_sensor, instance, first.cursor)  # the video's size held still: ready
        assert "weather_point" in instance.get_dynamic_partitions(loop_partitions.name)
        video_requests = [r for r in second.run_requests if r.partition_key == "weather_point"]
        assert len(video_requests) == 1 and video_requests[0].run_key.startswith("video:weather_point.mp4:")
        third = _tick(loop_sensor, instance, second.cursor)
        assert not [r for r in third.run_requests if r.partition_key == "weather_point"]
        assert len(instance.get_dynamic_partitions(loop_partitions.name)) == len(LOOP_IDS) + 1


def test_persona_sensor_ingests_portraits_resolves_clashes_and_skips_bad_files(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(astronaut_png, inbox / "Jane Doe.png")
    (inbox / "notes.png").write_text("not really a png")
    (inbox / "!!!.png").write_bytes(astronaut_png.read_bytes())
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["jane-doe"])  # already someone else's
        first = _tick(persona_inbox_sensor, instance)
        assert not first.run_requests
        second = _tick(persona_inbox_sensor, instance, first.cursor)
        assert [r.partition_key for r in second.run_requests] == ["jane-doe-2"]
        assert "jane-doe-2" in instance.get_dynamic_partitions(persona_partitions.name)
        assert storage.find_persona_source("jane-doe-2").read_bytes() == astronaut_png.read_bytes()
        # Nothing new: no requests, and the bad files are not reported again.
        third = _tick(persona_inbox_sensor, instance, second.cursor)
        assert not third.run_requests
        # A changed file keeps its id and is ingested again.
        (inbox / "Jane Doe.png").write_bytes(astronaut_png.read_bytes() + b"\x00")
        fourth = _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance, third.cursor).cursor)
        assert [r.partition_key for r in fourth.run_requests] == ["jane-doe-2"]


def test_persona_sensor_survives_a_missing_inbox():
    with dg.instance_for_test() as instance:
        result = _tick(persona_inbox_sensor, instance)
        assert not result.run_requests
