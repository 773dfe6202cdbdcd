"""The GPU forward bench (the ``benchmarks`` asset's GPU part), dry-run on the CPU with the tiny
preset: a labelled result record, every variant applied and removed again."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.fp8 import Fp8Linears  # noqa: E402
from newsmotion_engine.bench import gpu  # noqa: E402
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


def test_forward_variants_are_config_tuples():
    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.compile import Compile

    best = Attention("fp8-triton", variant="int8qk-fp8pv")
    table = gpu.forward_variant_configs(best, best, cuda=True)
    assert set(table) == set(gpu.FORWARD_VARIANTS) and table["stock_bf16"] == ()
    assert table["all"] == (Fp8Linears(mode="auto", keep_original=True), best, Compile())
    assert table["all_cudagraphs"][-1] == Compile(cudagraphs=True)
    assert all(registry.is_reversible(c) for v in table.values() if isinstance(v, tuple) for c in v)
    cpu = gpu.forward_variant_configs(Attention("sdpa"), None, cuda=False)
    assert isinstance(cpu["all_cudnn"], gpu.Skip) and isinstance(cpu["attention_fp8_triton"], gpu.Skip)
