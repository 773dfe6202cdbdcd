"""A/B comparison of two renders of one persona x loop, streamed frame by frame.

Both mp4s are decoded with the engine's reader (:func:`newsmotion_engine.videoio.iter_frames`) in
lockstep, one frame of each in memory at a time. Per frame: PSNR and SSIM of B against A, the
|A-B| heatmap frame (streamed into the engine's encoder, :class:`VideoEncoder`), and, when asked,
the pose error of each clip against the guidance the backends followed and of A against B
(keypoints re-extracted with mediapipe Holistic, :mod:`newsmotion_engine.studio.pose`).

Clips of different sizes are compared at A's size (B resized, area interpolation); clips of
different lengths over their common frames. Either case is a note on the result, not an error.

This module owns the comparison record (:class:`Comparison`, ``pair.json`` beside the
heatmap clip): its fields, version, writing and reading.

Example::

    result = compare_clips(a_mp4, b_mp4, out_dir, labels=("warp", "wan-animate"))
    result.summary["psnr_db_mean"], result.notes
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.video.compare import psnr_db, ssim_luma
from newsmotion_engine.video.encode import VideoEncoder
from newsmotion_engine.videoio import iter_frames, open_video

__all__ = [
    "COMPARISON_VERSION",
    "HEATMAP_FULL_SCALE",
    "Comparison",
    "compare_clips",
    "heatmap_frame",
]

# Bump when a field changes; a stored comparison of another version is recomputed.
COMPARISON_VERSION = 1
# |A-B| (mean over RGB, 0-255) at which the heatmap reaches its brightest colour: differences of
# a quarter of the range and more are all "very different"; small ones stay visible.
HEATMAP_FULL_SCALE = 64.0
HEATMAP_COLORMAP = cv2.COLORMAP_INFERNO
HEATMAP_NAME = "heatmap.mp4"
# Not "comparison.json": that name is the A/B record of two renders (video/compare.py).
RECORD_NAME = "pair.json"

Progress = Callable[[int, int], None]


def heatmap_frame(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|A-B| as an RGB uint8 image: mean absolute difference over the colour channels, scaled so
    :data:`HEATMAP_FULL_SCALE` levels is the top of the inferno colour map (black = identical)."""
    diff = cv2.absdiff(a, b).astype(np.float32).mean(axis=2)
    level = np.clip(diff * (255.0 / HEATMAP_FULL_SCALE), 0, 255).astype(np.uint8)
    return cv2.cvtColor(cv2.applyColorMap(level, HEATMAP_COLORMAP), cv2.COLOR_BGR2RGB)


