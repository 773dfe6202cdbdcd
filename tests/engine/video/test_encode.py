"""Streaming encoder: valid h264 output, and clear errors with no file left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.video import EncoderError, VideoEncoder, probe_video

W, H = 96, 64


def frames(n: int, w: int = W, h: int = H):
    rng = np.random.default_rng(0)
    for i in range(n):
        f = np.zeros((h, w, 3), np.uint8)
        f[..., 1] = 177
        f[:, (i * 5) % w : (i * 5) % w + 10] = rng.integers(0, 255, 3)  # a moving bar
        yield f


@pytest.mark.parametrize("pipe_format", ["yuv420p", "rgb24"])
def test_ten_frames_make_a_valid_h264_mp4(tmp_path, pipe_format):
    out = tmp_path / "clip.mp4"
    with VideoEncoder(out, W, H, 30, pipe_format=pipe_format) as enc:
        for f in frames(10):
            enc.write(f)
    info = probe_video(out)
    assert info == {"codec": "h264", "pix_fmt": "yuv420p", "width": W, "height": H, "frames": 10, "fps": 30.0}
    assert enc.encoder in ("libx264", "h264_nvenc") and enc.frames == 10 and enc.mux_ms > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]  # no temp files left
    # +faststart: the index (moov) comes before the media data (mdat).
    head = out.read_bytes()[:4096]
    assert head.find(b"moov") != -1 and (head.find(b"mdat") == -1 or head.find(b"moov") < head.find(b"mdat"))


def test_colours_survive_the_yuv_pipe(tmp_path):
    import cv2

    out = tmp_path / "green.mp4"
    with VideoEncoder(out, W, H, 30) as enc:
        for _ in range(3):
            enc.write(np.full((H, W, 3), (0, 177, 64), np.uint8))
    ok, bgr = cv2.VideoCapture(str(out)).read()
    assert ok
    assert np.abs(bgr[H // 2, W // 2, ::-1].astype(int) - (0, 177, 64)).max() <= 3


def test_missing_output_folder_fails_before_ffmpeg_starts(tmp_path):
    out = tmp_path / "nope" / "clip.mp4"
    with pytest.raises(BadInputError) as info:
        VideoEncoder(out, W, H, 30)
    assert "does not exist" in str(info.value) and str(out) in str(info.value)
    assert not (tmp_path / "nope").exists()


def _make_read_only(folder):
    """chmod 555 (a normal user), or the immutable flag (root ignores permission bits)."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            return False
    try:
        (folder / "probe").touch()
    except OSError:
        return True
    (folder / "probe").unlink()
    return False


def _undo_read_only(folder):
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


def test_read_only_folder_fails_before_rendering(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    try:
        if not _make_read_only(ro):
            pytest.skip("cannot make a read-only folder here")
        with pytest.raises(BadInputError, match="not writable"):
            VideoEncoder(ro / "clip.mp4", W, H, 30)
        assert list(ro.iterdir()) == []
    finally:
        _undo_read_only(ro)


def test_killed_ffmpeg_is_a_clear_error_and_leaves_no_file(tmp_path):
    out = tmp_path / "clip.mp4"
    enc = VideoEncoder(out, W, H, 30)
    gen = frames(10_000)
    for _ in range(5):
        enc.write(next(gen))
    enc.process.kill()
    enc.process.wait()
    with pytest.raises(EncoderError) as info:
        for f in gen:  # the error surfaces on a following write (or at close)
            enc.write(f)
        enc.close()
    msg = str(info.value)
    assert str(out) in msg and "killed by signal" in msg
    assert list(tmp_path.iterdir()) == []


def test_exception_in_the_frame_source_leaves_no_file(tmp_path):
    out = tmp_path / "clip.mp4"
    with pytest.raises(ZeroDivisionError):
        with VideoEncoder(out, W, H, 30) as enc:
            for i, f in enumerate(frames(10)):
                enc.write(f)
                if i == 4:
                    1 / 0
    assert enc.process.poll() is not None  # ffmpeg was stopped
    assert list(tmp_path.iterdir()) == []


def test_ffmpeg_failure_reports_its_stderr(tmp_path):
    out = tmp_path / "clip.mp4"
    with pytest.raises(EncoderError) as info:
        with VideoEncoder(out, W, H, 30, preset="no-such-preset") as enc:
            for f in frames(5):
                enc.write(f)
    assert str(out) in str(info.value) and "ffmpeg said" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_binary_is_a_clear_error(tmp_path, monkeypatch):
    out = tmp_path / "clip.mp4"
    with pytest.raises(EncoderError, match="not found"):
        VideoEncoder(out, W, H, 30, ffmpeg=str(tmp_path / "no-ffmpeg"))
    monkeypatch.setenv("NEWSMOTION_FFMPEG", str(tmp_path / "no-ffmpeg"))
    with pytest.raises(EncoderError, match="NEWSMOTION_FFMPEG"):
        VideoEncoder(out, W, H, 30)
    assert list(tmp_path.iterdir()) == []


def test_bad_frames_and_sizes(tmp_path):
    with pytest.raises(BadInputError, match="even"):
        VideoEncoder(tmp_path / "a.mp4", 95, 64, 30)
    with VideoEncoder(tmp_path / "b.mp4", W, H, 30) as enc:
        with pytest.raises(ValueError, match="expects"):
            enc.write(np.zeros((H, W), np.uint8))
        enc.write(np.zeros((H, W, 3), np.uint8))
    with pytest.raises(NewsmotionError, match="after close"):
        enc.write(np.zeros((H, W, 3), np.uint8))


def test_probe_rejects_a_non_video(tmp_path):
    bad = tmp_path / "x.mp4"
    bad.write_bytes(b"not a video at all")
    with pytest.raises(BadInputError, match="not a readable video"):
        probe_video(bad)
    with pytest.raises(BadInputError, match="not found"):
        probe_video(tmp_path / "missing.mp4")


def test_an_encoder_whose_abort_never_ran_leaves_nothing_at_exit(tmp_path):
    # A second Ctrl-C can land while the first KeyboardInterrupt unwinds, before ``abort`` is
    # reached (CI once saw the temp file left so). The finalizer still kills ffmpeg and removes
    # the temporary file when the interpreter exits.
    child = f"""
import numpy as np
from newsmotion_engine.video import VideoEncoder
enc = VideoEncoder({str(tmp_path / 'out.mp4')!r}, 64, 48, 10)
for _ in range(5):
    enc.write(np.zeros((48, 64, 3), np.uint8))
print(enc.process.pid, flush=True)
raise KeyboardInterrupt  # no close, no abort
"""
    repo = str(Path(__file__).resolve().parents[3])
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": repo})  # fmt: skip
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr
    ffmpeg_pid = int(done.stdout.split()[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp file, no partial mp4
    with pytest.raises(ProcessLookupError):
        os.kill(ffmpeg_pid, 0)  # killed and reaped
