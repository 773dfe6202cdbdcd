"""Helpers that turn engine results into Dagster metadata values."""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import Callable

import dagster as dg


def png_markdown(png: bytes, alt: str = "preview") -> dg.MetadataValue:
    """An embedded PNG (data URI), shown inline in the asset's materialization."""
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})")


def warm_load_ms(load: Callable[[], object], repeats: int = 50) -> float:
    """Median wall time of ``load()`` after one warm-up call, in milliseconds."""
    load()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        load()
        samples.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(samples), 4)
