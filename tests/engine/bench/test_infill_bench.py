"""The infill benchmark runs end to end on a tiny drawn persona; its metrics are the standard ones."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from newsmotion_engine.bench.infill import bench_infill
from newsmotion_engine.video.compare import psnr_db, ssim_map


def _synthetic():
    # The drawn-figure fixtures live with the render tests; load them by path (no packages).
    path = Path(__file__).resolve().parents[1] / "render" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_render_fixtures", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_ssim_matches_scikit_image_and_psnr_is_standard():
    metrics = pytest.importorskip("skimage.metrics")
    import cv2

    rng = np.random.default_rng(0)
    a = cv2.GaussianBlur(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8), (0, 0), 1.5)
    b = np.clip(a.astype(int) + rng.integers(-12, 13, a.shape), 0, 255).astype(np.uint8)
    ga, gb = (cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) for x in (a, b))
    ref = metrics.structural_similarity(ga, gb, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=255)
    assert float(ssim_map(a, b).mean()) == pytest.approx(ref, abs=2e-3)
    mse = np.mean((a.astype(float) - b) ** 2)
    assert psnr_db(a, b) == pytest.approx(10 * np.log10(255**2 / mse), abs=1e-3)
    assert psnr_db(a, a) == 100.0


def test_bench_infill_reports_quality_per_clip_and_overall(tmp_path):
    fx = _synthetic()
    persona = fx.make_persona(216, 384, persona_id="synth")
    res = bench_infill(tmp_path, persona=persona, ratios=(2, 3), loops=("nod",), frames=10, width=216, height=384,
                       timing_pairs=1, torch_cpu=False, threads=1)  # fmt: skip
    assert res["benchmark"] == "infill"
    assert [c["name"] for c in res["clips"]] == ["warp/nod", "cutout/moderate", "cutout/fast", "photo/moderate"]
    for clip in res["clips"]:
        assert clip["frames"] == 10 and len(clip["window"]) == 2
        for key, infilled in (("1:2", 4), ("1:3", 6)):  # 10 frames, no loop: keys 0,2,..,8,9 / 0,3,6,9
            m = clip[key]
            assert m["frames_infilled"] == infilled
            assert 0 < m["psnr_db"] <= 100 and -1 <= m["ssim"] <= 1
            assert m["worst_frame"]["psnr"] <= m["psnr_db"]
    moving = [c for c in res["clips"] if c["kind"] == "synthetic"]
    for clip in moving:  # real motion: the infill beats repeating the nearer keyframe
        assert clip["1:2"]["psnr_db"] > clip["1:2"]["hold_psnr_db"]
    assert res["overall"]["1:2"]["frames_infilled"] == 16
    assert res["infill_psnr_db"] == res["overall"]["1:2"]["psnr_db"]
    assert set(res["by_kind"]["1:2"]) == {"warp", "synthetic"}
    assert res["speed"]["flow_ms"] > 0 and res["speed"]["ms_per_infilled_frame"]["1:2"] > 0
    assert res["meets_target"]["1:2"]["synthetic"]["psnr"] == (res["by_kind"]["1:2"]["synthetic"]["psnr_db"] >= 35)
