"""Per-frame A/B measures from two mp4s (streaming, the engine's reader)."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.video.compare import PSNR_CAP_DB, VideoComparison, compare_frames, compare_videos, frame_psnr_db, psnr_db
from newsmotion_engine.video.encode import VideoEncoder


def _clip(path, frames, fps=30):
    h, w = frames[0].shape[:2]
    with VideoEncoder(path, w, h, fps) as enc:
        for f in frames:
            enc.write(f)
    return path


def _frames(n, seed, h=64, w=48):
    rng = np.random.default_rng(seed)
    base = np.zeros((h, w, 3), np.uint8)
    base[:, :, 1] = 177
    out = []
    for i in range(n):
        f = base.copy()
        f[10 + i : 30 + i, 10:30] = rng.integers(0, 255, 3, dtype=np.uint8)
        out.append(f)
    return out


def test_frame_measures_known_values():
    a = np.full((32, 32, 3), 100, np.uint8)
    b = a.copy()
    same = compare_frames(0, a, b)
    assert same.psnr_db is None and same.ssim == pytest.approx(1.0) and same.mean_abs_diff == 0
    b[:] = 110
    diff = compare_frames(1, a, b)
    assert diff.mean_abs_diff == pytest.approx(10.0)
    assert diff.psnr_db == pytest.approx(10 * np.log10(255**2 / 100), abs=1e-3)


def test_psnr_over_a_mask_and_capped():
    a = np.full((8, 8, 3), 100, np.uint8)
    b = a.copy()
    b[:4] = 110
    top = np.zeros((8, 8), bool)
    top[:4] = True
    assert frame_psnr_db(a, b, ~top) is None and psnr_db(a, b, ~top) == PSNR_CAP_DB
    assert frame_psnr_db(a, b, top) == pytest.approx(10 * np.log10(255**2 / 100), abs=1e-6)
    assert psnr_db(a, b) == pytest.approx(10 * np.log10(255**2 / 50), abs=1e-6)


def test_compare_videos_streams_per_frame_and_writes_json(tmp_path):
    frames = _frames(12, 0)
    a = _clip(tmp_path / "a.mp4", frames)
    same = compare_videos(a, _clip(tmp_path / "a2.mp4", frames), labels=("x", "y"))
    assert len(same.frames) == 12 and same.summary()["identical_frames"] == 12  # same encoder, same bytes
    other = compare_videos(a, _clip(tmp_path / "b.mp4", _frames(12, 1)), labels=("x", "z"))
    s = other.summary()
    assert s["frames"] == 12 and s["identical_frames"] < 12 and 0 < s["mean_abs_diff_mean"] and s["ssim_mean"] < 1
    record = VideoComparison.read(other.write(tmp_path / "out" / "ab.json"))
    assert record["a"]["label"] == "x" and len(record["per_frame"]) == 12 and record["summary"] == s


def test_compare_videos_bad_input(tmp_path):
    a = _clip(tmp_path / "a.mp4", _frames(6, 0))
    with pytest.raises(BadInputError, match="ends after 4 frames"):
        compare_videos(a, _clip(tmp_path / "short.mp4", _frames(4, 0)))
    with pytest.raises(BadInputError, match="compare clips of one size"):
        compare_videos(a, _clip(tmp_path / "big.mp4", _frames(6, 0, h=80)))
    with pytest.raises(BadInputError, match="file not found"):
        compare_videos(a, tmp_path / "missing.mp4")
