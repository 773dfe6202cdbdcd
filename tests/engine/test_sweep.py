"""The stale temp-file sweep: a dead writer's leftovers go, a live writer's stay."""

import os

from filelock import FileLock

from newsmotion_engine import cachedir
from newsmotion_engine.sweep import sweep_stale_temp, temp_kind


def _touch(path, size=10, age_s=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    if age_s:
        t = path.stat().st_mtime - age_s
        os.utime(path, (t, t))
    return path


def test_names_of_every_writer_are_recognized():
    assert temp_kind(".warp.1234.0123abcd.tmp.mp4") == "video"
    assert temp_kind(".warp.json.1234.0123abcd.tmp") == "telemetry"
    assert temp_kind(".nod.tmp-ab_cd123") == "cache build"
    assert temp_kind(".nod.old-77-0123abcd") == "replaced cache"
    assert temp_kind(".anna.jpg.k2j4_9zq.part") == "copy"
    assert temp_kind(".warp.mp4.0123abcd.probe") == "probe"
    for name in ("warp.mp4", "warp.json", ".warp.mp4.lock", "metadata.json", ".hidden"):
        assert temp_kind(name) is None


def test_a_dead_renders_temp_goes_at_once_a_live_ones_stays(storage):
    clip = storage.render_path("anna", "nod", "warp")
    dead = _touch(clip.with_name(".warp.4242.0123abcd.tmp.mp4"), 309_000)
    keep = _touch(clip.with_name("warp.mp4"), 100)
    lock = cachedir.lock_path(clip)
    with FileLock(str(lock)):  # a live writer of this clip (another file descriptor: flock conflicts)
        report = sweep_stale_temp(storage.root)
        assert report.removed == [] and report.kept == [dead] and dead.exists()
    report = sweep_stale_temp(storage.root)
    assert [(e.path, e.kind, e.bytes) for e in report.removed] == [(dead, "video", 309_000)]
    assert report.removed[0].why == "its lock is free"
    assert not dead.exists() and keep.exists() and lock.exists()


def test_a_dead_cache_build_folder_goes_when_its_lock_is_free(storage):
    cache = storage.guidance_dir("nod")
    build = cache.parent / ".nod.tmp-abcd1234"
    _touch(build / "keypoints.npy", 50)
    with FileLock(str(cachedir.lock_path(cache))):
        assert sweep_stale_temp(storage.root).kept == [build]
    report = sweep_stale_temp(storage.root)
    assert [(e.path, e.kind, e.bytes) for e in report.removed] == [(build, "cache build", 50)]
    assert not build.exists()


def test_lockless_temps_go_only_when_old(storage):
    young = _touch(storage.persona_sources / ".anna.jpg.k2j4_9zq.part")
    old = _touch(storage.persona_sources / ".bob.jpg.q1w2e3r4.part", age_s=600)
    report = sweep_stale_temp(storage.root, min_age_s=300)
    assert [e.path for e in report.removed] == [old] and report.kept == [young]
    assert report.removed[0].why.startswith("unchanged for 6")
    assert young.exists() and not old.exists()


def test_missing_root_is_an_empty_report(tmp_path):
    report = sweep_stale_temp(tmp_path / "nowhere")
    assert report.removed == [] and report.kept == []
