"""Benchmark: how fast a whole persona cache loads (warm and cold) next to building it.

The design target is a warm p50 load of at most 2 ms: ``load_persona`` reads ``metadata.json``,
stats every file and memory-maps the four arrays; no pixel is read until a renderer touches it.
So three load figures are reported, each honest about what it includes:

- ``load_ms_*`` (warm): ``load_persona`` alone, page cache warm: what a render pays per persona.
- ``load_touch_ms_p50`` (warm): load plus reading every pixel of every array once.
- ``cold_load_ms_*`` / ``cold_load_touch_ms_*``: the same after evicting the cache's files from the
  OS page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (after ``fsync``, since dirty pages
  cannot be evicted). Dropping the whole page cache needs root; this per-file eviction does not,
  but it does nothing on tmpfs (``page_cache_evictable`` says whether the files live on one).
- ``first_load_fresh_process_ms``: the first ``load_persona`` in a new Python process (imports
  excluded): cold interpreter-level caches.

``build_s`` is a forced rebuild from the image when one is given, else the build time recorded in
the cache's metadata (``build_s_from`` says which); ``ratio`` is build time over warm p50 load.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.bench.common import drop_from_page_cache, machine_info
from newsmotion_engine.ids import slugify
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.cache import PersonaCache, load_persona
from newsmotion_engine.storage import Storage

__all__ = ["bench_persona", "drop_from_page_cache"]


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _touch(cache: PersonaCache) -> int:
    """Read every byte of every array (sum forces the pages in); returns a value so the work is
    not optimized away."""
    total = 0
    for array in (cache.portrait, cache.person_mask, cache.face_mask):
        total += int(np.asarray(array).sum(dtype=np.uint64))
    total += int(np.isfinite(np.asarray(cache.landmarks)).sum())
    return total


def _on_tmpfs(path: Path) -> bool:
    """Whether ``path`` lives on a tmpfs/ramfs mount (page cache there cannot be dropped)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    best, fstype = "", ""
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and (target == fields[1] or target.startswith(fields[1].rstrip("/") + "/")):
            if len(fields[1]) > len(best):
                best, fstype = fields[1], fields[2]
    return fstype in ("tmpfs", "ramfs")


def _fresh_process_first_load_ms(storage: Storage, persona_id: str) -> float:
    code = (
        "import sys, time\n"
        "from newsmotion_engine.persona.cache import load_persona\n"
        "from newsmotion_engine.storage import Storage\n"
        "store = Storage(sys.argv[1])\n"
        "t = time.perf_counter(); load_persona(store, sys.argv[2]); print((time.perf_counter() - t) * 1e3)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(storage.root), persona_id], capture_output=True, text=True, check=True,
        env=dict(os.environ),
    )
    return float(out.stdout.strip().splitlines()[-1])


def bench_persona(
    storage: Storage,
    target: str | Path,
    loads: int = 200,
    *,
    persona_id: str | None = None,
    cold_loads: int = 20,
    fresh_process: bool = True,
) -> dict[str, Any]:
    """Measure warm/cold load latency of a persona cache against its build time.

    Args:
        storage: where the persona cache is (or is built).
        target: a portrait image file (built with ``force=True`` and timed, into ``persona_id`` or
            ``bench-{file stem}``) or the id of an existing persona cache.
        loads: warm loads timed (after one untimed warm-up).
        cold_loads: loads timed after evicting the files from the page cache.
        fresh_process: also time the first load in a new interpreter.

    Returns a JSON-able dict: ``load_ms_p50``, ``load_ms_p99``, ``load_touch_ms_p50``,
    ``cold_load_ms_p50``, ``cold_load_ms_p99``, ``cold_load_touch_ms_p50``,
    ``cold_load_touch_ms_p99``, ``first_load_fresh_process_ms``, ``build_s``, ``build_s_from``,
    ``ratio`` (build time / warm p50 load) and context (bytes, matte method, machine).

    Example::

        bench_persona(Storage("storage"), "storage/personas/samples/astronaut.png", loads=200)["load_ms_p50"]
    """
    target_path = Path(target)
    if target_path.is_file():
        pid = persona_id or f"bench-{slugify(target_path.stem) or 'persona'}"[:64]
        started = time.perf_counter()
        cache, _ = ensure_persona(storage, pid, image=target_path, force=True)
        build_s, build_from = time.perf_counter() - started, "measured"
    else:
        pid = persona_id or str(target)
        cache = load_persona(storage, pid)
        build_s, build_from = float(cache.metadata.get("build_s", float("nan"))), "metadata"

    load_persona(storage, pid)  # warm-up: imports, page cache, dentries
    warm = []
    for _ in range(max(1, loads)):
        t = time.perf_counter()
        load_persona(storage, pid)
        warm.append((time.perf_counter() - t) * 1e3)
    touch = []
    for _ in range(max(1, min(loads, 50))):
        t = time.perf_counter()
        _touch(load_persona(storage, pid))
        touch.append((time.perf_counter() - t) * 1e3)
    cold, cold_touch = [], []
    for _ in range(max(1, cold_loads)):
        drop_from_page_cache(cache.path)
        t = time.perf_counter()
        loaded = load_persona(storage, pid)
        cold.append((time.perf_counter() - t) * 1e3)
        drop_from_page_cache(cache.path)
        t = time.perf_counter()
        _touch(load_persona(storage, pid))
        cold_touch.append((time.perf_counter() - t) * 1e3)
    del loaded

    p50 = statistics.median(warm)
    result: dict[str, Any] = {
        "persona_id": pid,
        "loads": len(warm),
        "load_ms_p50": round(p50, 4),
        "load_ms_p99": round(_percentile(warm, 99), 4),
        "load_ms_mean": round(statistics.fmean(warm), 4),
        "load_touch_ms_p50": round(statistics.median(touch), 4),
        "cold_loads": len(cold),
        "cold_load_ms_p50": round(statistics.median(cold), 4),
        "cold_load_ms_p99": round(_percentile(cold, 99), 4),
        "cold_load_touch_ms_p50": round(statistics.median(cold_touch), 4),
        "cold_load_touch_ms_p99": round(_percentile(cold_touch, 99), 4),
        "cold_method": "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file",
        "page_cache_evictable": not _on_tmpfs(cache.path),
        "first_load_fresh_process_ms": round(_fresh_process_first_load_ms(storage, pid), 4) if fresh_process else None,
        "build_s": round(build_s, 4),
        "build_s_from": build_from,
        "ratio": round(build_s * 1e3 / p50, 1) if p50 > 0 else None,
        "target_load_ms_p50": 2.0,
        "cache_bytes": cachedir.cache_bytes(cache.path),
        "matte_method": cache.matte_method,
        "machine": machine_info(),
    }
    return result


def headline(result: dict[str, Any]) -> dict[str, float]:
    """The figures people read from :func:`bench_persona`'s result."""
    return {"warm load p50 (ms)": round(result["load_ms_p50"], 2), "warm load p99 (ms)": round(result["load_ms_p99"], 2),
            "cold load p50 (ms)": round(result["cold_load_ms_p50"], 2), "build (s)": round(result["build_s"], 2)}


if __name__ == "__main__":  # python -m newsmotion_engine.bench.persona IMAGE_OR_ID [LOADS]
    store = Storage.from_env()  # a command-line edge
    print(json.dumps(bench_persona(store, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200), indent=2))
