"""The persona load benchmark reports consistent figures (not a timed test: no latency asserts
beyond sanity, the numbers belong in the scorecard)."""

from __future__ import annotations

import pytest
from PIL import Image
from skimage import data

from newsmotion_engine.bench.persona import bench_persona
from newsmotion_engine.errors import CacheMissingError

KEYS = {
    "load_ms_p50", "load_ms_p99", "load_touch_ms_p50", "cold_load_ms_p50", "cold_load_ms_p99",
    "cold_load_touch_ms_p50", "cold_load_touch_ms_p99", "first_load_fresh_process_ms", "build_s", "ratio",
}


@pytest.fixture()
def image(tmp_path):
    path = tmp_path / "Anchor Shot.png"
    Image.fromarray(data.astronaut()).save(path)
    return path


def test_bench_from_image_then_id(image, storage):
    result = bench_persona(storage, image, loads=15, cold_loads=2)
    assert KEYS <= set(result)
    assert result["persona_id"] == "bench-anchor-shot" and result["build_s_from"] == "measured"
    assert result["loads"] == 15 and result["cold_loads"] == 2
    assert 0 < result["load_ms_p50"] <= result["load_ms_p99"]
    assert result["cold_load_ms_p50"] <= result["cold_load_ms_p99"]
    # Reading every pixel costs more than mapping them.
    assert result["load_touch_ms_p50"] > result["load_ms_p50"]
    assert result["build_s"] > 0.05  # mediapipe + matte on a 720x720 block cannot be instant
    assert result["ratio"] == pytest.approx(result["build_s"] * 1e3 / result["load_ms_p50"], rel=0.01)
    assert result["first_load_fresh_process_ms"] > 0
    assert result["matte_method"] == "selfie-segmentation" and result["cache_bytes"] > 4 * 1280 * 720

    again = bench_persona(storage, "bench-anchor-shot", loads=5, cold_loads=1, fresh_process=False)
    assert again["build_s_from"] == "metadata" and again["first_load_fresh_process_ms"] is None
    assert again["build_s"] > 0


def test_bench_missing_persona(storage):
    with pytest.raises(CacheMissingError):
        bench_persona(storage, "nobody", loads=2, cold_loads=1, fresh_process=False)