@dataclass(frozen=True)
class Comparison:
    """One A/B comparison of the studio (``pair.json``).

    ``key``: what it was computed from (see :func:`comparison_key`), so a rebuild reuses it while
    neither clip changed. ``a``/``b``: ``{label, width, height, frames}`` of each clip as decoded.
    ``frames``: frames compared (the common ones). ``size``: ``[width, height]`` compared at.
    ``psnr_db``/``ssim``: per frame. ``pose_error``: per frame, ``{"a_vs_guide", "b_vs_guide",
    "a_vs_b"}`` -> mean keypoint distance as a fraction of the frame height (``None`` where no
    point was found in both), or ``{}`` when pose was not measured. ``heatmap``: file name of the
    |A-B| clip beside the record. ``notes``: what the reader should know (size or length
    differences, missing pose).
    """

    key: str
    a: dict[str, Any]
    b: dict[str, Any]
    frames: int
    size: list[int]
    fps: float
    psnr_db: list[float]
    ssim: list[float]
    pose_error: dict[str, list[float | None]]
    heatmap: str | None
    notes: list[str] = field(default_factory=list)
    heatmap_full_scale: float = HEATMAP_FULL_SCALE
    schema_version: int = COMPARISON_VERSION

    @property
    def summary(self) -> dict[str, float | None]:
        """Means over the compared frames (pose: over the frames where it was measured)."""
        out: dict[str, float | None] = {
            "psnr_db_mean": _mean(self.psnr_db),
            "psnr_db_min": min(self.psnr_db) if self.psnr_db else None,
            "ssim_mean": _mean(self.ssim),
        }
        for name, series in self.pose_error.items():
            out[f"pose_{name}_mean"] = _mean([v for v in series if v is not None])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "summary": self.summary}

    def write(self, folder: Path) -> Path:
        """Write ``folder/pair.json`` atomically."""
        path = folder / RECORD_NAME
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def read(cls, folder: Path) -> Comparison | None:
        """The record in ``folder``, or ``None`` when there is none or it is of another version or
        damaged (the caller recomputes it)."""
        try:
            data = json.loads((folder / RECORD_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("schema_version") != COMPARISON_VERSION:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def comparison_key(a: Path, b: Path, extra: str = "") -> str:
    """Identity of a comparison's inputs: both files' size and modification time (renders are
    replaced by rename, so a new clip has a new mtime), the record version and ``extra``."""
    parts = [str(COMPARISON_VERSION), extra]
    for path in (a, b):
        st = path.stat()
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def compare_clips(
    a_path: Path,
    b_path: Path,
    out_dir: Path,
    *,
    labels: tuple[str, str] = ("A", "B"),
    pose: Callable[[], Any] | None = None,
    key: str | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Compare clip B against clip A, streaming both; write the heatmap clip and the record into
    ``out_dir`` (created).

    Args:
        a_path, b_path: the two mp4s.
        out_dir: where ``heatmap.mp4`` and ``pair.json`` go.
        labels: names shown for A and B.
        pose: optional factory of a pose tracker (:class:`newsmotion_engine.studio.pose.PoseTracker`)
            that gets each compared frame pair; ``None`` skips pose error.
        key: the record's key (default :func:`comparison_key`).
        progress: ``progress(done, total)`` per frame.

    Raises:
        BadInputError: a clip cannot be opened or has no decodable frame.
    """
    info_a, info_b = open_video(a_path), open_video(b_path)
    width, height = info_a.width, info_a.height
    notes: list[str] = []
    if (info_b.width, info_b.height) != (width, height):
        notes.append(
            f"{labels[1]} is {info_b.width}x{info_b.height}, {labels[0]} is {width}x{height}: "
            f"{labels[1]} was resized to {width}x{height} to compare"
        )
    if abs(info_a.fps - info_b.fps) > 1e-3:
        notes.append(f"frame rates differ ({info_a.fps:g} vs {info_b.fps:g} fps): frames are paired by index")
    out_dir.mkdir(parents=True, exist_ok=True)
    total = min(info_a.frame_count, info_b.frame_count)
    psnrs: list[float] = []
    ssims: list[float] = []
    tracker = pose() if pose is not None else None
    frames_a = iter_frames(a_path)
    frames_b = iter_frames(b_path)
    left_a = left_b = 0
    heat_w, heat_h = width - width % 2, height - height % 2
    try:
        with VideoEncoder(out_dir / HEATMAP_NAME, heat_w, heat_h, max(1, round(info_a.fps))) as encoder:
            for fa in frames_a:
                fb = next(frames_b, None)
                if fb is None:
                    left_a = 1 + sum(1 for _ in frames_a)
                    break
                if fb.shape[:2] != (height, width):
                    fb = cv2.resize(fb, (width, height), interpolation=cv2.INTER_AREA)
                psnrs.append(round(psnr_db(fa, fb), 3))
                ssims.append(round(ssim_luma(fa, fb), 5))
                encoder.write(np.ascontiguousarray(heatmap_frame(fa, fb)[:heat_h, :heat_w]))
                if tracker is not None:
                    tracker.add(fa, fb)
                if progress is not None:
                    progress(len(psnrs), total)
            left_b = sum(1 for _ in frames_b)
    finally:
        if tracker is not None:
            tracker.close()
    if not psnrs:
        raise BadInputError(b_path, "no frame of it could be paired with the other clip")
    frames = len(psnrs)
    count_a, count_b = frames + left_a, frames + left_b
    if count_a != count_b:
        notes.append(
            f"{labels[0]} has {count_a} frames, {labels[1]} has {count_b}: compared over the {frames} frames both have"
        )
    pose_error: dict[str, list[float | None]] = {}
    if tracker is not None:
        pose_error = tracker.errors()
        notes.extend(tracker.notes(labels))
    result = Comparison(
        key=key or comparison_key(a_path, b_path),
        a={"label": labels[0], "width": info_a.width, "height": info_a.height, "frames": count_a},
        b={"label": labels[1], "width": info_b.width, "height": info_b.height, "frames": count_b},
        frames=frames,
        size=[width, height],
        fps=info_a.fps,
        psnr_db=psnrs,
        ssim=ssims,
        pose_error=pose_error,
        heatmap=HEATMAP_NAME,
        notes=notes,
    )
    result.write(out_dir)
    return result
