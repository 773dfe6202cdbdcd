"""Frame infill for sparse keyframes: a backend generates every ``ratio``-th frame and the frames in
between are synthesized from the two keyframes around them.

The method is classic bidirectional flow interpolation, weights-free, on the CPU:

1. **Flow and visibility** (:mod:`newsmotion_engine.video.flow`): DIS optical flow on the two
   keyframes' luma, both ways: ``F01`` (keyframe a -> b) and ``F10`` (b -> a), and each side's
   soft visibility in the other from forward/backward consistency.
2. **Warp.** A pixel ``x`` of the frame at time ``t`` came from ``p0`` in a with
   ``p0 + t F01(p0) = x`` and from ``p1`` in b with ``p1 + (1 - t) F10(p1) = x``; both are found
   by fixed-point iteration. Where the iteration does not settle (no pixel of a lands on ``x``:
   content that appears between a and b) that side's weight drops.
3. **Blend.** ``(w0 a(p0) + w1 b(p1)) / (w0 + w1)`` with ``w0 = (1 - t) v0(p0) c0``, ``w1 = t v1(p1)
   c1`` (``v``: visibility, ``c``: convergence). Where both sides are occluded the nearer keyframe's
   sample is used (a tiny constant weight on the nearer side, so there is no branch).

**Matte-aware.** Given the keyframes' person mattes (uint8 alpha), only the person layer is
interpolated: each keyframe is un-mixed into a premultiplied foreground
``P = clip(frame - B (1 - alpha), 0, 255 alpha)`` (exact when the frame was composited over the
background colour ``B``; clipped when it was not), ``P`` and ``alpha`` are warped and blended
together with the same flow and weights, and the result is composited over the exact colour:
``P_t + B (1 - alpha_t)``. Where the interpolated matte is 0 the pixel is exactly ``B``.

Entry points: :func:`interpolate` (one frame, pure), :class:`KeyframePair` (one pair, any number of
``t``) and :class:`Infiller` (a streaming stage for a render loop); which frames are keyframes:
:mod:`newsmotion_engine.video.infill_schedule`.

Example::

    infill = Infiller(ratio=2, frames=120)
    for k in infill.schedule.keyframes:
        for frame in infill.push(render_keyframe(k)):
            encoder.write(frame)
    for frame in infill.flush():          # the loop's tail, towards frame 0
        encoder.write(frame)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cv2
import numpy as np

from newsmotion_engine.errors import InfillError
from newsmotion_engine.video.flow import FlowConfig, check_frame, dis_flow, luma, pixel_grid, source_points, visibility
from newsmotion_engine.video.infill_schedule import keyframe_schedule
from newsmotion_engine.video.spec import BACKGROUND_CHROMA_GREEN

__all__ = ["InfillConfig", "Infiller", "KeyframePair", "interpolate"]

# Weight of the nearer keyframe where both samples are occluded: small enough to vanish next to
# any real visibility, large enough to decide where both are ~0.
_FALLBACK_WEIGHT = 1e-3


@dataclass(frozen=True)
class InfillConfig:
    """How in-between frames are synthesized (defaults tuned with ``bench/infill.py``).

    Args:
        flow: the DIS settings.
        occlusion_alpha, occlusion_beta: forward/backward consistency tolerance
            ``alpha (|F01|^2 + |F10|^2) + beta`` in px^2 (Sundaram et al. use 0.01 and 0.5).
        fixed_point_iters: iterations solving ``p + t F(p) = x`` for each side.
        converge_px: residual (px) of that iteration at which a side's weight falls to 1/e.
        interpolation: ``"cubic"`` or ``"linear"`` resampling of the keyframes (the flow and the
            weights are always sampled linearly).
        geometry_scale: the visibility and the fixed-point solve run on a grid this many times
            coarser (the flow is smooth, so the source points are upsampled with little loss);
            only the final resampling of the keyframes runs at full resolution.
        motion: ``"quadratic"`` (default): each keyframe's pixels follow a parabola fitted to its
            flows towards both neighbouring keyframes (the pair's other keyframe and the one on
            the far side), so accelerating motion lands where it should (W. Xu et al.,
            "Quadratic video interpolation", NeurIPS 2019); falls back to linear where that
            neighbour is missing or the flow to it is occluded. ``"linear"``: constant velocity.
    """

    flow: FlowConfig = field(default_factory=FlowConfig)
    occlusion_alpha: float = 0.01
    occlusion_beta: float = 0.5
    fixed_point_iters: int = 4
    converge_px: float = 0.5
    interpolation: Literal["cubic", "linear"] = "cubic"
    geometry_scale: int = 2
    motion: Literal["quadratic", "linear"] = "quadratic"

    def __post_init__(self) -> None:
        if not isinstance(self.flow, FlowConfig):
            raise InfillError(f"infill flow must be a FlowConfig, got {type(self.flow).__name__}")
        if not (self.occlusion_alpha >= 0 and self.occlusion_beta > 0 and self.converge_px > 0):
            raise InfillError("infill occlusion_alpha must be >= 0, occlusion_beta and converge_px > 0")
        if not isinstance(self.fixed_point_iters, (int, np.integer)) or not 1 <= self.fixed_point_iters <= 20:
            raise InfillError(f"infill fixed_point_iters {self.fixed_point_iters!r} is out of range: use 1..20")
        if self.interpolation not in ("cubic", "linear"):
            raise InfillError(f"infill interpolation {self.interpolation!r} is unknown: use 'cubic' or 'linear'")
        if self.motion not in ("quadratic", "linear"):
            raise InfillError(f"infill motion {self.motion!r} is unknown: use 'quadratic' or 'linear'")
        if not isinstance(self.geometry_scale, (int, np.integer)) or not 1 <= self.geometry_scale <= 8:
            raise InfillError(f"infill geometry_scale {self.geometry_scale!r} is out of range: use an integer 1..8")

    @property
    def cv_interpolation(self) -> int:
        return cv2.INTER_CUBIC if self.interpolation == "cubic" else cv2.INTER_LINEAR

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow.as_dict(),
            "occlusion_alpha": self.occlusion_alpha,
            "occlusion_beta": self.occlusion_beta,
            "fixed_point_iters": int(self.fixed_point_iters),
            "converge_px": self.converge_px,
            "interpolation": self.interpolation,
            "geometry_scale": int(self.geometry_scale),
            "motion": self.motion,
        }


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------
def _check_alpha(name: str, alpha: Any, shape: tuple[int, int]) -> np.ndarray:
    arr = np.asarray(alpha)
    if arr.dtype != np.uint8:
        raise InfillError(f"{name}: expected a uint8 matte (0..255), got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[..., 0]
    if arr.shape != shape:
        raise InfillError(f"{name}: matte shape {arr.shape} does not match the frame's {shape}")
    return arr


def _check_background(background: Any) -> np.ndarray:
    try:
        bg = np.asarray(background, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InfillError(f"background {background!r} is not an (r, g, b) colour") from None
    if bg.shape != (3,) or not np.all((bg >= 0) & (bg <= 255)) or not np.all(bg == np.round(bg)):
        raise InfillError(f"background {background!r} is not an (r, g, b) colour of integers 0..255")
    return bg.astype(np.float32)


def _check_t(t: Any) -> float:
    try:
        tf = float(t)
    except (TypeError, ValueError):
        raise InfillError(f"time t={t!r} is not a number") from None
    if not 0.0 < tf < 1.0:
        raise InfillError(f"time t={t!r} must lie strictly between the keyframes (0 < t < 1)")
    return tf


# --------------------------------------------------------------------------------------------
# One keyframe pair
# --------------------------------------------------------------------------------------------
class KeyframePair:
    """Two keyframes and their bidirectional flow: synthesize the frame at any ``0 < t < 1``.

    Args:
        a, b: uint8 RGB ``[H, W, 3]`` keyframes (a before b), the same shape.
        alpha_a, alpha_b: optional uint8 ``[H, W]`` person mattes of a and b (both or neither).
            With mattes only the person layer is interpolated and composited over ``background``.
        background: the exact background colour (RGB); used only with mattes.
        config: :class:`InfillConfig` (default: tuned defaults).
        gap: frames from a to b (only ratios of neighbouring pairs' gaps matter, for the
            quadratic motion model).

    The flow (two DIS runs) is computed once here; each :meth:`at` costs only warps and blends.

    Raises:
        InfillError: shapes or dtypes that do not fit, one matte without the other.
    """

    def __init__(
        self,
        a: np.ndarray,
        b: np.ndarray,
        *,
        alpha_a: np.ndarray | None = None,
        alpha_b: np.ndarray | None = None,
        background: Sequence[int] = BACKGROUND_CHROMA_GREEN,
        config: InfillConfig | None = None,
        gap: int = 1,
    ) -> None:
        a = check_frame("keyframe a", a)
        b = check_frame("keyframe b", b)
        if a.shape != b.shape:
            raise InfillError(f"keyframes differ in shape: a {a.shape} vs b {b.shape}")
        if (alpha_a is None) != (alpha_b is None):
            raise InfillError("give both keyframes' mattes (alpha_a and alpha_b) or neither")
        self.config = config or InfillConfig()
        if not isinstance(gap, (int, np.integer)) or isinstance(gap, bool) or gap < 1:
            raise InfillError(f"keyframe gap {gap!r} must be a positive number of frames")
        self.gap = int(gap)
        self.shape = a.shape
        h, w = a.shape[:2]
        self._grid = pixel_grid(h, w)
        self.matte = alpha_a is not None
        if self.matte:
            self.background = _check_background(background)
            ma = _check_alpha("alpha_a", alpha_a, (h, w))
            mb = _check_alpha("alpha_b", alpha_b, (h, w))
            self._layers = (self._premultiplied(a, ma), self._premultiplied(b, mb))
            bx, by, bw, bh = cv2.boundingRect(cv2.max(ma, mb))
            self._support = (bx, by, bx + bw, by + bh) if bw and bh else None
        else:
            self.background = None
            self._support = None
            self._layers = (a, b)

        t0 = time.perf_counter()
        fc = self.config.flow
        dis = fc.create()
        la, lb = luma(a), luma(b)
        self.f01 = dis_flow(dis, la, lb, fc.downscale)
        self.f10 = dis_flow(dis, lb, la, fc.downscale)
        self.flow_ms = (time.perf_counter() - t0) * 1e3
        g = int(self.config.geometry_scale)
        if g == 1:
            self._f01g, self._f10g, self._grid_g = self.f01, self.f10, self._grid
        else:
            small = (max(2, -(-w // g)), max(2, -(-h // g)))
            self._f01g = cv2.resize(self.f01, small, interpolation=cv2.INTER_AREA) * (small[0] / w)
            self._f10g = cv2.resize(self.f10, small, interpolation=cv2.INTER_AREA) * (small[0] / w)
            self._grid_g = pixel_grid(small[1], small[0])
        self._scale_g = w / self._grid_g.shape[1]
        self.v0 = visibility(self._f01g, self._f10g, self._grid_g, self.config.occlusion_alpha, self.config.occlusion_beta)
        self.v1 = visibility(self._f10g, self._f01g, self._grid_g, self.config.occlusion_alpha, self.config.occlusion_beta)

    def _premultiplied(self, frame: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """``[H, W, 4]`` uint8: the person colour premultiplied by its matte and the matte.

        Un-mixing inverts the composite exactly as :meth:`at` applies it: ``P = frame - round(B
        (1 - alpha))`` (saturating at 0), capped at ``alpha`` (a colour cannot exceed its
        coverage; this also drops whatever the frame shows where the matte is 0). uint8 keeps the
        per-frame resampling cheap; the rounding is the output's own."""
        alpha3 = cv2.merge([alpha, alpha, alpha])
        fg = cv2.min(cv2.subtract(frame, cv2.LUT(alpha3, self._background_lut())), alpha3)
        return cv2.merge([fg, alpha])

    def _displacement(self, side: int, s: float, neighbour: KeyframePair | None) -> np.ndarray:
        """Where the pixels of keyframe a (``side`` 0) or b (1) are at fraction ``s`` of the way
        to the other keyframe, as a displacement field on the coarse grid.

        Linear: ``s * F``. Quadratic: with ``u`` the flow to the other keyframe (time 1) and
        ``w`` the flow to the neighbour on the far side (time ``-rho``, ``rho`` = neighbour gap /
        this gap), the parabola through both has ``acc = 2 (rho u + w) / (rho (1 + rho))`` and
        ``vel = u - acc / 2``; displacement ``vel s + acc s^2 / 2``. The acceleration is damped by
        both flows' visibility (an occluded flow says nothing about the motion)."""
        u, vis_u = (self._f01g, self.v0) if side == 0 else (self._f10g, self.v1)
        if self.config.motion == "linear" or neighbour is None:
            return u * s
        if neighbour.shape != self.shape or neighbour._grid_g.shape != self._grid_g.shape:
            raise InfillError(f"neighbouring keyframe pair has frames of shape {neighbour.shape}, this pair {self.shape}")
        # side 0 (a): the neighbour pair ends at a, its flow b -> a points back; side 1 (b): the
        # neighbour pair starts at b.
        w, vis_w = (neighbour._f10g, neighbour.v1) if side == 0 else (neighbour._f01g, neighbour.v0)
        rho = neighbour.gap / self.gap
        acc = (rho * u + w) * (2.0 / (rho * (1.0 + rho)))
        acc *= (vis_u * vis_w)[..., None]
        return u * s + acc * (0.5 * (s * s - s))

    def _side(
        self, disp_g: np.ndarray, vis_g: np.ndarray, layer: np.ndarray, roi: tuple[int, int, int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """One keyframe's contribution: its layer warped by the displacement field ``disp_g``
        (coarse grid) over the full-resolution box ``roi`` (x0, y0, x1, y1), and its
        unnormalized confidence (visibility x convergence) on the coarse grid."""
        cfg = self.config
        g = self._scale_g
        p, residual = source_points(disp_g, 1.0, self._grid_g, cfg.fixed_point_iters)
        conf = cv2.remap(vis_g, p, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        conf *= np.exp(-np.square(residual * (g / cfg.converge_px)))
        if p.shape[:2] != self.shape[:2]:
            # Upsample the displacement (smooth), not the points, so pixel centres line up.
            size = (self.shape[1], self.shape[0])
            p = self._grid + cv2.resize(p - self._grid_g, size, interpolation=cv2.INTER_LINEAR) * g
        x0, y0, x1, y1 = roi
        sample = cv2.remap(layer, p[y0:y1, x0:x1], None, cfg.cv_interpolation, borderMode=cv2.BORDER_REPLICATE)
        return sample, conf

    def _weight0(self, t: float, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
        """Keyframe a's share of each output pixel (full resolution, float32); b has the rest."""
        near0 = 1.0 if t < 0.5 else (0.5 if t == 0.5 else 0.0)
        w0 = (1.0 - t) * c0 + _FALLBACK_WEIGHT * near0
        w1 = t * c1 + _FALLBACK_WEIGHT * (1.0 - near0)
        k0 = (w0 / (w0 + w1)).astype(np.float32)
        if k0.shape != self.shape[:2]:
            k0 = cv2.resize(k0, (self.shape[1], self.shape[0]), interpolation=cv2.INTER_LINEAR)
        return k0

    def at(
        self, t: float, *, before: KeyframePair | None = None, after: KeyframePair | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The frame at time ``t`` (0 = a, 1 = b): ``(rgb uint8 [H, W, 3], alpha uint8 [H, W] or
        None)``; the alpha is the interpolated matte when the pair has mattes.

        ``before``: the pair ending at a; ``after``: the pair starting at b (each optional; used
        by the quadratic motion model, see :class:`InfillConfig`)."""
        t = _check_t(t)
        d0 = self._displacement(0, t, before)
        d1 = self._displacement(1, 1.0 - t, after)
        roi = self._region(d0, d1)
        if roi is None:  # both mattes empty: nothing but background
            return self._background_image().copy(), np.zeros(self.shape[:2], np.uint8)
        s0, c0 = self._side(d0, self.v0, self._layers[0], roi)
        s1, c1 = self._side(d1, self.v1, self._layers[1], roi)
        x0, y0, x1, y1 = roi
        k0 = self._weight0(t, c0, c1)[y0:y1, x0:x1]
        blend = cv2.blendLinear(s0, s1, k0, 1.0 - k0)  # rounds and saturates to uint8
        if not self.matte:
            return blend, None
        alpha = np.zeros(self.shape[:2], np.uint8)
        alpha[y0:y1, x0:x1] = blend[..., 3]
        rgb = self._background_image().copy()
        a_roi = np.ascontiguousarray(blend[..., 3])
        # Premultiplied colour never exceeds its matte: where the matte is 0 nothing of the
        # person remains and the background below shows exactly.
        fg = np.minimum(blend[..., :3], a_roi[..., None])
        # Composite P + B (1 - alpha): P is an integer, so rounding the sum equals P plus the
        # rounded background term, a per-alpha table; P <= alpha keeps the sum <= 255.
        rgb[y0:y1, x0:x1] = cv2.add(fg, cv2.LUT(cv2.merge([a_roi, a_roi, a_roi]), self._background_lut()))
        return rgb, alpha

    def _region(self, d0: np.ndarray, d1: np.ndarray) -> tuple[int, int, int, int] | None:
        """The output box that can hold any of the person (matte path; the whole frame without
        mattes): both mattes' support grown by the largest displacement (every output pixel
        samples within that distance of itself) plus the cubic kernel's reach. Outside it the
        frame is exactly the background. ``None`` when both mattes are empty."""
        h, w = self.shape[:2]
        if not self.matte:
            return (0, 0, w, h)
        if self._support is None:
            return None
        reach = self._scale_g * max(float(np.abs(d0).max(initial=0.0)), float(np.abs(d1).max(initial=0.0)))
        m = int(np.ceil(reach * np.sqrt(2.0))) + 3
        x0, y0, x1, y1 = self._support
        return (max(0, x0 - m), max(0, y0 - m), min(w, x1 + m), min(h, y1 + m))

    def _background_image(self) -> np.ndarray:
        img = self.__dict__.get("_bg_image")
        if img is None:
            img = np.empty(self.shape, np.uint8)
            img[:] = self.background.astype(np.uint8)
            self._bg_image = img
        return img

    def _background_lut(self) -> np.ndarray:
        lut = self.__dict__.get("_bg_lut")
        if lut is None:
            levels = 1.0 - np.arange(256, dtype=np.float64) / 255.0
            lut = np.floor(levels[:, None] * self.background[None, :].astype(np.float64) + 0.5)
            lut = np.ascontiguousarray(lut.astype(np.uint8).reshape(256, 1, 3))
            self._bg_lut = lut
        return lut


def interpolate(
    a: np.ndarray,
    b: np.ndarray,
    t: float = 0.5,
    alpha_a: np.ndarray | None = None,
    alpha_b: np.ndarray | None = None,
    *,
    background: Sequence[int] = BACKGROUND_CHROMA_GREEN,
    config: InfillConfig | None = None,
) -> np.ndarray:
    """The frame at time ``t`` between keyframes ``a`` (t=0) and ``b`` (t=1), uint8 RGB.

    Pure function over :class:`KeyframePair` (which see for the arguments). For several ``t`` of
    one pair, build the pair once and call :meth:`KeyframePair.at`: the flow is the costly part.

    Example::

        mid = interpolate(frame0, frame2, 0.5)
        mid = interpolate(frame0, frame2, 0.5, matte0, matte2)   # exact chroma background
    """
    return KeyframePair(a, b, alpha_a=alpha_a, alpha_b=alpha_b, background=background, config=config).at(t)[0]


# --------------------------------------------------------------------------------------------
# Streaming stage
# --------------------------------------------------------------------------------------------
class Infiller:
    """The infill stage of a render loop: push keyframes in schedule order, write what comes back.

    ``push(keyframe, alpha=None)`` returns the frames to emit now, in clip order. The quadratic
    motion model needs the keyframe after a pair, so output runs one keyframe behind: pushing
    keyframe ``k[i]`` releases the in-betweens of ``(k[i-2], k[i-1])`` and then ``k[i-1]`` (the
    same array that was pushed, not a copy); the first push releases frame 0 at once.
    ``flush()`` ends the clip: it releases the last pair's in-betweens, the last keyframe and, for a
    loop, the frames after it, infilled towards the first keyframe (frame 0 of the next cycle);
    the stage is then ready for the next clip. ``reset()`` abandons a clip (e.g. after a failed
    render). Memory: three keyframe pairs (their flows) and the first keyframe.

    In a loop the first pair has no pair before it yet (the wrap pair comes last), so its first
    keyframe's side uses linear motion; every other side is quadratic.

    Args:
        ratio: keyframe ratio (2 = every 2nd frame generated, 3 = every 3rd; 1 passes through).
        frames: the clip's frame count (the schedule needs it: the tail and the loop wrap).
        loop: the clip is a seamless loop (default) or not; see :func:`keyframe_schedule`.
        background, config: as :class:`KeyframePair`. Mattes: give one with every keyframe or none.
        device: ``None`` (default): warps and blends with OpenCV on the CPU; a torch device
            (``"cuda"``, ``"cpu"``): the same maths in torch
            (:mod:`newsmotion_engine.video.infill_torch`), on CUDA on a stream of its own (so it
            never waits for the renderer's work on the caller's stream); the flow is DIS on the
            CPU either way.

    ``stats``: ``flow_ms`` and ``warp_ms`` (totals), ``pairs`` (flows computed), ``infilled``.

    Raises:
        InfillError: a keyframe of another shape, a matte missing on some keyframes only, more
        keyframes than the schedule has, or ``flush()`` before the last keyframe.
    """

    def __init__(
        self,
        ratio: int,
        frames: int,
        *,
        loop: bool = True,
        background: Sequence[int] = BACKGROUND_CHROMA_GREEN,
        config: InfillConfig | None = None,
        device: str | None = None,
    ) -> None:
        self.schedule = keyframe_schedule(frames, ratio, loop=loop)
        self.device = device
        self._stream: Any = None  # CUDA only: see _own_stream
        self.background = tuple(int(c) for c in _check_background(background))
        self.config = config or InfillConfig()
        self.stats: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the clip in progress (keyframes seen, held frames and flows, stats)."""
        self._clear_clip()
        self.stats = {"flow_ms": 0.0, "warp_ms": 0.0, "pairs": 0, "infilled": 0}

    def _clear_clip(self) -> None:
        self._next = 0  # index into schedule.keyframes of the next keyframe expected
        self._first: tuple[np.ndarray, np.ndarray | None] | None = None
        self._last: tuple[np.ndarray, np.ndarray | None] | None = None
        self._first_pair: KeyframePair | None = None  # (k0, k1): the loop wrap's pair after
        self._before: KeyframePair | None = None  # the pair before the waiting one
        self._waiting: KeyframePair | None = None  # the newest pair, its in-betweens not yet out

    @property
    def next_keyframe(self) -> int | None:
        """The frame index of the keyframe expected next (``None`` when all were pushed)."""
        keys = self.schedule.keyframes
        return keys[self._next] if self._next < len(keys) else None

    def _pair(self, k0: tuple, k1: tuple, gap: int) -> KeyframePair | None:
        if self.schedule.ratio == 1:
            return None  # nothing is ever infilled: no flow
        pair = KeyframePair(k0[0], k1[0], alpha_a=k0[1], alpha_b=k1[1], background=self.background,
                            config=self.config, gap=gap)  # fmt: skip
        self.stats["flow_ms"] += pair.flow_ms
        self.stats["pairs"] += 1
        return pair

    def _between(self, pair: KeyframePair | None, before: KeyframePair | None, after: KeyframePair | None) -> list[np.ndarray]:
        if pair is None or pair.gap < 2:
            return []
        t0 = time.perf_counter()
        if self.device is None:
            out = [pair.at(j / pair.gap, before=before, after=after)[0] for j in range(1, pair.gap)]
        else:
            from newsmotion_engine.video.infill_torch import at_torch

            with self._own_stream():
                out = [at_torch(pair, j / pair.gap, before=before, after=after, device=self.device)[0] for j in range(1, pair.gap)]
        self.stats["warp_ms"] += (time.perf_counter() - t0) * 1e3
        self.stats["infilled"] += len(out)
        return out

    def _own_stream(self) -> Any:
        """On a CUDA device, the infill's own stream (every torch op of this stage runs on it,
        the pairs' uploaded arrays included): each in-between's copy to the host then waits for
        the infill's kernels only, not for what the renderer queued on its stream meanwhile (a
        streaming VAE decode of the next frames). Elsewhere nothing."""
        if self._stream is None:
            import torch

            device = torch.device(self.device)
            if device.type != "cuda":
                return contextlib.nullcontext()
            self._stream = torch.cuda.Stream(device=device)
        import torch

        return torch.cuda.stream(self._stream)

    def push(self, keyframe: np.ndarray, alpha: np.ndarray | None = None) -> list[np.ndarray]:
        """Add the next keyframe (frame ``next_keyframe``); returns the frames to emit now."""
        index = self.next_keyframe
        if index is None:
            raise InfillError(
                f"all {len(self.schedule.keyframes)} keyframes of the {self.schedule.frames}-frame clip were already "
                "pushed: call flush() to end the clip"
            )
        frame = check_frame(f"keyframe {index}", keyframe)
        matte = None if alpha is None else _check_alpha(f"matte of keyframe {index}", alpha, frame.shape[:2])
        if self._first is not None:
            if frame.shape != self._first[0].shape:
                raise InfillError(f"keyframe {index} has shape {frame.shape}; the clip's keyframes are {self._first[0].shape}")
            if (matte is None) != (self._first[1] is None):
                raise InfillError(f"keyframe {index}: give a matte with every keyframe of a clip or with none")
        if self._next == 0:  # a new clip: its own figures
            self.stats = {"flow_ms": 0.0, "warp_ms": 0.0, "pairs": 0, "infilled": 0}
        current = (frame, matte)
        out: list[np.ndarray] = []
        if self._last is None:
            self._first = current
            out.append(frame)
        else:
            _, _, gap = self.schedule.pairs[self._next - 1]
            pair = self._pair(self._last, current, gap)
            if self._next == 1:
                self._first_pair = pair
            else:
                out += self._between(self._waiting, self._before, pair)
                out.append(self._last[0])
            self._before, self._waiting = self._waiting, pair
        self._last = current
        self._next += 1
        return out

    def flush(self) -> list[np.ndarray]:
        """End the clip: the frames still held (see the class docstring); then ready for the next."""
        if self.next_keyframe is not None:
            raise InfillError(
                f"flush() after {self._next} of {len(self.schedule.keyframes)} keyframes: the clip is incomplete "
                f"(next expected: frame {self.next_keyframe})"
            )
        assert self._first is not None and self._last is not None
        wrap = None
        if self.schedule.loop:
            _, _, gap = self.schedule.pairs[-1]
            wrap = self._pair(self._last, self._first, gap)
        out: list[np.ndarray] = []
        if self._waiting is not None or len(self.schedule.keyframes) > 1:
            out += self._between(self._waiting, self._before, wrap)
            out.append(self._last[0])
        if wrap is not None:
            out += self._between(wrap, self._waiting, self._first_pair)
        self._clear_clip()  # ready for the next clip; its stats stay readable until then
        return out
