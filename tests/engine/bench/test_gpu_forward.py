"""The GPU forward bench (the ``benchmarks`` asset's GPU part), dry-run on the CPU with the tiny
preset: a labelled result record, every variant applied and removed again."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.bench.gpu import bench_gpu_forward  # noqa: E402
from newsmotion_engine.bench.record import read_result  # noqa: E402


def test_forward_bench_tiny_cpu_writes_a_labelled_record(tmp_path):
    out = tmp_path / "gpu_forward_tiny.json"
    res = bench_gpu_forward("tiny", width=64, height=64, frames=5, reps=1, device="cpu",
                            forward_variants=("stock_bf16", "fp8_linears", "compile_blocks"), json_path=out, log=lambda s: None)  # fmt: skip
    record = read_result(out)
    assert record.name == "gpu_forward_tiny" and record.weights == "random weights"
    v = record.data["forward"]["variants"]
    assert v["stock_bf16"]["forward_ms"] > 0 and v["fp8_linears"]["rel_err_vs_stock"] < 0.1
    assert v["compile_blocks"] == {"skipped": "compile timing needs CUDA"}
    assert record.headline["stock bf16 forward (ms)"] == v["stock_bf16"]["forward_ms"]
    assert res["forward"]["variants"] == v
