"""The champ benchmark renders stock and ours through render_clip on the tiny preset (CPU, random
weights, the synthetic SMPL body of the backend's tests) and records a result file; the figures
there are only speed and memory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("diffusers")

from benchmarks import champ as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402

_SYNTH = Path(__file__).parents[1] / "engine" / "render" / "backends" / "champ" / "conftest.py"


def test_bench_runs_stock_and_ours_on_the_tiny_preset(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("champ_synthetic_smpl", _SYNTH)
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    from newsmotion_engine.render.backends.champ.backend import ChampBackend
    from newsmotion_engine.render.backends.champ.fit import FitConfig

    monkeypatch.setattr(ChampBackend, "fit_config", FitConfig(iterations=10))
    out = tmp_path / "champ.json"
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny models' ops are small: one thread beats two sharing a busy machine
    try:
        result = bench.bench_champ(synth.write_npz(tmp_path / "smpl.npz"), "tiny", sizes=[(64, 128)], frames=9, steps=1,
                                   device="cpu", dtype="float32", model_width=64, json_path=out, log=lambda m: None)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    rows = result["rows"]["64x128"]
    assert set(rows) == {"stock", "conditional"}  # the compile variant is for CUDA machines
    for row in rows.values():
        assert "error" not in row, row
        assert row["frames_out"] == 9 and row["windows"] == 1 and row["model_size"] == [64, 128]
    assert result["speedup_64x128"] == round(rows["stock"]["end_to_end_s"] / rows["conditional"]["end_to_end_s"], 3)
    assert result["weights"] == "random weights"
    assert read_lab_data(out)["rows"]["64x128"]["stock"]["frames_out"] == 9


def test_maps_only_bench_times_one_thread_and_the_default_with_the_same_maps(tmp_path):
    import json

    from benchmarks.champ import bench_maps
    from newsmotion_engine.render.backends.champ.synthetic_body import write_synthetic_smpl

    smpl = write_synthetic_smpl(tmp_path / "SMPL_SYNTH.npz")
    out = tmp_path / "maps.json"
    result = bench_maps(smpl, frames=6, size=(64, 128), model_width=64, device="cpu", workers=(1, 3), json_path=out, log=lambda _: None)
    assert list(result["rows"]) == ["workers_1", "workers_3"]
    assert all(r["same_maps_as_first"] and r["seconds"] > 0 for r in result["rows"].values())
    assert result["maps_speedup"] == round(result["maps_s_one_thread"] / result["maps_s"], 2)
    assert json.loads(out.read_text())["headline"]["one thread (s)"] == result["maps_s_one_thread"]


def test_count_flops_counts_each_sides_forward_and_the_rate(tmp_path, capsys):
    """A champ record's denoise work, counted on the meta device: the official reference pass
    (stock) does more than the conditional one (ours), one_key_cross less again; a variant's work
    is its forward x windows x steps over the record's seconds; skipped rows are left out; what is
    not a champ record is refused."""
    import json

    record = tmp_path / "champ_cpu.json"
    ours = "conditional+compile+compile_vae+fp8_attention+one_key_cross"
    rows = {"stock": {"model_size": [64, 128], "denoise_s": 2.0}, "conditional": {"model_size": [64, 128], "denoise_s": 1.0},
            ours: {"model_size": [64, 128], "denoise_s": 0.5}, "conditional+compile": {"skipped": "would overrun the budget"}}
    record.write_text(json.dumps({"device": "cpu", "commit": None, "data": {
        "bench": "champ", "preset": "tiny", "shape": {"steps": 2, "frames": 30}, "rows": {"64x128": rows}}}))  # fmt: skip
    out = bench.count_flops(record, tmp_path / "flops.json", log=lambda m: None)
    row = out["rows"]["64x128"]
    fwd = {k: v["flop"] for k, v in row["forward"].items()}
    assert fwd["official"] > fwd["conditional"] > fwd["conditional_one_key_cross"] > 0
    assert out["window_frames"] == 24 and out["windows"] == 2  # 30 frames: 24-frame windows every 20, wrapping
    assert set(row["variants"]) == {"stock", "conditional", ours}
    stock = row["variants"]["stock"]
    assert stock["forward"] == "official" and row["variants"][ours]["forward"] == "conditional_one_key_cross"
    assert stock["denoise_tflop"] == round(fwd["official"] * 2 * 2 / 1e12, 1)
    assert stock["denoise_tflops"] == round(fwd["official"] * 4 / 1e12 / 2.0, 1)
    assert read_lab_data(tmp_path / "flops.json")["rows"]["64x128"]["variants"]["conditional"]["forward"] == "conditional"
    other = tmp_path / "other.json"
    other.write_text('{"data": {"bench": "mimicmotion", "rows": {}}}')
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--count-flops", str(other), "--json", str(tmp_path / "out.json")])
    assert exit_info.value.code == 2 and str(other) in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
