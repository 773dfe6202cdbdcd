"""The FP8 attention kernel compiled for sm_90 on this CPU machine: it must stay on the 8-bit
tensor cores, never spill, and keep its main loop near 9 instructions per score (the first
version's per-byte K loads cost ~23 and made it issue-bound)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from benchmarks.kernel_sass import kernel_report  # noqa: E402


def test_default_kernel_uses_8bit_tensor_cores_without_spills():
    report = kernel_report(variants=("int8qk-fp8pv",), configs=[(64, 128, 4, 3, False)])
    (row,) = report["kernels"].values()
    assert {"IGMMA.64", "QGMMA.64"} <= set(row["tensor_core_ops"]), row["tensor_core_ops"]  # int8 Q K, e4m3 P V
    assert row["stack_bytes"] == 0 and row["registers"] <= 255
    assert 4 < row["instructions_per_score"] < 12, row["instructions_per_score"]
    assert row["main_loop_opcodes"].get("MUFU", 0) >= 64  # one EX2 per score: the loop found is the softmax loop
