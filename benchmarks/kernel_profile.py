"""Where a render's GPU time goes: one callable under ``torch.profiler``, summed by kernel and by category.

:func:`profile_call` runs a callable once under the profiler (CPU + CUDA activities where CUDA is
there) and returns a JSON-able summary:

- ``profiled_wall_ms``: the callable's wall time under the profiler (the profiler adds overhead:
  time the work without it for the speed figure);
- ``gpu_busy_ms``: the union of the compute kernels' intervals (copies and memsets left out), so
  kernels that overlap on two streams count once; ``gpu_busy_ms / profiled_wall_ms`` below 1 is
  the GPU waiting on the host;
- ``copy_ms``: the memcpy / memset intervals summed;
- ``top``: the ``top`` kernels by total ms (name cut to ``name_chars``), with their launch counts
  and category;
- ``by_category``: ms and count per category, from the kernel names (:data:`CATEGORY_PATTERNS`,
  case-insensitive substrings, first match wins, in this order):

  ========================  =================================================================
  ``copy``                  ``memcpy``, ``memset``, ``copy`` (aten's strided / dtype copies)
  ``attention``             ``flash``, ``fmha``, ``attention``, ``attn``, ``sdpa``
  ``conv``                  ``convolution``, ``conv1d`` / ``2d`` / ``3d``, ``conv_depthwise``,
                            ``fprop``, ``dgrad``, ``wgrad``, ``winograd``, ``implicit_gemm``,
                            ``cudnn``, ``im2col``, ``col2im``, ``vol2col``
  ``norm``                  ``norm``, ``welford``
  ``gemm``                  ``gemm``, ``nvjet``, ``cublas``, ``cutlass``, ``matmul``, ``_mm``,
                            ``::mm``, ``addmm``, ``bmm``, ``linear``, ``xmma``
  ``elementwise-triton``    ``triton``, ``elementwise``, ``fused``
  ``other``                 everything else (reductions, softmax, sorts, ...)
  ========================  =================================================================

  Convolutions come before GEMMs (cuDNN's ``implicit_gemm`` kernels are convolutions) and norms
  before ``triton`` (inductor's ``triton_..._layer_norm`` is a norm). ``copy`` here includes
  aten's copy kernels; ``copy_ms`` holds only memcpy / memset, as ``animate2``'s forward profile.

The diffusers backends render on a read-ahead thread (``render/read_ahead.py``): CUDA kernels are
traced for the whole process whatever thread launched them; CPU operators of other threads are
recorded where torch has ``_ExperimentalConfig(profile_all_threads=True)`` (the summary's
``all_threads``), else only the caller's.

Without CUDA (a CPU machine, the tests) the profiler records CPU operators only: the summary says
``"cuda": false``, ``gpu_busy_ms`` and ``copy_ms`` are ``None``, and ``top`` / ``by_category``
sum each operator's *self* CPU time (aten op names take the same patterns: ``aten::addmm`` is a
GEMM, ``aten::convolution`` a conv).

Usage (the zoo benches' ``--profile-steps N`` does this for every variant, after its timed clip)::

    from benchmarks.kernel_profile import profile_call
    value, summary = profile_call(lambda: render_clip(...), top=20)
    summary["gpu_busy_ms"], summary["by_category"]["attention"]["ms"]

    # a whole bench on the GPU machine, timing and kernel breakdown in one call:
    bash benchmarks/device_gpu.sh zoo 540 "mimicmotion --variants stock,batch_cfg+compile --profile-steps 1 --budget-s 400"

A clip's profile mixes the denoise with everything done once per clip (the VAE decode above
all: in mimicmotion's one-step clip the decode is most of the GPU time). :func:`step_difference`
of two profiles, at N and N + 1 steps, leaves one step's kernels: the denoise alone. The zoo
benches store it as the profile's ``one_step`` (:func:`benchmarks.clip.profile_clip_steps`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["CATEGORIES", "CATEGORY_PATTERNS", "busy_ms", "category", "gpu_busy_and_copy_ms", "is_copy", "kernel_totals",
           "profile_call", "step_difference"]  # fmt: skip

# category -> name substrings (lower case); the first category with a matching substring wins.
CATEGORY_PATTERNS: dict[str, tuple[str, ...]] = {
    "copy": ("memcpy", "memset", "copy"),
    "attention": ("flash", "fmha", "attention", "attn", "sdpa"),
    # not a bare "conv": it would take "convert" (dtype casts)
    "conv": ("convolution", "conv1d", "conv2d", "conv3d", "conv_depthwise", "fprop", "dgrad", "wgrad", "winograd",
             "implicit_gemm", "cudnn", "im2col", "col2im", "vol2col"),
    "norm": ("norm", "welford"),
    "gemm": ("gemm", "nvjet", "cublas", "cutlass", "matmul", "_mm", "::mm", "addmm", "bmm", "linear", "xmma"),
    "elementwise-triton": ("triton", "elementwise", "fused"),
}
CATEGORIES: tuple[str, ...] = (*CATEGORY_PATTERNS, "other")


def category(name: str) -> str:
    """The category of a kernel (or CPU operator) name by :data:`CATEGORY_PATTERNS`."""
    low = name.lower()
    for cat, patterns in CATEGORY_PATTERNS.items():
        if any(p in low for p in patterns):
            return cat
    return "other"


def is_copy(name: str) -> bool:
    """A memcpy or memset (left out of the GPU's busy time, summed as ``copy_ms``)."""
    low = name.lower()
    return "memcpy" in low or "memset" in low


def _kernel_ms(e: Any) -> float:
    return e.time_range.elapsed_us() / 1e3


def kernel_totals(events: Any, name_chars: int = 120, ms: Callable[[Any], float] = _kernel_ms) -> list[tuple[str, tuple[float, int]]]:
    """Profiler events summed by name (cut to ``name_chars``): ``(name, (ms, count))``, the largest
    total first; ``ms`` is an event's time (default: a kernel's duration)."""
    by_name: dict[str, list[float]] = {}
    for e in events:
        row = by_name.setdefault(e.name[:name_chars], [0.0, 0])
        row[0] += ms(e)
        row[1] += 1
    return sorted(((n, (ms, int(c))) for n, (ms, c) in by_name.items()), key=lambda item: -item[1][0])


def busy_ms(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start_us, end_us)`` intervals, in ms (overlaps count once)."""
    busy, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            busy += b - max(a, end)
            end = b
    return busy / 1e3


def gpu_busy_and_copy_ms(kernels: Iterable[Any]) -> tuple[float, float]:
    """CUDA kernel events -> (the union of the compute kernels' intervals, the copies' summed time), ms."""
    copies, spans = 0.0, []
    for e in kernels:
        if is_copy(e.name):
            copies += e.time_range.elapsed_us()
        else:
            spans.append((e.time_range.start, e.time_range.end))
    return busy_ms(spans), copies / 1e3


def _rows(totals: list[tuple[str, tuple[float, int]]], top: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    cats: dict[str, dict[str, Any]] = {c: {"ms": 0.0, "count": 0} for c in CATEGORIES}
    for name, (ms, count) in totals:
        row = cats[category(name)]
        row["ms"] += ms
        row["count"] += count
    for row in cats.values():
        row["ms"] = round(row["ms"], 2)
    return [{"name": n, "ms": round(ms, 2), "count": c, "category": category(n)} for n, (ms, c) in totals[:top]], cats


def profile_call(fn: Callable[[], Any], *, top: int = 20, name_chars: int = 120) -> tuple[Any, dict[str, Any]]:
    """Run ``fn()`` once under ``torch.profiler``; returns ``(fn's value, summary)`` (module docstring)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    kw: dict[str, Any] = {}
    try:  # CPU operators of every thread (a backend renders on a read-ahead thread); older torch: the caller's only
        kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        pass
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=activities, **kw) as prof:
        value = fn()
        if cuda:
            torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    events = prof.events()
    summary: dict[str, Any] = {"cuda": cuda, "all_threads": bool(kw), "profiled_wall_ms": round(wall_ms, 1)}
    if cuda:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        busy, copy = gpu_busy_and_copy_ms(kernels)
        totals = kernel_totals(kernels, name_chars)
        summary.update(source="CUDA kernels", gpu_busy_ms=round(busy, 1), copy_ms=round(copy, 1))
    else:
        cpu_ops = [e for e in events if e.device_type == DeviceType.CPU]
        totals = kernel_totals(cpu_ops, name_chars, ms=lambda e: e.self_cpu_time_total / 1e3)
        summary.update(source="no CUDA: CPU operators, self CPU time", gpu_busy_ms=None, copy_ms=None)
    rows, cats = _rows(totals, top)
    summary.update(total_ms=round(sum(ms for _, (ms, _) in totals), 1), count=sum(c for _, (_, c) in totals),
                   by_category=cats, top=rows)  # fmt: skip
    return value, summary


def step_difference(fewer: dict[str, Any], more: dict[str, Any], steps: int = 1) -> dict[str, Any]:
    """One denoising step's kernels: ``more`` (a :func:`profile_call` summary of a clip at N + ``steps``
    steps) less ``fewer`` (the same clip at N), divided by ``steps``. Per category and for the GPU's
    busy time exactly; per kernel for the names in both summaries' ``top`` lists, and a name only
    in ``more``'s top counts whole (``"whole": true``: its ms in ``fewer``, under that list's
    cut-off, is not known). Differences of two runs carry both runs' noise: a category that does
    not scale with steps shows as a small positive or negative number."""

    def per_step(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) / steps, 2)

    fewer_top = {r["name"]: r for r in fewer.get("top", [])}
    top = []
    for r in more.get("top", []):
        before = fewer_top.get(r["name"])
        row = {"name": r["name"], "category": r["category"], "ms": per_step(before["ms"] if before else 0.0, r["ms"]),
               "count": (r["count"] - (before["count"] if before else 0)) // steps}  # fmt: skip
        if before is None:
            row["whole"] = True
        top.append(row)
    top.sort(key=lambda r: -r["ms"])
    cats = {c: {"ms": per_step(fewer["by_category"][c]["ms"], more["by_category"][c]["ms"]),
                "count": (more["by_category"][c]["count"] - fewer["by_category"][c]["count"]) // steps} for c in CATEGORIES}  # fmt: skip
    return {"steps": steps, "source": more.get("source"), "gpu_busy_ms": per_step(fewer.get("gpu_busy_ms"), more.get("gpu_busy_ms")),
            "total_ms": per_step(fewer.get("total_ms"), more.get("total_ms")), "by_category": cats, "top": top}  # fmt: skip
