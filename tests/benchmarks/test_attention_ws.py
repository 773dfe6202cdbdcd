"""The warp-specialized attention experiment under Triton's interpreter (CPU): whole tiles give
the production kernel's bits, a ragged end masked in every tile gives its numbers; the tile and
S checks refuse what the kernel cannot take."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

_INTERPRETED = """
import torch
from benchmarks import attention_ws as W
from newsmotion_engine.accel import attention as A
kernel = A._build_kernel(autotune=False)
torch.manual_seed(0)
for S in (96, 100):
    q, k, v = (torch.randn(1, S, 2, 64) for _ in range(3))
    x = A.quantize_attention_inputs(q, k, v, W.VARIANT)
    prod = A.launch_kernel(kernel, x, W.VARIANT, BLOCK_M=32, BLOCK_N=32)
    if S % 32 == 0:
        out = W.launch(x, (32, 32, 4, 2), mask_tail=False)
        assert torch.equal(out, prod), S
        try:
            W.launch(x, (32, 64, 4, 2), mask_tail=False)
        except ValueError as exc:
            assert "multiple of BLOCK_N" in str(exc)
        else:
            raise AssertionError("a ragged S without mask_tail was taken")
    out = W.launch(x, (32, 32, 4, 2), mask_tail=True)
    diff = float((out.float() - prod.float()).norm() / prod.float().norm())
    assert diff < 1e-2, (S, diff)
print("ok")
"""


def test_the_experiment_matches_the_production_kernel_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.getcwd()}  # read when triton is imported: a fresh process
    proc = subprocess.run([sys.executable, "-c", _INTERPRETED], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
