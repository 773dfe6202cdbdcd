"""The block-sparse attention bench runs on the CPU and says what it skipped."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.bench.record import read_result  # noqa: E402

from benchmarks.sparse import bench_sparse  # noqa: E402


def test_bench_runs_on_cpu_and_says_what_it_skipped(tmp_path):
    out = tmp_path / "sparse.json"
    res = bench_sparse("tiny", json_path=out, reps=1, log=lambda m: None)
    record = read_result(out)
    assert record.name == "sparse" and record.data["experimental"] is True
    if not torch.cuda.is_available():
        assert "skipped" in res["kernel"]
        assert "skipped" in res["forward"]["variants"]["all_sparse50"]
        assert res["forward"]["variants"]["stock_bf16"]["forward_ms"] > 0
