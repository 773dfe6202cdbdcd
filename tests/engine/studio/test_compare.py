"""The streamed A/B comparison: metrics, the heatmap clip, common frames and sizes, the record."""

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.studio.compare import RECORD_NAME, Comparison, compare_clips, heatmap_frame
from newsmotion_engine.video.compare import PSNR_CAP_DB, psnr_db, ssim_luma
from newsmotion_engine.video.encode import probe_video

from .conftest import write_clip


def test_ssim_agrees_with_skimage():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (96, 64, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-30, 30, a.shape), 0, 255).astype(np.uint8)
    import cv2

    ga, gb = (cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) for x in (a, b))
    ref = structural_similarity(ga, gb, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False)
    assert abs(ssim_luma(a, b) - ref) < 1e-3
    assert ssim_luma(a, a) == pytest.approx(1.0)


def test_psnr_and_heatmap():
    a = np.zeros((8, 8, 3), np.uint8)
    b = a.copy()
    assert psnr_db(a, b) == PSNR_CAP_DB
    b[0, 0] = 255
    assert psnr_db(a, b) == pytest.approx(10 * np.log10(64))  # one pixel of 64 fully off
    heat = heatmap_frame(a, b)
    assert heat.shape == a.shape and heat.dtype == np.uint8
    assert heat[0, 0].sum() > heat[4, 4].sum()  # the differing pixel is the bright one


def test_identical_clips(tmp_path):
    write_clip(tmp_path / "a.mp4", 10, 64, 96)
    write_clip(tmp_path / "b.mp4", 10, 64, 96)
    result = compare_clips(tmp_path / "a.mp4", tmp_path / "b.mp4", tmp_path / "out", labels=("warp", "other"))
    assert result.frames == 10 and result.notes == [] and result.pose_error == {}
    assert all(p == PSNR_CAP_DB for p in result.psnr_db) and all(s > 0.999 for s in result.ssim)
    assert probe_video(tmp_path / "out" / "heatmap.mp4")["frames"] == 10
    assert Comparison.read(tmp_path / "out") == result


def test_different_sizes_and_lengths_compare_common_frames_with_notes(tmp_path):
    write_clip(tmp_path / "a.mp4", 12, 64, 96)
    write_clip(tmp_path / "b.mp4", 8, 32, 48, shift=5)
    result = compare_clips(tmp_path / "a.mp4", tmp_path / "b.mp4", tmp_path / "out", labels=("warp", "wan"))
    assert result.frames == 8 and result.size == [64, 96]
    assert result.a["frames"] == 12 and result.b["frames"] == 8
    text = " ".join(result.notes)
    assert "wan is 32x48, warp is 64x96" in text and "compared over the 8 frames both have" in text
    assert len(result.psnr_db) == len(result.ssim) == 8 and max(result.psnr_db) < PSNR_CAP_DB
    assert probe_video(tmp_path / "out" / "heatmap.mp4")["frames"] == 8


def test_unreadable_clip_is_one_error_naming_it(tmp_path):
    write_clip(tmp_path / "a.mp4", 4, 64, 96)
    (tmp_path / "b.mp4").write_bytes(b"not a video")
    with pytest.raises(BadInputError, match="b.mp4"):
        compare_clips(tmp_path / "a.mp4", tmp_path / "b.mp4", tmp_path / "out")
    assert not (tmp_path / "out" / "heatmap.mp4").exists()


def test_other_version_or_damaged_record_is_not_reused(tmp_path):
    assert Comparison.read(tmp_path) is None
    (tmp_path / RECORD_NAME).write_text('{"schema_version": 999}')
    assert Comparison.read(tmp_path) is None
    (tmp_path / RECORD_NAME).write_text("{")
    assert Comparison.read(tmp_path) is None
