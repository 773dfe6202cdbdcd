import os
import shutil

import dagster as dg
import pytest

from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.sensors import loop_sensor, persona_inbox_sensor
from newsmotion_engine.guidance.catalogue import LOOP_IDS
from newsmotion_engine.persona.sources import add_persona, install_source


def _tick(sensor, instance, cursor=None):
    # The storage resource's root is unset: $NEWSMOTION_STORAGE, this test's own folder.
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": StorageResource()})
    result = sensor(context)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def _ticks(sensor, instance, n, cursor=None):
    """``n`` ticks in a row; the last result (an inbox file is taken in on its third sighting)."""
    for _ in range(n):
        result = _tick(sensor, instance, cursor)
        cursor = result.cursor
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


def test_persona_sensor_ingests_portraits_resolves_clashes_and_rejects_bad_files(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(astronaut_png, inbox / "Jane Doe.png")
    (inbox / "notes.png").write_text("not really a png")
    (inbox / "!!!.png").write_bytes(astronaut_png.read_bytes())
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["jane-doe"])  # already someone else's
        first = _tick(persona_inbox_sensor, instance)
        assert not first.run_requests
        # Bad files leave the inbox at once, each with its reason.
        rejected = storage.persona_inbox_rejected
        assert sorted(p.name for p in rejected.iterdir()) == ["!!!.png", "!!!.png.reason.txt", "notes.png", "notes.png.reason.txt"]
        assert "no letters or digits" in (rejected / "!!!.png.reason.txt").read_text()
        assert sorted(p.name for p in inbox.iterdir() if p.is_file()) == ["Jane Doe.png"]
        second = _tick(persona_inbox_sensor, instance, first.cursor)  # unchanged once: not yet
        assert not second.run_requests and storage.find_persona_source("jane-doe-2") is None
        third = _tick(persona_inbox_sensor, instance, second.cursor)  # unchanged over two ticks
        assert [r.partition_key for r in third.run_requests] == ["jane-doe-2"]
        assert "jane-doe-2" in instance.get_dynamic_partitions(persona_partitions.name)
        assert storage.find_persona_source("jane-doe-2").read_bytes() == astronaut_png.read_bytes()
        # Nothing new: no requests; the portrait waits in the inbox until its persona is built.
        fourth = _tick(persona_inbox_sensor, instance, third.cursor)
        assert not fourth.run_requests and (inbox / "Jane Doe.png").is_file()
        # A changed file keeps its id and is ingested again.
        (inbox / "Jane Doe.png").write_bytes(astronaut_png.read_bytes() + b"\x00")
        fifth = _ticks(persona_inbox_sensor, instance, 3, fourth.cursor)
        assert [r.partition_key for r in fifth.run_requests] == ["jane-doe-2"]


