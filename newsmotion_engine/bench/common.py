"""Helpers every benchmark shares: percentiles, page-cache eviction, machine description."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np


def percentiles_ms(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds of durations given in seconds."""
    ms = np.asarray(samples_s) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def drop_from_page_cache(directory: Path) -> None:
    """Ask the kernel to evict every file under ``directory`` from the page cache (no root
    needed; a no-op on tmpfs)."""
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages are never evicted
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def machine_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
    }


def cpu_device() -> str:
    """The ``device`` of a CPU benchmark's result, e.g. ``"cpu (2 cores)"``."""
    return f"cpu ({os.cpu_count()} cores)"
