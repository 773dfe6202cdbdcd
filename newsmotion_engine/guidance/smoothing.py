"""Temporal smoothing of keypoint tracks: the One Euro filter, vectorized over keypoints.

The One Euro filter (Casiez, Roussel, Vogel, "1€ Filter: A Simple Speed-based Low-pass Filter
for Noisy Input in Interactive Systems", CHI 2012, https://gery.casiez.net/1euro/) is a first-order
low-pass filter whose cutoff frequency rises with the signal's speed: at rest a low cutoff removes
jitter, in fast motion a high cutoff keeps lag small.

Units. Keypoints are normalized to the frame (0..1), so speeds are in *frame widths (heights) per
second*. The defaults are chosen for that scale:

- ``min_cutoff=1.0`` Hz: a still keypoint's detector jitter (mostly above 2-3 Hz at 30 fps) is
  strongly attenuated, while slow gesture drift (< 1 Hz) passes.
- ``beta=10.0``: a hand crossing a third of the frame in a second (speed ~0.33/s) gets a cutoff of
  ~4.3 Hz, a fast swipe across the frame (1/s) ~11 Hz, so lag on real gestures stays at a frame or
  two. (Pixel-unit implementations often use beta ~0.007 per px/s; with ~1000 px per frame that is
  ~7 per frame/s, the same order.)
- ``d_cutoff=1.0`` Hz: the speed estimate itself is smoothed with a fixed 1 Hz cutoff, as the
  paper recommends, so jitter does not masquerade as motion.

Confidence. A keypoint whose confidence is 0 is absent: it does not update the filter's state, it
is passed through unchanged, and when it reappears its filter restarts from the new position (no
glide from a stale position).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["OneEuroParams", "OneEuroFilter", "smooth_sequence", "DEFAULT_PARAMS"]


@dataclass(frozen=True)
class OneEuroParams:
    """One Euro filter parameters in normalized-coordinate units (see the module docstring)."""

    min_cutoff: float = 1.0
    beta: float = 10.0
    d_cutoff: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_PARAMS = OneEuroParams()


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    """Smoothing factor of an exponential filter with the given cutoff (Hz) at sample period dt."""
    tau = 1.0 / (2.0 * math.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    """One Euro filter over ``K`` 2-D points at a fixed frame rate.

    Args:
        fps: frames per second of the stream (the sample period is ``1 / fps``).
        min_cutoff: cutoff (Hz) at zero speed; lower = smoother at rest, more lag.
        beta: cutoff increase per unit of speed (frame sizes per second); higher = less lag in
            fast motion.
        d_cutoff: cutoff (Hz) for the speed estimate.

    Example::

        f = OneEuroFilter(fps=30)
        for kp in frames:                       # kp: [133, 3]
            xy = f.filter(kp[:, :2], kp[:, 2])  # smoothed [133, 2]

    State (last position, last speed, which points are live) is explicit; ``reset()`` forgets it,
    and a fresh or reset filter reproduces the same output for the same input.
    """

    def __init__(
        self,
        fps: float,
        min_cutoff: float = DEFAULT_PARAMS.min_cutoff,
        beta: float = DEFAULT_PARAMS.beta,
        d_cutoff: float = DEFAULT_PARAMS.d_cutoff,
    ):
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        if not (min_cutoff > 0 and d_cutoff > 0 and beta >= 0):
            raise ValueError(
                "need min_cutoff > 0, d_cutoff > 0, beta >= 0; "
                f"got {min_cutoff}, {d_cutoff}, {beta}"
            )
        self.fps = float(fps)
        self.params = OneEuroParams(float(min_cutoff), float(beta), float(d_cutoff))
        self._x: np.ndarray | None = None  # [K, 2] last filtered position
        self._dx: np.ndarray | None = None  # [K, 2] last filtered speed (units / s)
        self._live: np.ndarray | None = None  # [K] bool: has state from the previous present frame

    def reset(self) -> None:
        """Forget all state; the next frame starts every point afresh."""
        self._x = self._dx = self._live = None

    def filter(self, x: np.ndarray, conf: np.ndarray) -> np.ndarray:
        """Filter one frame: ``x`` [K, 2] positions, ``conf`` [K] confidences -> [K, 2] (float64
        internally, returned as x's float dtype). Points with ``conf == 0`` pass through untouched
        and lose their state."""
        x = np.asarray(x)
        conf = np.asarray(conf)
        if x.ndim != 2 or x.shape[1] != 2 or conf.shape != (x.shape[0],):
            raise ValueError(f"expected x [K, 2] and conf [K], got {x.shape} and {conf.shape}")
        out_dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        xf = x.astype(np.float64)
        k = xf.shape[0]
        if self._x is None or self._x.shape[0] != k:
            self._x = np.zeros((k, 2))
            self._dx = np.zeros((k, 2))
            self._live = np.zeros(k, dtype=bool)

        present = conf > 0
        dt = 1.0 / self.fps
        cont = present & self._live  # points with a previous state to filter against
        out = xf.copy()
        if cont.any():
            xp = self._x[cont]
            raw_dx = (xf[cont] - xp) / dt
            a_d = _alpha(self.params.d_cutoff, dt)
            dx = a_d * raw_dx + (1.0 - a_d) * self._dx[cont]
            # One cutoff per point from its 2-D speed, so x and y of a point lag equally.
            speed = np.linalg.norm(dx, axis=1, keepdims=True)
            a = _alpha(self.params.min_cutoff + self.params.beta * speed, dt)
            out[cont] = a * xf[cont] + (1.0 - a) * xp
            self._dx[cont] = dx

        fresh = present & ~self._live  # first frame or reappearing: start from the measurement
        self._dx[fresh] = 0.0
        self._x[present] = out[present]
        self._live = present.copy()
        return out.astype(out_dtype)


def smooth_sequence(keypoints: np.ndarray, fps: float, **params: float) -> np.ndarray:
    """Smooth a keypoint sequence ``[T, K, 3]`` (x, y, confidence) with a One Euro filter.

    Confidences are returned unchanged; points with confidence 0 keep their coordinates and
    restart the filter when they reappear. ``params`` are ``min_cutoff``, ``beta``, ``d_cutoff``
    (defaults in ``DEFAULT_PARAMS``). Returns a new float32 array of the same shape.

    Example::

        smoothed = smooth_sequence(raw, fps=30, beta=5.0)
    """
    kp = np.asarray(keypoints)
    if kp.ndim != 3 or kp.shape[2] != 3:
        raise ValueError(f"expected keypoints [T, K, 3], got {kp.shape}")
    f = OneEuroFilter(fps, **params)
    out = kp.astype(np.float32, copy=True)
    for t in range(kp.shape[0]):
        out[t, :, :2] = f.filter(kp[t, :, :2].astype(np.float64), kp[t, :, 2])
    return out
