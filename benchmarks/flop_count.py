"""Counting a model call's work on the meta device, for the zoo benches' ``--count-flops`` (which
turn a clip record's seconds into the rate its denoise ran at): one call counted by operator, and
the result record those benches write.

Example::

    flop, by_op = count_call(lambda: unet(x, t, context, return_dict=False))   # on meta tensors
    write_flops_record(out, "benchmarks/results/champ_flops_h100.json", "champ", "benchmarks/results/champ_h100.json",
                       title="champ: ...")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.lab_record import write_lab_result

__all__ = ["count_call", "write_flops_record"]


def count_call(fn: Callable[[], Any]) -> tuple[int, dict[str, float]]:
    """``(FLOP, {operator: TFLOP})`` of one ``fn()`` under ``torch.utils.flop_counter`` (matmuls,
    convolutions, attention; exact counts, the per-operator TFLOP rounded), without autograd."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn()
    by_op = sorted(counter.get_flop_counts()["Global"].items(), key=lambda kv: -kv[1])
    return counter.get_total_flops(), {str(op).removeprefix("aten."): round(n / 1e12, 2) for op, n in by_op}


def write_flops_record(out: dict[str, Any], json_path: str | Path, bench: str, record_path: str | Path, *, title: str) -> None:
    """Write a ``--count-flops`` result: ``out["rows"][size]["variants"][name]["denoise_tflops"]``
    are its headline; the command names the record it read."""
    headline = {f"{size} {name} (TFLOP/s)": v["denoise_tflops"] for size, row in out["rows"].items() for name, v in row["variants"].items()}
    write_lab_result(json_path, out, title=title, headline=headline,
                     command=f"python -m benchmarks.{bench} --count-flops {record_path} --json {json_path}")  # fmt: skip
