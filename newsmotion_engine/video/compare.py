"""Per-frame comparison of two clips (the A/B record): PSNR, SSIM and mean |A - B|, computed
streaming from the two mp4s with the engine's video reader (one frame of each in memory).

- ``psnr_db``: over RGB, peak 255; ``null`` in JSON when the frames are identical (infinite).
- ``ssim``: mean SSIM on BT.601 luma (the usual video practice; about 3x cheaper than per
  channel), :func:`ssim_luma` (OpenCV's separable blur; the studio's A/B pages use it too).
- ``mean_abs_diff``: mean over pixels and channels of ``|A - B|`` in 0..255.

The JSON record (:meth:`VideoComparison.write`, schema :data:`SCHEMA_VERSION`) is defined here
only; the ``ab_comparison`` asset writes it and the studio reads it::

    cmp = compare_videos("a.mp4", "b.mp4", labels=("bf16", "fp8"))
    cmp.summary()        # {"frames": 120, "psnr_db_mean": ..., "ssim_mean": ..., ...}
    cmp.write("ab.json")  # atomic
"""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.videoio import iter_frames, open_video

__all__ = ["PSNR_CAP_DB", "SCHEMA_VERSION", "FrameComparison", "VideoComparison", "compare_frames", "compare_videos", "frame_psnr_db",
           "psnr_db", "ssim_luma", "ssim_map"]

SCHEMA_VERSION = 1
# Identical frames have infinite PSNR; where a number is needed it is capped here.
PSNR_CAP_DB = 100.0


@dataclass(frozen=True)
class FrameComparison:
    index: int
    psnr_db: float | None  # None: identical frames
    ssim: float
    mean_abs_diff: float


def frame_psnr_db(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float | None:
    """PSNR of ``b`` against ``a`` (uint8 images of one shape) over all channels, peak 255, over the
    pixels where ``mask`` is true (all when ``None``); ``None`` when they are identical there
    (infinite)."""
    if mask is None:
        count = a.size
        sse = cv2.norm(a, b, cv2.NORM_L2SQR)
    else:
        m = mask.astype(np.uint8)
        count = int(cv2.countNonZero(m)) * (a.shape[2] if a.ndim == 3 else 1)
        sse = cv2.norm(a, b, cv2.NORM_L2SQR, mask=m)
    mse = sse / max(count, 1)
    return None if mse <= 1e-10 else 10.0 * math.log10(255.0**2 / mse)


def psnr_db(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    """:func:`frame_psnr_db` capped at :data:`PSNR_CAP_DB`, so identical frames stay a JSON number
    and plot."""
    value = frame_psnr_db(a, b, mask)
    return PSNR_CAP_DB if value is None else min(PSNR_CAP_DB, value)


def ssim_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-pixel SSIM of two uint8 RGB images on their luma (Z. Wang et al., "Image quality
    assessment: from error visibility to structural similarity", TIP 2004: Gaussian window sigma
    1.5, K1 0.01, K2 0.03, L 255). The mean of the map is the SSIM."""
    x = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY).astype(np.float32)
    y = cv2.cvtColor(b, cv2.COLOR_RGB2GRAY).astype(np.float32)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2

    def blur(z: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(z, (11, 11), 1.5, borderType=cv2.BORDER_REFLECT)

    mx, my = blur(x), blur(y)
    vx = blur(x * x) - mx * mx
    vy = blur(y * y) - my * my
    cxy = blur(x * y) - mx * my
    return ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))


def ssim_luma(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of the luma of two RGB uint8 images (the mean of :func:`ssim_map`, with the
    half-window border cropped as skimage's ``structural_similarity`` does, so the numbers compare;
    OpenCV's separable blur is about 4x faster than skimage here; a test holds the two within 1e-3)."""
    pad = 5
    return float(np.mean(ssim_map(a, b)[pad:-pad, pad:-pad]))


def compare_frames(index: int, a: np.ndarray, b: np.ndarray) -> FrameComparison:
    """The three measures for one pair of uint8 RGB frames of equal size."""
    psnr = frame_psnr_db(a, b)
    mad = float(cv2.absdiff(a, b).mean())
    return FrameComparison(index, None if psnr is None else round(psnr, 4), round(ssim_luma(a, b), 6), round(mad, 4))


@dataclass
class VideoComparison:
    """The per-frame record of clip ``a`` against clip ``b``."""

    a: str
    b: str
    labels: tuple[str, str]
    width: int
    height: int
    frames: list[FrameComparison] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        finite = [f.psnr_db for f in self.frames if f.psnr_db is not None]
        n = len(self.frames)
        return {
            "frames": n,
            "identical_frames": n - len(finite),
            "psnr_db_mean": round(sum(finite) / len(finite), 4) if finite else None,
            "psnr_db_min": round(min(finite), 4) if finite else None,
            "ssim_mean": round(sum(f.ssim for f in self.frames) / n, 6) if n else None,
            "ssim_min": round(min(f.ssim for f in self.frames), 6) if n else None,
            "mean_abs_diff_mean": round(sum(f.mean_abs_diff for f in self.frames) / n, 4) if n else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "ab-comparison",
            "a": {"label": self.labels[0], "path": self.a},
            "b": {"label": self.labels[1], "path": self.b},
            "size": [self.width, self.height],
            "summary": self.summary(),
            "measures": {"psnr_db": "RGB, peak 255, null = identical", "ssim": "luma (BT.601), data range 255",
                         "mean_abs_diff": "RGB, 0..255"},  # fmt: skip
            "per_frame": [asdict(f) for f in self.frames],
            **self.extra,
        }

    def write(self, path: Path | str) -> Path:
        """Write the JSON record atomically (temporary sibling + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_text(json.dumps(self.as_dict(), indent=1), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @staticmethod
    def read(path: Path | str) -> dict[str, Any]:
        """The record as written (checked for kind and schema version)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInputError(path, f"is not a readable A/B comparison JSON ({exc})") from None
        if data.get("kind") != "ab-comparison" or data.get("schema_version") != SCHEMA_VERSION:
            raise BadInputError(path, f"is not an A/B comparison record of schema {SCHEMA_VERSION}")
        return data


def compare_videos(a: Path | str, b: Path | str, *, labels: tuple[str, str] = ("a", "b")) -> VideoComparison:
    """Compare two clips frame by frame, streaming.

    Raises:
        BadInputError: either file unreadable (as :func:`open_video`), sizes differ, or frame
            counts differ (naming the shorter file).
    """
    a, b = Path(a), Path(b)
    ia, ib = open_video(a), open_video(b)
    if (ia.width, ia.height) != (ib.width, ib.height):
        raise BadInputError(b, f"is {ib.width}x{ib.height}, but {a.name} is {ia.width}x{ia.height}; compare clips of one size")
    out = VideoComparison(str(a), str(b), labels, ia.width, ia.height)
    ita, itb = iter_frames(a), iter_frames(b)
    for index, fa in enumerate(ita):
        fb = next(itb, None)
        if fb is None:
            raise BadInputError(b, f"ends after {index} frames, {a.name} has more")
        out.frames.append(compare_frames(index, fa, fb))
    if next(itb, None) is not None:
        raise BadInputError(a, f"ends after {len(out.frames)} frames, {b.name} has more")
    return out
