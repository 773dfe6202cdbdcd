"""The timeline planner: a story's gesture cues and the speech's length -> one pose per frame.

Each cue gets a slot of frames (its sentence's span, or ``at`` .. ``at + for``); the idle loop
fills every frame no cue holds. In its slot a loop starts at its own frame 0 and repeats, or is cut,
to fill it (``fit: loop``), or plays once and hands the rest of the slot to the idle loop
(``fit: once``). The idle loop runs on the story's clock (frame ``t`` shows idle frame ``t mod
L``), so its breathing keeps its rhythm across gaps.

A join (where one part ends and the next starts) is a crossfade in pose space over the first
``blend`` frames of the incoming part: the outgoing loop keeps playing past its slot (loops are
seamless) while the incoming one starts on time, and each joint's position is
``(1 - w) * outgoing + w * incoming`` with ``w`` rising along a smoothstep from 0 to 1, so no
joint jumps at a cut. Everything is in the persona's retargeted keypoints (what the backend
follows), so the blend is what is rendered.

:func:`joint_jumps` and :func:`join_smoothness` measure the result: the largest frame-to-frame
move of any confident joint, in pixels of the persona's canvas, at the joins and inside the loops.

Example::

    timeline = plan_timeline(slots, total_frames=270, loops={"welcome": kp_w}, idle=kp_idle, max_blend_frames=45)
    timeline.keypoints.shape                     # (270, 133, 3)
    join_smoothness(timeline, (720, 1280))["max_jump_at_joins_px"]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from newsmotion_engine.errors import NewsmotionError

__all__ = ["IDLE", "Part", "Slot", "Timeline", "blend_length", "joint_jumps", "join_smoothness", "plan_timeline", "smoothstep_weights"]

IDLE = "idle"
# A joint counts in the jump measure when it is this confident in both frames (the render's rule).
CONFIDENT = 0.3


@dataclass(frozen=True)
class Slot:
    """Frames ``[start, stop)`` asked of loop ``loop_id`` by the cue at ``field``; ``fit`` is
    ``"loop"`` or ``"once"``."""

    loop_id: str
    start: int
    stop: int
    field: str
    fit: str = "loop"


@dataclass(frozen=True)
class Part:
    """A stretch of the timeline: loop ``loop_id`` over frames ``[start, stop)``; ``kind`` is
    ``"gesture"`` or ``"idle"``; its join with the part before crossfades over frames
    ``[start - blend_before, start + blend_after)``; ``field`` is the cue it comes from (``None``
    for idle)."""

    kind: str
    loop_id: str
    start: int
    stop: int
    blend_before: int = 0
    blend_after: int = 0
    field: str | None = None

    @property
    def frames(self) -> int:
        return self.stop - self.start

    @property
    def blend(self) -> int:
        """The join's crossfade length in frames (0: a cut)."""
        return self.blend_before + self.blend_after


@dataclass(frozen=True)
class Timeline:
    """The planned poses ``keypoints`` float32 ``[T, 133, 3]`` and the parts they come from."""

    keypoints: np.ndarray
    parts: tuple[Part, ...]

    @property
    def joins(self) -> tuple[int, ...]:
        """The first frame of every part after the first."""
        return tuple(p.start for p in self.parts[1:])


def smoothstep_weights(n: int) -> np.ndarray:
    """The incoming part's weight on each of ``n`` blended frames: smoothstep at ``(i + 1) / (n + 1)``,
    strictly between 0 and 1 (the frame before the blend is all outgoing, the one after all incoming)."""
    x = np.arange(1, n + 1, dtype=np.float64) / (n + 1)
    return x * x * (3 - 2 * x)


