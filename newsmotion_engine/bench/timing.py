"""The one way a benchmark times a call on a device and reads its memory: wall time ended by a
device sync (CUDA kernels run asynchronously), the first warm-up call kept apart (compilation and
autotuning land there), and peak allocated memory since a reset. Torch is imported only inside
the functions, so CPU benches importing this module need no torch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def sync(device: Any) -> None:
    """Wait for the work queued on ``device`` (a no-op off CUDA)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gib(n: int | float) -> float:
    return round(float(n) / 2**30, 3)


def peak_reset(device: Any) -> None:
    """Start a peak-memory measurement: queued work finished, cached blocks released, counter reset."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: Any) -> float | None:
    """Peak allocated memory on ``device`` since :func:`peak_reset`, GiB (``None`` off CUDA)."""
    import torch

    return gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def rel_err(a: Any, ref: Any) -> float:
    """Relative L2 error of tensor ``a`` against ``ref``."""
    a, ref = a.float(), ref.float()
    return float((a - ref).norm() / ref.norm().clamp_min(1e-30))


@dataclass(frozen=True)
class Timing:
    """The timed calls of :func:`time_calls`."""

    ms: list[float]  # each timed call
    first_call_ms: float | None  # the first warm-up call; None without warm-up
    output: Any = field(repr=False)  # the last call's return value

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms)

    def summary(self) -> dict[str, Any]:
        """``{"ms": median, "ms_all": [...], "first_call_ms": ...}``, rounded for a result file."""
        return {"ms": round(self.median_ms, 2), "ms_all": [round(t, 2) for t in self.ms],
                "first_call_ms": None if self.first_call_ms is None else round(self.first_call_ms, 1)}  # fmt: skip


def time_calls(fn: Callable[[], Any], device: Any, warmup: int, reps: int) -> Timing:
    """Call ``fn`` ``warmup`` times untimed (the first one's time kept), then ``reps`` times timed,
    each call ended by :func:`sync`."""
    out = None
    first = None
    for i in range(warmup):
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        if i == 0:
            first = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(times, first, out)
