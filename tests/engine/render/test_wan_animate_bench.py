"""The GPU bench harness runs on CPU with the tiny preset (structure only; timings on CPU are
not results)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.bench.gpu import bench_gpu  # noqa: E402


def test_bench_gpu_tiny_cpu_writes_labelled_json(tmp_path):
    out = tmp_path / "gpu_tiny.json"
    res = bench_gpu("tiny", part="all", width=32, height=32, frames=5, steps=1, reps=1, device="cpu", json_path=out, log=lambda s: None)
    data = json.loads(out.read_text())
    assert data["weights"] == "random weights" and "numerical drift" in data["note"]
    v = data["forward"]["variants"]
    assert v["stock_bf16"]["forward_ms"] > 0 and v["stock_bf16"]["finite"]
    assert v["fp8_linears"]["setup"]["mode"] == "storage"  # labelled fallback on CPU
    assert "forward_speedup_vs_stock" in data
    assert data["render"]["ours"]["psnr_vs_stock"] > 30  # same inputs and noise as the stock pipeline
    assert res["render"]["stock"]["end_to_end_s"] > 0
