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

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from newsmotion_engine.bench.common import drop_from_page_cache, machine_info, percentiles_ms


def bench_guidance(
    *, loads: int = 2000, frames: int = 120, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the guidance benchmark in a private storage root; returns the result dict."""
    from newsmotion_engine.guidance import draw
    from newsmotion_engine.bench.suites import private_storage
    from newsmotion_engine.guidance.cache import ensure_guidance, load_guidance
    from newsmotion_engine.guidance.choreography import author_loop
    from newsmotion_engine.samples import write_moving_photo_video

    with private_storage() as store:
        result: dict[str, Any] = {"benchmark": "guidance", "machine": machine_info()}
        driving = store.driving_dir
        driving.mkdir(parents=True)
        video = driving / "bench_loop.mp4"
        log(f"writing a {frames}-frame 720x1280 driving video")
        write_moving_photo_video(video, frames=frames)

        log("extracting it with mediapipe holistic (the work a cache saves)")
        t0 = time.perf_counter()
        cache, _ = ensure_guidance(store, "bench_loop")
        result["extract_s"] = time.perf_counter() - t0
        result["extract_ms_per_frame"] = result["extract_s"] * 1000 / frames
        loop_id = cache.loop_id
        result["frames"] = int(cache.keypoints.shape[0])
        result["cache_bytes"] = int(sum(p.stat().st_size for p in cache.path.iterdir()))

        log(f"timing {loads} warm loads")
        for _ in range(20):
            load_guidance(store, loop_id)
        samples = []
        for _ in range(loads):
            t0 = time.perf_counter()
            load_guidance(store, loop_id)
            samples.append(time.perf_counter() - t0)
        result["load_ms_p50"], result["load_ms_p99"] = percentiles_ms(samples)

        samples = []
        for _ in range(loads):
            t0 = time.perf_counter()
            float(np.asarray(load_guidance(store, loop_id).keypoints).sum())
            samples.append(time.perf_counter() - t0)
        result["load_read_ms_p50"], result["load_read_ms_p99"] = percentiles_ms(samples)

        cold = []
        for _ in range(min(loads, 200)):
            drop_from_page_cache(cache.path)
            t0 = time.perf_counter()
            float(np.asarray(load_guidance(store, loop_id).keypoints).sum())
            cold.append(time.perf_counter() - t0)
        result["cold_load_ms_p50"], result["cold_load_ms_p99"] = percentiles_ms(cold)

        log("timing pose-map drawing at 720x1280")
        keypoints = author_loop("welcome")  # drawn poses need the full body + hands + face
        out = np.empty((1280, 720, 3), np.uint8)
        draw.draw_pose(keypoints[0], 720, 1280, out=out)
        t0 = time.perf_counter()
        for frame in keypoints:
            draw.draw_pose(frame, 720, 1280, out=out)
        result["draw_ms_per_frame"] = (time.perf_counter() - t0) * 1000 / len(keypoints)

        result["ratio"] = result["extract_s"] * 1000 / result["load_ms_p50"]
        result["ratio_with_read"] = result["extract_s"] * 1000 / result["load_read_ms_p50"]
        result["targets"] = {"load_ms_p50_max": 1.0, "ratio_min": 1000}
        return result


def headline(result: dict[str, Any]) -> dict[str, float]:
    """The figures people read from :func:`bench_guidance`'s result."""
    return {"warm load p50 (ms)": round(result["load_ms_p50"], 3), "warm load p99 (ms)": round(result["load_ms_p99"], 3),
            "cold load p50 (ms)": round(result["cold_load_ms_p50"], 3),
            "re-extraction / warm load (x)": round(result["ratio"]), "pose drawing (ms/frame)": round(result["draw_ms_per_frame"], 2)}
