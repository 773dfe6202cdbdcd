"""Shared by the kernel tests: a snippet run under Triton's interpreter on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def run_interpreted() -> Callable[..., str]:
    """``run(code, timeout=300, ok=False)``: ``code`` in a fresh Python process with
    ``TRITON_INTERPRET=1`` (read when triton is imported, hence the fresh process), from the
    repository root; fails the test unless it exits 0 and, with ``ok``, prints ``ok``. Its stdout."""
    pytest.importorskip("triton")

    def run(code: str, timeout: int = 300, ok: bool = False) -> str:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        assert proc.returncode == 0 and (not ok or "ok" in proc.stdout.split()), proc.stdout + proc.stderr
        return proc.stdout

    return run


@pytest.fixture
def tiny_wan_vae() -> Callable[[], tuple]:
    """``make()``: a tiny random Wan VAE (seed 0, eval) and a components object holding it as
    ``vae`` (what the registry's handlers take)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    from types import SimpleNamespace

    from diffusers import AutoencoderKLWan

    def make() -> tuple:
        torch.manual_seed(0)
        vae = AutoencoderKLWan(base_dim=16, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                               temperal_downsample=[False, True, True]).eval()  # fmt: skip
        return vae, SimpleNamespace(vae=vae)

    return make