def _parts(slots: Sequence[Slot], total: int, loop_frames: Mapping[str, int], idle_id: str) -> list[tuple[str, str, int, int, str | None]]:
    """(kind, loop, start, stop, field) covering ``[0, total)``: the slots in order, idle between."""
    out: list[tuple[str, str, int, int, str | None]] = []
    t = 0
    for slot in sorted(slots, key=lambda s: s.start):
        stop = slot.stop if slot.fit == "loop" else min(slot.stop, slot.start + loop_frames[slot.loop_id])
        if slot.start > t:
            out.append((IDLE, idle_id, t, slot.start, None))
        out.append(("gesture", slot.loop_id, slot.start, stop, slot.field))
        t = slot.stop
        if stop < slot.stop:  # fit: once, the loop is shorter than its slot
            out.append((IDLE, idle_id, stop, slot.stop, None))
    if t < total:
        out.append((IDLE, idle_id, t, total, None))
    merged: list[tuple[str, str, int, int, str | None]] = []
    for part in out:
        if merged and part[0] == IDLE and merged[-1][0] == IDLE:
            merged[-1] = (IDLE, idle_id, merged[-1][2], part[3], None)
        elif part[3] > part[2]:
            merged.append(part)
    return merged


def _source_frames(kind: str, kp: np.ndarray, start: int, frames: np.ndarray) -> np.ndarray:
    """The loop frames shown at story frames ``frames`` by a part starting at ``start``: idle on
    the story's clock, a gesture from its own frame 0, both wrapping around."""
    n = kp.shape[0]
    index = frames % n if kind == IDLE else (frames - start) % n
    return kp[index]


