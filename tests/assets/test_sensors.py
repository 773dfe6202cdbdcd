import os
import shutil

import dagster as dg
import pytest

from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.sensors import loop_sensor, persona_inbox_sensor
from newsmotion_engine.guidance.palette import LOOP_IDS
from newsmotion_engine.persona.sources import add_persona, install_source


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


def test_loop_sensor_restores_a_removed_loop_whose_video_is_still_on_disk(storage):
    driving = storage.driving_dir
    driving.mkdir(parents=True)
    (driving / "weather_point.mp4").write_bytes(b"\x00" * 100)
    with dg.instance_for_test() as instance:
        cursor = _tick(loop_sensor, instance, _tick(loop_sensor, instance).cursor).cursor
        instance.delete_dynamic_partition(loop_partitions.name, "weather_point")
        again = _tick(loop_sensor, instance, cursor)
        assert "weather_point" in instance.get_dynamic_partitions(loop_partitions.name)
        assert [r.run_key for r in again.run_requests if r.partition_key == "weather_point"] == [
            f"video:weather_point.mp4:100:{(driving / 'weather_point.mp4').stat().st_mtime_ns}"
        ]
        assert not [r for r in _tick(loop_sensor, instance, again.cursor).run_requests if r.partition_key == "weather_point"]


def test_personas_added_with_the_cli_become_partitions_once(astronaut_png, storage):
    add_persona(storage, astronaut_png, "jane")  # what `newsmotion persona add IMAGE --id jane` does
    with dg.instance_for_test() as instance:
        first = _tick(persona_inbox_sensor, instance)
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["jane"]
        assert [r.partition_key for r in first.run_requests] == ["jane"]
        assert not _tick(persona_inbox_sensor, instance, first.cursor).run_requests
        # Replaced (`persona add --force`): its cache is requested again.
        source = storage.find_persona_source("jane")
        os.utime(source, ns=(1, 1))
        assert [r.partition_key for r in _tick(persona_inbox_sensor, instance, first.cursor).run_requests] == ["jane"]


def test_a_persona_already_materialized_is_not_requested_again_on_a_new_cursor(astronaut_png, storage):
    install_source(storage, astronaut_png, "done")
    install_source(storage, astronaut_png, "pending")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["done", "pending"])
        instance.report_runless_asset_event(dg.AssetMaterialization(persona_cache.key, partition="done"))
        result = _tick(persona_inbox_sensor, instance)
        assert [r.partition_key for r in result.run_requests] == ["pending"]


def test_inbox_portrait_already_ingested_keeps_its_persona_when_the_cursor_is_lost(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(astronaut_png, inbox / "Anna.png")
    with dg.instance_for_test() as instance:
        _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance).cursor)
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["anna"]
        source = storage.find_persona_source("anna")
        mtime = source.stat().st_mtime_ns
        # A fresh cursor (sensor reset): the same file is the same persona, not "anna-2", and its
        # source is not rewritten.
        _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance).cursor)
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["anna"]
        assert source.stat().st_mtime_ns == mtime


def test_a_rejected_portrait_is_not_taken_in_again(coffee_jpg, astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(coffee_jpg, inbox / "mug.jpg")
    resources = {"storage": StorageResource()}
    with dg.instance_for_test() as instance:
        ingested = _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance).cursor)
        assert [r.partition_key for r in ingested.run_requests] == ["mug"]
        failed = dg.materialize([persona_cache], partition_key="mug", instance=instance, resources=resources, raise_on_error=False)
        assert not failed.success and not instance.get_dynamic_partitions(persona_partitions.name)
        assert (storage.persona_rejected / "mug.jpg").is_file()
        after = _tick(persona_inbox_sensor, instance, ingested.cursor)
        assert not after.run_requests and not instance.get_dynamic_partitions(persona_partitions.name)
        # Even from a fresh cursor, or touched, the same picture stays out...
        os.utime(inbox / "mug.jpg", ns=(2, 2))
        fresh = _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance).cursor)
        assert not fresh.run_requests and not instance.get_dynamic_partitions(persona_partitions.name)
        assert storage.find_persona_source("mug") is None
        # ...while another picture under that name is a new portrait.
        shutil.copy(astronaut_png, inbox / "mug.jpg")
        replaced = _tick(persona_inbox_sensor, instance, _tick(persona_inbox_sensor, instance, fresh.cursor).cursor)
        assert [r.partition_key for r in replaced.run_requests] == ["mug"]


@pytest.mark.parametrize("name", [".mug.jpg.part", "Not An Id.png", "notes.txt"])
def test_sources_that_are_not_personas_are_ignored(name, astronaut_png, storage):
    folder = storage.persona_sources
    folder.mkdir(parents=True)
    shutil.copy(astronaut_png, folder / name)
    with dg.instance_for_test() as instance:
        assert not _tick(persona_inbox_sensor, instance).run_requests
        assert not instance.get_dynamic_partitions(persona_partitions.name)
