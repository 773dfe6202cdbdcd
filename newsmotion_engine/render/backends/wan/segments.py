"""How a clip splits into the Wan models' inference segments (both Wan backends plan alike): whole
segments of ``4k + 1`` frames, each overlapping the previous one by ``prev_frames``."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["VAE_SCALE_SPATIAL", "VAE_SCALE_TEMPORAL", "SegmentPlan", "fitted_segment_frames", "plan_segments"]

VAE_SCALE_SPATIAL = 8
VAE_SCALE_TEMPORAL = 4


@dataclass(frozen=True)
class SegmentPlan:
    """How a clip of ``frames`` splits into inference segments (as the stock pipeline does)."""

    frames: int
    segment_frames: int
    prev_frames: int
    segments: int

    @property
    def effective(self) -> int:
        return self.segment_frames - self.prev_frames

    @property
    def latent_frames(self) -> int:
        return (self.segment_frames - 1) // VAE_SCALE_TEMPORAL + 1

    def start(self, k: int) -> int:
        return k * self.effective

    def as_dict(self) -> dict[str, int]:
        return {"frames": self.frames, "segment_frames": self.segment_frames, "prev_frames": self.prev_frames,
                "segments": self.segments}  # fmt: skip


def plan_segments(frames: int, segment_frames: int, prev_frames: int, *, fit: bool = False) -> SegmentPlan:
    """Segments of ``segment_frames`` overlapping by ``prev_frames`` covering ``frames``.

    ``fit=True``: a clip shorter than one segment gets one segment of its own length, rounded up
    to the model's ``4k + 1`` (a 60-keyframe clip denoises 61 frames, not 77): no work is spent on
    frames that are thrown away. The stock pipeline (``fit=False``) always runs whole segments.
    """
    if fit and frames < segment_frames:
        segment_frames = max(5, VAE_SCALE_TEMPORAL * math.ceil((frames - 1) / VAE_SCALE_TEMPORAL) + 1)
    eff = segment_frames - prev_frames
    rest = max(frames - prev_frames, 1)
    segments = max(1, math.ceil(rest / eff))
    return SegmentPlan(frames, segment_frames, prev_frames, segments)


def fitted_segment_frames(frames: int, max_segment_frames: int, prev_frames: int) -> int:
    """The shortest ``4k + 1`` segment length that covers ``frames`` in as many segments as
    ``max_segment_frames`` would: 120 frames at 81 take two segments of 61 (121 frames rendered)
    instead of two of 81 (161 rendered, 41 thrown away). Each segment is still whole."""
    segments = plan_segments(frames, max_segment_frames, prev_frames).segments
    need = math.ceil(max(frames - prev_frames, 1) / segments) + prev_frames
    return min(max_segment_frames, max(5, VAE_SCALE_TEMPORAL * math.ceil((need - 1) / VAE_SCALE_TEMPORAL) + 1))
