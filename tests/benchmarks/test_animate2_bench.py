"""The wan-animate-2 GPU bench, dry-run on the CPU with the tiny preset: the same script and
parts the H200 runs (``benchmarks/device_gpu.sh animate2``), labelled random weights."""

from __future__ import annotations


import pytest

pytest.importorskip("diffusers")

from benchmarks.animate2 import bench_animate2, combine_clip_results, main  # noqa: E402
from benchmarks.lab_record import read_lab_data, write_lab_result  # noqa: E402


def test_forward_part_measures_both_sides_and_the_kv_bytes(tmp_path):
    path = tmp_path / "fwd.json"
    main(["--preset", "tiny", "--part", "forward", "--reps", "1", "--json", str(path)])
    r = read_lab_data(path)
    assert r["weights"] == "random weights" and r["part"] == "forward"
    fwd = r["forward"]
    for side in ("stock", "ours"):
        assert fwd[side]["extract"]["ms"] > 0 and fwd[side]["cached_cond"]["ms"] > 0 and fwd[side]["cached_uncond"]["ms"] > 0
        assert fwd[side]["base_segment_s_estimate"] > fwd[side]["distilled_segment_s_estimate"]
    off = fwd["ours_kv_offload"]  # FP8 K/V in host memory: nothing of it on the device between reads
    assert off["cached_cond"]["ms"] > 0 and off["host_bytes"] == fwd["kv"]["bytes_fp8"] and off["device_kv_bytes"] == 0
    kv = fwd["kv"]
    # Measured bytes of the tiny model equal the formula; scaled to 14B at 720x1280 x 81 frames they
    # give the analytic figure (57.7 GiB in bf16; 32.0 GiB at the pipeline's default 640x800 area).
    assert kv["bytes_model_dtype"] == kv["analytic_this_shape"]["model_dtype"]["bytes"]
    assert kv["bytes_fp8"] == kv["analytic_this_shape"]["fp8"]["bytes"]
    assert kv["measured_scaled_to_14b_720x1280_81f_bf16_bytes"] == kv["analytic_14b_720x1280_81f"]["bf16"]["bytes"] == 61_931_520_000
    assert kv["analytic_14b_640x800_81f_pipeline_default_area"]["bf16"]["bytes"] == 34_406_400_000
    assert kv["fp8_file"]["read_cold_ms"] > 0 and kv["lru_hit"]["ms"] >= 0
    assert 0 < kv["fp8_kv_output_rel_err"] < 0.05


def test_clip_and_multistream_parts_write_the_headline_keys(tmp_path):
    r = bench_animate2("tiny", part="clip", json_path=tmp_path / "clip.json")
    assert r["clip"]["ours"]["ours"]["frames"] == r["clip"]["stock"]["stock"]["frames"] == 13
    assert r["animate2_clip_s"] > 0 and r["animate2_clip_s_stock"] > 0
    assert r["animate2_clip_speedup_vs_stock"] == pytest.approx(r["animate2_clip_s_stock"] / r["animate2_clip_s"], rel=1e-2)
    assert read_lab_data(tmp_path / "clip.json")["animate2_clip_s"] == r["animate2_clip_s"]
    ours = r["clip"]["ours"]["ours"]  # timed on a K/V LRU hit, then again with the LRU emptied
    assert {e["source"] for e in ours["last_render"]["kv"]} == {"lru-hit"}
    assert ours["clip_cold_loop_s"] > 0 and {e["source"] for e in ours["clip_cold_loop_last_render"]["kv"]} == {"extract"}
    ms = bench_animate2("tiny", part="multistream", ms_forwards=1, json_path=tmp_path / "ms.json")["multistream"]
    assert ms["serial"]["wall_s"] > 0 and ms["two_streams"]["throughput_vs_serial"] > 0
    assert ms["two_processes"]["throughput_vs_serial"] > 0 and ms["best"] in ("two_streams", "two_processes")


def test_bad_part_is_refused():
    with pytest.raises(ValueError, match="use one of"):
        bench_animate2("tiny", part="everything")


def test_attention_part_compares_the_split_with_the_stock_mask(tmp_path):
    att = bench_animate2("tiny", part="attention", json_path=tmp_path / "att.json")["attention"]
    assert att["stock_flex_block_mask"]["ms"] > 0
    split = att["split_reference_fp32"]  # float32 on the CPU: the split is exact, so a layout bug shows
    assert split["ms"] > 0 and split["rel_err_vs_stock"] < 1e-4


def _write(path, data):
    write_lab_result(path, data, title="a clip side", headline={}, command="test")


def test_clip_sides_from_two_calls_combine_and_mismatches_are_refused(tmp_path):
    ours = {"bench": "animate2", "weights": "random weights", "note": "n", "preset": "14b", "versions": {}, "device": "d",
            "shape": {"width": 720, "height": 1280, "frames": 120}, "created_at": "t1",
            "ours": {"clip_s": 50.0, "segment_frames": 61, "peak_gib": 26.0, "clip_cold_loop_s": 62.5},
            "animate2_clip_s": 50.0}  # fmt: skip
    stock = {**ours, "created_at": "t2", "stock": {"clip_s": 125.0, "peak_gib": 100.0}, "animate2_clip_s_stock": 125.0}
    del stock["animate2_clip_s"], stock["ours"]
    _write(tmp_path / "o.json", ours)
    _write(tmp_path / "s.json", stock)
    main(["--combine", str(tmp_path / "o.json"), str(tmp_path / "s.json"), "--json", str(tmp_path / "c.json")])
    c = read_lab_data(tmp_path / "c.json")
    assert c["animate2_clip_speedup_vs_stock"] == 2.5 and c["runs"] == {"ours": "t1", "stock": "t2"}
    assert c["animate2_clip_speedup_vs_stock_cold_loop"] == 2.0 and c["animate2_clip_s_cold_loop"] == 62.5
    assert (c["animate2_clip_peak_gib"], c["animate2_clip_peak_gib_stock"], c["animate2_clip_segment_frames"]) == (26.0, 100.0, 61)
    _write(tmp_path / "s.json", {**stock, "shape": {"width": 480, "height": 832, "frames": 120}})
    with pytest.raises(ValueError, match="different clips"):
        combine_clip_results(tmp_path / "o.json", tmp_path / "s.json")
    # The command: one line naming both files, exit 2, no output file written.
    assert main(["--combine", str(tmp_path / "o.json"), str(tmp_path / "s.json"), "--json", str(tmp_path / "bad.json")]) == 2
    assert not (tmp_path / "bad.json").exists()
    assert main(["--combine", str(tmp_path / "missing.json"), str(tmp_path / "s.json")]) == 2
