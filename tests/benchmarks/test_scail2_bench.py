"""The scail-2 benchmark renders stock and ours through render_clip on the tiny preset (CPU, random
weights) and records a result file; the figures there are only speed and memory."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from benchmarks import scail2 as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_bench_runs_stock_and_ours_on_the_tiny_preset(tmp_path):
    from newsmotion_engine.render.backends.scail_2 import masks

    original = masks.driving_matte
    out = tmp_path / "scail2.json"
    result = bench.bench_scail2("tiny", sizes=[(80, 144)], frames=13, steps=1, device="cpu", json_path=out, log=lambda m: None)
    assert masks.driving_matte is original  # the bench's whole-frame matte is put back
    rows = result["rows"]["80x144"]
    assert set(rows) == {"stock", "batch_cfg"}  # the FP8 / compile / kernel variant is for CUDA machines
    for row in rows.values():
        assert "error" not in row, row
        assert row["frames_out"] == 13 and row["segments"] == 2 and row["model_size"] == [64, 128]
        assert row["cond_passes"] == 2 == row["uncond_passes"]  # 1 step x 2 segments, CFG 5
    assert result["speedup_80x144"] == round(rows["stock"]["end_to_end_s"] / rows["batch_cfg"]["end_to_end_s"], 3)
    assert result["weights"] == "random weights"
    assert read_lab_data(out)["rows"]["80x144"]["stock"]["frames_out"] == 13
