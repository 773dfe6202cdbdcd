"""benchmarks/flop_count.py: one call's work by operator (the zoo benches' --count-flops use it)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.flop_count import count_call  # noqa: E402


def test_count_call_counts_a_linear_and_a_convolution_on_the_meta_device():
    with torch.device("meta"):
        linear = torch.nn.Linear(64, 32, bias=False)
        conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        x, image = torch.empty(10, 64), torch.empty(2, 8, 12, 12)
    flop, by_op = count_call(lambda: (linear(x), conv(image)))
    conv_flop = 2 * 2 * 16 * 12 * 12 * 8 * 3 * 3
    assert flop == 2 * 10 * 64 * 32 + conv_flop
    assert set(by_op) == {"mm", "convolution"} and list(by_op) == ["convolution", "mm"]  # largest first
