"""Benchmark: loading a 120-frame guidance cache vs re-extracting it from video.

What it measures (one run, one machine, so the ratio is like for like):
- warm load: :func:`load_guidance` (metadata parse + validation + memory-map) repeated, p50/p99;
- warm load + read: the same plus touching every keypoint (what a render then pays);
- cold load: page cache of the cache files dropped with ``posix_fadvise(DONTNEED)`` before each load;
- extraction: mediapipe holistic + mapping + smoothing of a 120-frame 720x1280 driving video
  (the scikit-image astronaut photo moving over a canvas) — what the cache saves per render;
- pose-map drawing ms/frame at 720x1280 (done per render, so it must be cheap).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples_s) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def _drop_page_cache(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def machine_info() -> dict[str, Any]:
    import numpy

    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
    }


def bench_guidance(
    *, loads: int = 2000, frames: int = 120, extract: bool = True, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the guidance benchmark in a private storage root; returns the result dict."""
    from newsmotion_engine.guidance import draw
    from newsmotion_engine.guidance.cache import build_guidance, load_guidance
    from newsmotion_engine.samples import write_moving_photo_video

    from newsmotion_engine.bench.suites import private_storage

    with private_storage() as root:
        result: dict[str, Any] = {"benchmark": "guidance", "machine": machine_info()}
        driving = root / "motion" / "driving"
        driving.mkdir(parents=True)
        video = driving / "bench_loop.mp4"
        log(f"writing a {frames}-frame 720x1280 driving video")
        write_moving_photo_video(video, frames=frames)

        if extract:
            log("extracting it with mediapipe holistic (the work a cache saves)")
            t0 = time.perf_counter()
            cache, _ = build_guidance("bench_loop")
            result["extract_s"] = time.perf_counter() - t0
            result["extract_ms_per_frame"] = result["extract_s"] * 1000 / frames
        else:
            cache, _ = build_guidance("welcome")
        loop_id = cache.loop_id
        result["frames"] = int(cache.keypoints.shape[0])
        result["cache_bytes"] = int(sum(p.stat().st_size for p in cache.path.iterdir()))

        log(f"timing {loads} warm loads")
        for _ in range(20):
            load_guidance(loop_id)
        samples = []
        for _ in range(loads):
            t0 = time.perf_counter()
            load_guidance(loop_id)
            samples.append(time.perf_counter() - t0)
        result["load_ms_p50"], result["load_ms_p99"] = _percentiles(samples)

        samples = []
        for _ in range(loads):
            t0 = time.perf_counter()
            float(np.asarray(load_guidance(loop_id).keypoints).sum())
            samples.append(time.perf_counter() - t0)
        result["load_read_ms_p50"], result["load_read_ms_p99"] = _percentiles(samples)

        cold = []
        for _ in range(min(loads, 200)):
            _drop_page_cache(cache.path)
            t0 = time.perf_counter()
            float(np.asarray(load_guidance(loop_id).keypoints).sum())
            cold.append(time.perf_counter() - t0)
        result["cold_load_ms_p50"], result["cold_load_ms_p99"] = _percentiles(cold)

        log("timing pose-map drawing at 720x1280")
        from newsmotion_engine.guidance.palette import author_loop

        keypoints = author_loop("welcome")  # drawn poses need the full body + hands + face
        out = np.empty((1280, 720, 3), np.uint8)
        draw.draw_pose(keypoints[0], 720, 1280, out=out)
        t0 = time.perf_counter()
        for frame in keypoints:
            draw.draw_pose(frame, 720, 1280, out=out)
        result["draw_ms_per_frame"] = (time.perf_counter() - t0) * 1000 / len(keypoints)

        if extract:
            result["ratio"] = result["extract_s"] * 1000 / result["load_ms_p50"]
            result["ratio_with_read"] = result["extract_s"] * 1000 / result["load_read_ms_p50"]
        result["targets"] = {"load_ms_p50_max": 1.0, "ratio_min": 1000}
        return result
