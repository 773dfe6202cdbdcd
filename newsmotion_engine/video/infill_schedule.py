"""Which frames of a clip a backend generates (keyframes) and which the infill synthesizes.

Keyframes sit at ``0, r, 2r, ...``. A seamless loop's frame ``T`` is its frame 0, so the frames
after the last keyframe are infilled towards frame 0 (the
:class:`~newsmotion_engine.video.infill.Infiller` keeps the first keyframe for that); when ``T`` is
a multiple of ``r`` every gap is ``r`` and the loop stays seamless. A clip that does not loop
always has its last frame as a keyframe (the last gap may be shorter). A backend renders the
keyframe sequence as a clip of ``len(keyframes)`` frames (the driving pose sampled at the keyframe
indices); its segments and their overlaps live in that keyframe sequence, and the infiller sees
one stream of keyframes, so a segment join is an ordinary keyframe pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from newsmotion_engine.errors import InfillError
from newsmotion_engine.video.spec import MAX_KEYFRAME_RATIO

__all__ = ["MAX_RATIO", "KeyframeSchedule", "keyframe_schedule"]

MAX_RATIO = MAX_KEYFRAME_RATIO


@dataclass(frozen=True)
class KeyframeSchedule:
    """Which frames of a ``frames``-long clip a backend generates (``keyframes``) and which are
    infilled. ``pairs`` lists ``(k0, k1, gap)``: consecutive keyframes, ``k1 - k0 == gap``; in a
    loop the last pair's ``k1`` is ``frames`` (frame 0 of the next cycle)."""

    frames: int
    ratio: int
    loop: bool
    keyframes: tuple[int, ...]

    @property
    def pairs(self) -> tuple[tuple[int, int, int], ...]:
        ends = list(self.keyframes[1:]) + ([self.frames] if self.loop else [])
        return tuple((k0, k1, k1 - k0) for k0, k1 in zip(self.keyframes, ends))

    @property
    def infilled(self) -> tuple[int, ...]:
        keys = set(self.keyframes)
        return tuple(i for i in range(self.frames) if i not in keys)

    @property
    def generated_fraction(self) -> float:
        """Share of the frames the backend generates."""
        return len(self.keyframes) / self.frames

    def source(self, index: int) -> tuple[int, int, float]:
        """``(k0, k1, t)`` for frame ``index``: a keyframe gives ``(index, index, 0.0)``; an
        infilled frame lies at ``t`` between keyframes ``k0`` and ``k1`` (``k1 == frames`` means
        frame 0 of the next cycle)."""
        if not 0 <= index < self.frames:
            raise InfillError(f"frame {index} is outside the {self.frames}-frame clip")
        for k0, k1, gap in self.pairs:
            if index == k0:
                return (k0, k0, 0.0)
            if k0 < index < k1:
                return (k0, k1, (index - k0) / gap)
        raise AssertionError("unreachable: every frame is a keyframe or lies between two")

    def as_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "ratio": self.ratio, "loop": self.loop, "keyframes": len(self.keyframes),
                "generated_fraction": round(self.generated_fraction, 4)}  # fmt: skip


def keyframe_schedule(frames: int, ratio: int, *, loop: bool = True) -> KeyframeSchedule:
    """The keyframe schedule of a ``frames``-long clip at ``ratio`` (1 = every frame, 2 = every 2nd
    frame generated, 3 = every 3rd, ... up to :data:`MAX_RATIO`).

    Keyframes are ``0, ratio, 2 ratio, ...``. ``loop=True`` (the motion loops are seamless: frame
    ``frames`` is frame 0): the frames after the last keyframe are infilled between it and frame 0
    of the next cycle; with ``frames % ratio == 0`` every gap equals ``ratio``, otherwise the wrap
    gap is shorter (``frames % ratio``). ``loop=False``: the last frame is always a keyframe (the
    last gap may be shorter), so nothing is extrapolated.

    Example::

        s = keyframe_schedule(8, 2)    # keyframes (0, 2, 4, 6); 7 infilled between 6 and 8 == 0
        s.source(7)                    # (6, 8, 0.5)
    """
    for name, v in (("frames", frames), ("ratio", ratio)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise InfillError(f"keyframe schedule: {name} {v!r} is not an integer")
    if frames < 1:
        raise InfillError(f"keyframe schedule: frames {frames} must be at least 1")
    if not 1 <= ratio <= MAX_RATIO:
        raise InfillError(f"keyframe ratio {ratio} is out of range: use 1..{MAX_RATIO} (1 = no infill)")
    keys = list(range(0, int(frames), int(ratio)))
    if not loop and keys[-1] != frames - 1:
        keys.append(int(frames) - 1)
    return KeyframeSchedule(int(frames), int(ratio), bool(loop), tuple(keys))