def test_a_file_still_being_written_is_not_taken_in(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    data = astronaut_png.read_bytes()
    partial = inbox / "anna.png"
    partial.write_bytes(data[: len(data) // 2])  # a copy that stalls half-way
    with dg.instance_for_test() as instance:
        cursor = _tick(persona_inbox_sensor, instance).cursor
        cursor = _tick(persona_inbox_sensor, instance, cursor).cursor  # unchanged for one tick only
        assert storage.find_persona_source("anna") is None and partial.is_file()
        partial.write_bytes(data)  # the copy finishes
        result = _ticks(persona_inbox_sensor, instance, 3, cursor)
        assert [r.partition_key for r in result.run_requests] == ["anna"]
        assert storage.find_persona_source("anna").read_bytes() == data


def test_a_truncated_portrait_is_rejected_with_its_reason_not_run(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    data = astronaut_png.read_bytes()
    (inbox / "anna.png").write_bytes(data[: len(data) // 2])  # stays truncated
    with dg.instance_for_test() as instance:
        result = _ticks(persona_inbox_sensor, instance, 3)
        assert not result.run_requests and not instance.get_dynamic_partitions(persona_partitions.name)
        assert storage.find_persona_source("anna") is None and not (inbox / "anna.png").exists()
        reason = (storage.persona_inbox_rejected / "anna.png.reason.txt").read_text()
        assert "truncated or damaged" in reason


def test_a_built_portrait_moves_to_processed(astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(astronaut_png, inbox / "Anna.png")
    with dg.instance_for_test() as instance:
        taken = _ticks(persona_inbox_sensor, instance, 3)
        assert [r.partition_key for r in taken.run_requests] == ["anna"]
        assert dg.materialize([persona_cache], partition_key="anna", instance=instance, resources={"storage": StorageResource()}).success
        after = _tick(persona_inbox_sensor, instance, taken.cursor)
        assert not after.run_requests
        assert not (inbox / "Anna.png").exists()
        assert (storage.persona_inbox_processed / "Anna.png").read_bytes() == astronaut_png.read_bytes()
        assert storage.find_persona_source("anna") is not None  # the persona keeps its own copy
        assert not _tick(persona_inbox_sensor, instance, after.cursor).run_requests


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
        _ticks(persona_inbox_sensor, instance, 3)
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["anna"]
        source = storage.find_persona_source("anna")
        mtime = source.stat().st_mtime_ns
        # A fresh cursor (sensor reset): the same file is the same persona, not "anna-2", and its
        # source is not rewritten.
        _ticks(persona_inbox_sensor, instance, 3)
        assert instance.get_dynamic_partitions(persona_partitions.name) == ["anna"]
        assert source.stat().st_mtime_ns == mtime


def test_a_rejected_portrait_leaves_the_inbox_and_is_not_taken_in_again(coffee_jpg, astronaut_png, storage):
    inbox = storage.persona_inbox
    inbox.mkdir(parents=True)
    shutil.copy(coffee_jpg, inbox / "mug.jpg")
    resources = {"storage": StorageResource()}
    with dg.instance_for_test() as instance:
        ingested = _ticks(persona_inbox_sensor, instance, 3)
        assert [r.partition_key for r in ingested.run_requests] == ["mug"]
        failed = dg.materialize([persona_cache], partition_key="mug", instance=instance, resources=resources, raise_on_error=False)
        assert not failed.success and not instance.get_dynamic_partitions(persona_partitions.name)
        assert (storage.persona_rejected / "mug.jpg").is_file()
        run = instance.get_run_by_id(failed.run_id)
        assert run.tags["newsmotion/failure"] == "bad_input"
        after = _tick(persona_inbox_sensor, instance, ingested.cursor)
        assert not after.run_requests and not instance.get_dynamic_partitions(persona_partitions.name)
        # The inbox copy follows, with the reason the run gave.
        assert not (inbox / "mug.jpg").exists()
        assert "person" in (storage.persona_inbox_rejected / "mug.jpg.reason.txt").read_text()
        # Dropped again (a fresh cursor): the same picture goes straight to rejected/...
        shutil.copy(coffee_jpg, inbox / "mug.jpg")
        fresh = _ticks(persona_inbox_sensor, instance, 3)
        assert not fresh.run_requests and not instance.get_dynamic_partitions(persona_partitions.name)
        assert storage.find_persona_source("mug") is None and not (inbox / "mug.jpg").exists()
        assert "rejected before" in (storage.persona_inbox_rejected / "mug-2.jpg.reason.txt").read_text()
        # ...while another picture under that name is a new portrait.
        shutil.copy(astronaut_png, inbox / "mug.jpg")
        replaced = _ticks(persona_inbox_sensor, instance, 3, fresh.cursor)
        assert [r.partition_key for r in replaced.run_requests] == ["mug"]


@pytest.mark.parametrize("name", [".mug.jpg.part", "Not An Id.png", "notes.txt"])
def test_sources_that_are_not_personas_are_ignored(name, astronaut_png, storage):
    folder = storage.persona_sources
    folder.mkdir(parents=True)
    shutil.copy(astronaut_png, folder / name)
    with dg.instance_for_test() as instance:
        assert not _tick(persona_inbox_sensor, instance).run_requests
        assert not instance.get_dynamic_partitions(persona_partitions.name)
