"""The 3-D-convolution bench on the CPU (``--small``): every part runs, each variant's output is
held against the stock one, FLOPs are counted, and a record is written; timings there mean nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from benchmarks import conv3d as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_every_part_runs_small_on_the_cpu_and_the_variants_agree(tmp_path):
    out = tmp_path / "conv3d.json"
    result = bench.bench_conv3d(device="cpu", small=True, repeats=1, json_path=out, log=lambda m: None)
    assert result["weights"] == "random weights"
    for part in ("decode", "unet"):
        rows = result[part]
        assert set(rows) == set(bench.VARIANTS)
        assert rows["conv3d_as_2d"]["convs_as_2d"] > 0 and rows["stock"]["convs_as_2d"] == 0
        assert all(r["max_rel_diff"] < 1e-4 for r in rows.values()), rows  # float32 on the CPU: the same sums
        assert result[f"{part}_tflop"] > 0
    wan = result["wan_decode"]
    assert wan["float32_channels_last_as_2d"]["convs_as_2d"] > 10 and wan["float32_channels_last_as_2d"]["max_rel_diff"] < 1e-4
    assert wan["float32_channels_last"]["tflop"] > 0 and wan["float32_channels_last"]["frames"] == 17
    both = wan["float32_channels_last_pad_fold_as_2d"]
    assert both["convs_pad_fold"] > 10 and both["convs_as_2d"] > 10 and both["max_rel_diff"] < 1e-4
    assert set(wan["encode"]) == set(bench.WAN_ENCODE_VARIANTS)
    assert all(r["max_rel_diff"] < 1e-4 and r["frames"] == 17 for r in wan["encode"].values())
    assert all(r["as_conv2d_max_rel_diff"] < 1e-4 for r in result["convs"].values())
    assert set(read_lab_data(out)) >= {"decode", "unet", "wan_decode", "convs"}


def test_unknown_parts_are_refused():
    with pytest.raises(ValueError, match="parts"):
        bench.bench_conv3d(device="cpu", small=True, parts=("vae",), log=lambda m: None)