def plan_timeline(
    slots: Sequence[Slot],
    *,
    total_frames: int,
    loops: Mapping[str, np.ndarray],
    idle: np.ndarray,
    idle_id: str = "rest",
    max_blend_frames: int = 45,
    canvas: tuple[int, int] = (720, 1280),
) -> Timeline:
    """Plan ``total_frames`` poses from the gesture ``slots`` (non-overlapping, inside the clip).

    Args:
        slots: the cues' slots; they must not overlap and must lie in ``[0, total_frames)``.
        total_frames: the clip's length in frames (the speech's length).
        loops: loop id -> retargeted keypoints ``[L, 133, 3]`` for every slot's loop.
        idle: the idle loop's retargeted keypoints ``[L, 133, 3]``.
        idle_id: the idle loop's name, recorded in the parts.
        max_blend_frames: the longest transition (0: hard cuts, no blending at all). Up to it, a
            join blends long enough that the crossfade adds no more than half the two loops' own
            fastest joint move to any step (:func:`blend_length`), within the frames the two
            parts have free; a join with nothing to bridge (rest to rest) is a plain cut.
        canvas: ``(width, height)`` in pixels of the canvas the keypoints are normalized to
            (distances and speeds are measured there).

    Raises:
        NewsmotionError: overlapping or out-of-range slots, a slot's loop missing from ``loops``.
    """
    if total_frames < 1:
        raise NewsmotionError(f"a story timeline needs at least one frame, not {total_frames}")
    if max_blend_frames < 0:
        raise NewsmotionError(f"max_blend_frames {max_blend_frames} is negative")
    ordered = sorted(slots, key=lambda s: s.start)
    for before, after in zip(ordered, ordered[1:]):
        if after.start < before.stop:
            raise NewsmotionError(f"{after.field} starts at frame {after.start}, inside {before.field} (frames {before.start}-{before.stop})")
    for slot in ordered:
        if not 0 <= slot.start < slot.stop <= total_frames:
            raise NewsmotionError(f"{slot.field}: frames {slot.start}-{slot.stop} are not inside the clip's {total_frames}")
        if slot.loop_id not in loops:
            raise NewsmotionError(f"{slot.field}: no keypoints given for loop {slot.loop_id!r}")
    sources = {**loops, idle_id: idle}
    for name, kp in sources.items():
        if kp.ndim != 3 or kp.shape[0] < 1 or kp.shape[2] != 3:
            raise NewsmotionError(f"loop {name!r}: keypoints of shape {kp.shape}; expected [L, 133, 3]")

    speed = {name: _top_speed(kp, canvas) for name, kp in sources.items()}
    out = np.empty((total_frames, *idle.shape[1:]), np.float32)
    parts: list[Part] = []
    for kind, loop_id, start, stop, field in _parts(ordered, total_frames, {k: v.shape[0] for k, v in loops.items()}, idle_id):
        out[start:stop] = _source_frames(kind, sources[loop_id], start, np.arange(start, stop))
        before = after = 0
        if parts and max_blend_frames:
            prev = parts[-1]
            cut_from = _source_frames(prev.kind, sources[prev.loop_id], prev.start, np.array([start]))[0]
            gap = _pose_distance(cut_from, out[start], canvas)
            want = blend_length(gap, max(speed[prev.loop_id], speed[loop_id]), max_blend_frames)
            # Half the window after the join, half before it, each within what its part has free.
            after = min(want - want // 2, stop - start)
            before = min(want - after, prev.frames - prev.blend_after)
            after = min(want - before, stop - start)
        if before + after:
            window = np.arange(start - before, start + after)
            outgoing = _source_frames(prev.kind, sources[prev.loop_id], prev.start, window)
            incoming = _source_frames(kind, sources[loop_id], start, window)  # before the join: its loop's last frames
            w = smoothstep_weights(window.size)[:, None]
            mixed = incoming.copy()
            mixed[..., :2] = (1 - w[..., None]) * outgoing[..., :2] + w[..., None] * incoming[..., :2]
            mixed[..., 2] = np.where(w < 0.5, outgoing[..., 2], incoming[..., 2])
            out[window] = mixed
        parts.append(Part(kind, loop_id, start, stop, before, after, field))
    return Timeline(out, tuple(parts))


def blend_length(gap_px: float, top_speed_px: float, longest: int) -> int:
    """Frames a crossfade over a pose gap of ``gap_px`` (what a cut would jump) needs so that the
    gap's share of each step, at most ``1.5 * gap / (n + 1)`` (the smoothstep's steepest slope),
    stays within half the two loops' own top joint speed ``top_speed_px``; at most ``longest``.
    A join between two rest poses has no gap and needs none."""
    if top_speed_px <= 0:
        return longest
    need = int(np.ceil(3.0 * gap_px / top_speed_px)) - 1
    return int(min(max(need, 0), longest))


def _pose_distance(a: np.ndarray, b: np.ndarray, canvas: tuple[int, int]) -> float:
    """The largest distance in canvas pixels between a joint confident in both poses."""
    ok = (a[:, 2] >= CONFIDENT) & (b[:, 2] >= CONFIDENT)
    if not ok.any():
        return 0.0
    d = np.linalg.norm((a[ok, :2] - b[ok, :2]) * np.asarray(canvas, np.float64), axis=-1)
    return float(d.max())


def _top_speed(kp: np.ndarray, canvas: tuple[int, int]) -> float:
    """A loop's largest frame-to-frame joint move, the wrap from its last frame to its first included."""
    return float(joint_jumps(np.concatenate([kp, kp[:1]]), canvas).max(initial=0.0))


def joint_jumps(keypoints: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """``[T - 1]``: the largest move of any joint confident in both frames between frame ``t`` and
    ``t + 1``, in pixels of the ``(width, height)`` canvas the keypoints are normalized to."""
    kp = np.asarray(keypoints, np.float64)
    if kp.shape[0] < 2:
        return np.zeros(0)
    px = kp[..., :2] * np.asarray(canvas, np.float64)
    step = np.linalg.norm(px[1:] - px[:-1], axis=-1)
    ok = (kp[1:, :, 2] >= CONFIDENT) & (kp[:-1, :, 2] >= CONFIDENT)
    return np.where(ok, step, 0.0).max(axis=1)


def join_smoothness(timeline: Timeline, canvas: tuple[int, int]) -> dict:
    """The largest frame-to-frame joint move at the joins (from the last frame before each join
    through the end of its blend) and inside the parts (every other step), in canvas pixels, with
    each join's own figure."""
    jumps = joint_jumps(timeline.keypoints, canvas)
    at_join = np.zeros(jumps.shape[0], bool)
    per_join = []
    for part in timeline.parts[1:]:
        # Step t is frame t -> t + 1: a join's steps run from the last frame before its window
        # to the first frame after it.
        lo, hi = part.start - part.blend_before - 1, min(part.start + part.blend_after, jumps.shape[0])
        at_join[lo:hi] = True
        per_join.append({"frame": part.start, "into": part.loop_id, "blend_frames": part.blend,
                         "max_jump_px": round(float(jumps[lo:hi].max()), 2)})  # fmt: skip
    inside = jumps[~at_join]
    return {
        "max_jump_at_joins_px": round(float(jumps[at_join].max()), 2) if at_join.any() else None,
        "max_jump_inside_px": round(float(inside.max()), 2) if inside.size else None,
        "joins": per_join,
    }
