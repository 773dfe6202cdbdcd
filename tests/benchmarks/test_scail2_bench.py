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


def test_stock_and_ours_from_two_runs_combine_into_one_record(tmp_path):
    """Stock in one run, ours in another (warm-up at 1 step): joined, the figures are recomputed."""
    kw = dict(sizes=[(64, 128)], frames=9, steps=2, device="cpu", log=lambda m: None)
    bench.bench_scail2("tiny", variants=["stock"], json_path=tmp_path / "stock.json", **kw)
    ours = bench.bench_scail2("tiny", variants=["batch_cfg"], warm_up_steps=1, json_path=tmp_path / "ours.json", **kw)
    row = ours["rows"]["64x128"]["batch_cfg"]
    assert row["warm_up_steps"] == 1 and row["cond_passes"] == 2  # the timed render ran the full 2 steps (1 segment)
    bench.main(["--combine", str(tmp_path / "stock.json"), str(tmp_path / "ours.json"), "--json", str(tmp_path / "both.json")])
    both = read_lab_data(tmp_path / "both.json")
    assert set(both["rows"]["64x128"]) == {"stock", "batch_cfg"}
    assert both["speedup_64x128"] == round(both["clip_64x128_s_stock"] / both["clip_64x128_s"], 3)
    assert [r["variants"] for r in both["runs"]] == [["stock"], ["batch_cfg"]]


def test_runs_of_another_clip_do_not_combine(tmp_path):
    from benchmarks.lab_record import combine_runs, write_lab_result

    for name, frames in (("a", 9), ("b", 13)):
        write_lab_result(tmp_path / f"{name}.json", {"device": "cpu", "preset": "tiny", "shape": {"frames": frames}, "rows": {}},
                         title=name, headline={})  # fmt: skip
    with pytest.raises(ValueError, match="shape .* differs"):
        combine_runs([tmp_path / "a.json", tmp_path / "b.json"])
