"""The echomimic-v3 benchmark renders stock and ours through render_clip on the tiny preset (CPU,
random weights) and records a result file; the figures there are only speed and memory."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from benchmarks import echomimic_v3 as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_bench_runs_stock_and_ours_on_the_tiny_preset(tmp_path):
    out = tmp_path / "echomimic.json"
    result = bench.bench_echomimic("tiny", sizes=[(64, 128)], seconds=0.2, steps=1, device="cpu", json_path=out, log=lambda m: None)
    rows = result["rows"]["64x128"]
    assert set(rows) == {"stock", "batch_cfg", "batch_cfg+teacache"}  # the FP8 / compile variants are for CUDA machines
    assert rows["batch_cfg+teacache"]["approximate"] and not rows["batch_cfg"]["approximate"]
    for row in rows.values():
        assert "error" not in row, row
        assert row["frames_out"] == 6 and row["segments"] == 1  # 0.2 s at 30 fps; 5 frames at 25 fps: one segment
    assert result["speedup_64x128"] == round(rows["stock"]["end_to_end_s"] / rows["batch_cfg"]["end_to_end_s"], 3)
    assert result["weights"] == "random weights"
    assert read_lab_data(out)["rows"]["64x128"]["stock"]["frames_out"] == 6


def test_stock_encodes_its_seams_as_released_and_ours_skips_the_zeros(tmp_path, monkeypatch):
    """Stock's timed render runs inside zero_tail.released_encodes (the official encode); ours' do not."""
    from newsmotion_engine.render import clip
    from newsmotion_engine.render.backends.wan import zero_tail

    seen: list[int] = []
    real = clip.render_clip

    def spy(*args, **kwargs):
        seen.append(zero_tail._RELEASED[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(clip, "render_clip", spy)
    result = bench.bench_echomimic("tiny", sizes=[(64, 128)], seconds=0.2, steps=1, device="cpu", variants=["stock", "batch_cfg"],
                                   log=lambda m: None)  # fmt: skip
    rows = result["rows"]["64x128"]
    assert seen == [1, 0, 0]  # stock once (timed), ours warm-up and timed
    assert (rows["stock"]["continuation_encode"], rows["batch_cfg"]["continuation_encode"]) == ("released", "zero-tail")
    assert zero_tail._RELEASED[0] == 0
