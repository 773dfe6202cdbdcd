"""Helpers that turn engine results into Dagster metadata values."""

from __future__ import annotations

import base64
import os
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


def images_markdown(images: list[tuple[bytes, str]]) -> dg.MetadataValue:
    """Several embedded PNGs ``[(png, alt)]`` in one markdown value, one under the other."""
    return dg.MetadataValue.md(
        "\n\n".join(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})" for png, alt in images)
    )


# Where `newsmotion studio serve` answers; another host/port (a shared server) via the variable.
STUDIO_URL_ENV = "NEWSMOTION_STUDIO_URL"


def studio_url(page: str) -> dg.MetadataValue:
    """A link to one studio page (``page`` relative to the site root), as served by
    ``newsmotion studio serve`` (``$NEWSMOTION_STUDIO_URL``, default http://127.0.0.1:8765)."""
    from newsmotion_engine.studio.server import DEFAULT_PORT

    base = os.environ.get(STUDIO_URL_ENV) or f"http://127.0.0.1:{DEFAULT_PORT}"
    return dg.MetadataValue.url(f"{base.rstrip('/')}/{page}")
