"""Optical flow between two frames, and the geometry the infill builds on it.

1. **Flow.** OpenCV's DIS optical flow (``cv2.DISOpticalFlow``; T. Kroeger et al., "Fast Optical
   Flow using Dense Inverse Search", ECCV 2016, https://arxiv.org/abs/1603.03590) on the frames'
   luma (:class:`FlowConfig`, :func:`estimate_flow`). No learned model (RIFE and friends need
   weights we cannot have here).
2. **Visibility.** Forward/backward consistency (N. Sundaram, T. Brox, K. Keutzer, "Dense point
   trajectories by GPU-accelerated large displacement optical flow", ECCV 2010): a pixel of a whose
   flow is not undone by b's flow where it lands is occluded in b (or leaves the frame), and gets
   weight ``exp(-(err / (alpha |F|^2 + beta))^2)`` (:func:`visibility`).
3. **Source points.** The pixel ``x`` of an in-between frame came from ``p`` with
   ``p + s F(p) = x``, found by a few fixed-point iterations (``p <- x - s F(p)``), each one
   ``cv2.remap`` of the flow (:func:`source_points`); the last step's length says where it did not
   settle.

How the infill uses them: :mod:`newsmotion_engine.video.infill`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import cv2
import numpy as np

from newsmotion_engine.errors import InfillError

__all__ = [
    "FlowConfig", "check_frame", "dis_flow", "estimate_flow", "luma", "pixel_grid", "source_points", "visibility",
]

_PRESETS = {
    "ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}


@dataclass(frozen=True)
class FlowConfig:
    """DIS optical flow settings (OpenCV ``cv2.DISOpticalFlow``).

    Args:
        preset: ``"ultrafast"``, ``"fast"`` (default) or ``"medium"`` (OpenCV's presets); the
            fields below override single parameters of it when not ``None``. The infill bench
            (``benchmarks/results/infill.json``) weighs them.
        finest_scale: the finest pyramid level the search and refinement run at (0 = full
            resolution; fast uses 2, a quarter, medium 1, a half); the flow of that level is
            upsampled to full resolution.
        patch_size, patch_stride: search patch size and stride in pixels.
        gradient_descent_iters: patch search iterations per level.
        variational_refinement_iters: variational refinement iterations per level (0 = off).
        downscale: compute the flow on frames shrunk by this integer factor and upsample it
            (1 = full resolution). Cheaper, less precise.
    """

    preset: Literal["ultrafast", "fast", "medium"] = "fast"
    finest_scale: int | None = None
    patch_size: int | None = None
    patch_stride: int | None = None
    gradient_descent_iters: int | None = None
    variational_refinement_iters: int | None = None
    downscale: int = 1

    def __post_init__(self) -> None:
        if self.preset not in _PRESETS:
            raise InfillError(f"flow preset {self.preset!r} is unknown: use one of {', '.join(_PRESETS)}")
        for name in ("finest_scale", "patch_size", "patch_stride", "gradient_descent_iters", "variational_refinement_iters"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0):
                raise InfillError(f"flow {name} {v!r} is not a non-negative integer")
        if not isinstance(self.downscale, (int, np.integer)) or isinstance(self.downscale, bool) or not 1 <= self.downscale <= 8:
            raise InfillError(f"flow downscale {self.downscale!r} is out of range: use an integer 1..8")

    def create(self) -> cv2.DISOpticalFlow:
        """A configured DIS instance (not thread-safe: one per thread)."""
        dis = cv2.DISOpticalFlow_create(_PRESETS[self.preset])
        if self.finest_scale is not None:
            dis.setFinestScale(int(self.finest_scale))
        if self.patch_size is not None:
            dis.setPatchSize(int(self.patch_size))
        if self.patch_stride is not None:
            dis.setPatchStride(int(self.patch_stride))
        if self.gradient_descent_iters is not None:
            dis.setGradientDescentIterations(int(self.gradient_descent_iters))
        if self.variational_refinement_iters is not None:
            dis.setVariationalRefinementIterations(int(self.variational_refinement_iters))
        return dis

    def as_dict(self) -> dict[str, Any]:
        dis = self.create()
        return {
            "method": "opencv-dis",
            "preset": self.preset,
            "finest_scale": dis.getFinestScale(),
            "patch_size": dis.getPatchSize(),
            "patch_stride": dis.getPatchStride(),
            "gradient_descent_iters": dis.getGradientDescentIterations(),
            "variational_refinement_iters": dis.getVariationalRefinementIterations(),
            "downscale": self.downscale,
        }


def check_frame(name: str, frame: Any) -> np.ndarray:
    arr = np.asarray(frame)
    if arr.dtype != np.uint8:
        raise InfillError(f"{name}: expected a uint8 RGB frame, got dtype {arr.dtype}")
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] < 8 or arr.shape[1] < 8:
        raise InfillError(f"{name}: expected a [height, width, 3] RGB frame at least 8x8, got shape {arr.shape}")
    return arr


@lru_cache(maxsize=4)
def pixel_grid(height: int, width: int) -> np.ndarray:
    """Pixel coordinates ``[H, W, 2]`` (x, y), float32. Read-only (shared)."""
    xs, ys = np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32))
    g = np.stack([xs, ys], axis=-1)
    g.setflags(write=False)
    return g


def luma(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)


def dis_flow(dis: cv2.DISOpticalFlow, g0: np.ndarray, g1: np.ndarray, downscale: int) -> np.ndarray:
    if downscale == 1:
        return dis.calc(g0, g1, None)
    h, w = g0.shape
    small = (max(8, round(w / downscale)), max(8, round(h / downscale)))
    f = dis.calc(cv2.resize(g0, small, interpolation=cv2.INTER_AREA), cv2.resize(g1, small, interpolation=cv2.INTER_AREA), None)
    up = cv2.resize(f, (w, h), interpolation=cv2.INTER_LINEAR)
    up[..., 0] *= w / small[0]
    up[..., 1] *= h / small[1]
    return up


def estimate_flow(src: np.ndarray, dst: np.ndarray, config: FlowConfig | None = None) -> np.ndarray:
    """Dense DIS flow ``F`` float32 ``[H, W, 2]`` from ``src`` to ``dst`` (uint8 RGB frames of one
    shape): ``src(x) ~ dst(x + F(x))``."""
    a = check_frame("flow source", src)
    b = check_frame("flow target", dst)
    if a.shape != b.shape:
        raise InfillError(f"flow frames differ in shape: {a.shape} vs {b.shape}")
    cfg = config or FlowConfig()
    return dis_flow(cfg.create(), luma(a), luma(b), cfg.downscale)


def visibility(f_ab: np.ndarray, f_ba: np.ndarray, grid: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Soft visibility in [0, 1] of each pixel of frame a in frame b, from forward/backward
    consistency with tolerance ``alpha (|F_ab|^2 + |F_ba|^2) + beta`` (px^2); pixels whose flow
    leaves the frame get 0."""
    target = grid + f_ab
    back = cv2.remap(f_ba, target, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    d = f_ab + back
    err = d[..., 0] ** 2 + d[..., 1] ** 2
    tol = alpha * (f_ab[..., 0] ** 2 + f_ab[..., 1] ** 2 + back[..., 0] ** 2 + back[..., 1] ** 2) + beta
    vis = np.exp(-np.square(err / tol))
    h, w = f_ab.shape[:2]
    inside = (target[..., 0] >= -0.5) & (target[..., 0] <= w - 0.5) & (target[..., 1] >= -0.5) & (target[..., 1] <= h - 0.5)
    vis[~inside] = 0.0
    return vis.astype(np.float32)


def source_points(flow: np.ndarray, s: float, grid: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``p + s * flow(p) = x`` for every pixel ``x`` by fixed-point iteration; returns the
    points ``[H, W, 2]`` and the last step's length (px; small where it settled)."""
    p = grid - s * flow
    step = np.zeros_like(p)
    for _ in range(iters):
        nxt = grid - s * cv2.remap(flow, p, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        np.subtract(nxt, p, out=step)
        p = nxt
    return p, cv2.magnitude(step[..., 0], step[..., 1])
