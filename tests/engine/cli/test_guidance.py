"""`newsmotion guidance build` and `extract`: reuse, forcing, bad ids and videos."""

import os
import stat

import pytest

from .conftest import run


def test_guidance_build_reuses_then_forces(capsys):
    code, out, _ = run(capsys, "guidance", "build", "nod", "welcome")
    assert code == 0 and out.count("built") == 2
    code, out, _ = run(capsys, "guidance", "build", "nod")
    assert code == 0 and "current" in out
    code, out, _ = run(capsys, "guidance", "build", "nod", "--force")
    assert code == 0 and "built" in out


@pytest.mark.parametrize("loop_id", ["../x", "A B", ""])
def test_bad_loop_ids(capsys, loop_id, storage):
    code, out, err = run(capsys, "guidance", "build", loop_id)
    assert code == 1 and err.startswith("error: invalid loop id") and err.count("\n") == 1
    assert not storage.guidance_root.exists() or not any(storage.guidance_root.iterdir())


def test_extract_rejects_non_video_and_leaves_nothing(capsys, tmp_path, storage):
    fake = tmp_path / "fake.mp4"
    fake.write_text("not a video at all")
    code, _, err = run(capsys, "guidance", "extract", str(fake), "--loop-id", "fake_loop")
    assert code == 1 and "fake.mp4" in err and err.count("\n") == 1
    assert not storage.guidance_dir("fake_loop").exists()
    assert not storage.driving_dir.exists() or not any(storage.driving_dir.iterdir())


def test_extract_missing_file_and_canonical_id(capsys, tmp_path):
    code, _, err = run(capsys, "guidance", "extract", str(tmp_path / "nope.mp4"), "--loop-id", "x1")
    assert code == 1 and "nope.mp4: driving video not found" in err
    code, _, err = run(capsys, "guidance", "extract", str(tmp_path / "nope.mp4"), "--loop-id", "nod")
    assert code == 1 and "canonical" in err


def test_extract_custom_loop_records_its_frame(capfd, tmp_path, storage):
    from newsmotion_engine.guidance.cache import guidance_status, load_guidance
    from newsmotion_engine.samples import write_moving_photo_video

    video = tmp_path / "take.mp4"
    write_moving_photo_video(video, frames=12, width=640, height=360)
    old_umask = os.umask(0o022)
    try:
        code, out, err = run(capfd, "guidance", "extract", str(video), "--loop-id", "weather_point")
    finally:
        os.umask(old_umask)
    assert code == 0
    assert err == ""  # mediapipe's native start-up lines are filtered (fd-level capture)
    # The kept driving video is readable by a Dagster daemon running as another user.
    assert stat.S_IMODE((storage.driving_dir / "weather_point.mp4").stat().st_mode) == 0o644
    cache = load_guidance(storage, "weather_point")
    assert (cache.width, cache.height, cache.frames, cache.source_kind) == (640, 360, 12, "video")
    assert (storage.driving_dir / "weather_point.mp4").read_bytes() == video.read_bytes()
    assert guidance_status(storage, "weather_point")[0] == "valid"
