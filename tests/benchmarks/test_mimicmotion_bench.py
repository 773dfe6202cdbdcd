"""The mimicmotion benchmark renders stock and ours through render_clip on the tiny preset (CPU,
random weights) and records a result file; the figures there are only speed and memory."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from benchmarks import mimicmotion as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_bench_runs_stock_and_ours_on_the_tiny_preset(tmp_path):
    out = tmp_path / "mimicmotion.json"
    result = bench.bench_mimicmotion("tiny", sizes=[(80, 128)], frames=9, steps=1, device="cpu", dtype="float32",
                                     json_path=out, log=lambda m: None)  # fmt: skip
    rows = result["rows"]["80x128"]
    assert set(rows) == {"stock", "batch_cfg", "batch_cfg+one_key_cross"}  # the compile variants are for CUDA machines
    for row in rows.values():
        assert "error" not in row, row
        assert row["frames_out"] == 9 and row["windows"] == 2 and row["native"] == [80, 128]
    assert (rows["stock"]["unet_calls"], rows["batch_cfg"]["unet_calls"]) == (4, 2)  # two passes vs one batch per window
    assert rows["batch_cfg+one_key_cross"]["settings"][0]["technique"] == "one_key_cross"
    fastest = min(rows[n]["end_to_end_s"] for n in ("batch_cfg", "batch_cfg+one_key_cross"))
    assert result["speedup_80x128"] == round(rows["stock"]["end_to_end_s"] / fastest, 3)
    assert result["weights"] == "random weights"
    assert read_lab_data(out)["rows"]["80x128"]["stock"]["frames_out"] == 9


def test_runs_of_some_variants_each_combine_into_one_record(tmp_path, capsys):
    """Stock in one device command, ours in the next (same warm machine): --combine joins them."""
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "joined.json"
    for path, variants in ((a, ["stock"]), (b, ["batch_cfg"])):
        bench.bench_mimicmotion("tiny", sizes=[(80, 128)], frames=9, steps=1, device="cpu", dtype="float32", variants=variants,
                                json_path=path, log=lambda m: None)  # fmt: skip
    bench.main(["--combine", str(a), str(b), "--json", str(out)])
    joined = read_lab_data(out)
    rows = joined["rows"]["80x128"]
    assert set(rows) == {"stock", "batch_cfg"} and [r["variants"] for r in joined["runs"]] == [["stock"], ["batch_cfg"]]
    assert joined["speedup_80x128"] == round(rows["stock"]["end_to_end_s"] / rows["batch_cfg"]["end_to_end_s"], 3)
    assert joined["fastest_80x128"] == "batch_cfg" and not rows["batch_cfg"]["approximate"]


def test_count_flops_gives_both_sides_the_same_work_and_each_its_rate(tmp_path):
    """The meta-device count of one window equals a real forward's count on the CPU; stock (two
    calls of one row) and batch_cfg (one call of two rows) did the same work."""
    import torch
    from diffusers import UNetSpatioTemporalConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions

    record = tmp_path / "mimicmotion_cpu.json"
    bench.bench_mimicmotion("tiny", sizes=[(80, 128)], frames=9, steps=1, device="cpu", dtype="float32", json_path=record,
                            log=lambda m: None)  # fmt: skip
    out = bench.count_flops(record, tmp_path / "flops.json", log=lambda m: None)
    row = out["rows"]["80x128"]
    stock, ours = row["variants"]["stock"], row["variants"]["batch_cfg"]
    assert (stock["rows_per_call"], ours["rows_per_call"]) == (1, 2) and stock["denoise_flop"] == ours["denoise_flop"] > 0
    assert stock["denoise_flop"] == stock["unet_calls"] * row["flop_per_window_row"]
    assert ours["denoise_tflops"] == round(ours["denoise_flop"] / 1e12 / ours["denoise_s"], 1)
    # the one-token cross-attention as its value: the same calls, less work, counted with it applied
    one_key = row["variants"]["batch_cfg+one_key_cross"]
    assert one_key["denoise_flop"] == one_key["unet_calls"] * 2 * row["flop_per_window_row_one_key_cross"]
    assert 0 < row["flop_per_window_row_one_key_cross"] < row["flop_per_window_row"]

    preset = MimicMotionOptions(preset="tiny").preset_spec
    unet = UNetSpatioTemporalConditionModel(**preset.unet).eval()
    w, h = row["native"]
    counter = FlopCounterMode(display=False)
    # SDPA's math path: its matmuls are counted (the CPU's fused kernel has no flop formula)
    with counter, torch.no_grad(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        unet(torch.randn(1, preset.segment_frames, unet.config.in_channels, h // 8, w // 8), torch.tensor(10.0),
             torch.randn(1, 1, unet.config.cross_attention_dim), torch.randn(1, 3), return_dict=False)  # fmt: skip
    assert row["flop_per_window_row"] == counter.get_total_flops()
    assert read_lab_data(tmp_path / "flops.json")["rows"]["80x128"]["variants"]["stock"]["unet_calls"] == stock["unet_calls"]


def test_count_flops_refuses_what_is_not_a_mimicmotion_clip_record(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"data": {"bench": "champ", "rows": {}}}')
    for path in (tmp_path / "missing.json", other):
        with pytest.raises(SystemExit) as exit_info:
            bench.main(["--count-flops", str(path), "--json", str(tmp_path / "out.json")])
        assert exit_info.value.code == 2 and str(path) in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_count_flops_leaves_out_a_variant_the_budget_skipped(tmp_path):
    """A record whose last variant the device-time budget skipped (it holds only the reason) is
    counted for the variants that ran; a record with nothing measured is refused."""
    import json

    record = tmp_path / "mimicmotion_cpu.json"
    bench.bench_mimicmotion("tiny", sizes=[(80, 128)], frames=9, steps=1, variants=["stock", "batch_cfg"], device="cpu",
                            dtype="float32", json_path=record, log=lambda m: None)  # fmt: skip
    doc = json.loads(record.read_text())
    doc["data"]["rows"]["80x128"]["batch_cfg+one_key_cross"] = {"skipped": "would overrun the device-time budget"}
    record.write_text(json.dumps(doc))
    out = bench.count_flops(record, None, log=lambda m: None)
    assert set(out["rows"]["80x128"]["variants"]) == {"stock", "batch_cfg"}
    doc["data"]["rows"]["80x128"] = {"stock": {"skipped": "budget"}}
    record.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not a mimicmotion clip record"):
        bench.count_flops(record, None, log=lambda m: None)
