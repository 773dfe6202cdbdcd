"""The story render's record (``{backend}.json`` beside the story's mp4): what was rendered, each
part's timing and smoothness, the speech, the audio/video sync, the timings. This module alone
writes, reads and versions it.

Example::

    tele = StoryTelemetry.read(path)
    tele.realtime_factor, tele.av_sync["in_sync"], [p["loop_id"] for p in tele.parts]
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import replacing
from newsmotion_engine.errors import BadInputError

__all__ = ["SCHEMA_VERSION", "StoryTelemetry", "StoryTelemetryError"]

SCHEMA_VERSION = 1
KIND = "newsmotion.story_render"


class StoryTelemetryError(BadInputError):
    """A story record that cannot be read (missing, not JSON, another kind or version)."""


@dataclass(frozen=True)
class StoryTelemetry:
    """One story render.

    ``parts``: one dict per timeline part (``kind`` gesture/idle, ``loop_id``, ``cue`` (the story
    field), ``start_s``, ``stop_s``, ``frames``, ``blend_frames``, ``render_ms``: time spent making
    its frames, ``max_jump_inside_px`` and ``join_jump_px``: the largest frame-to-frame joint move
    inside it and at its join). ``joins``: the timeline's largest move at the joins and inside the
    parts. ``speech``: one dict per sentence (id, source, cache state, start/stop). ``av_sync``:
    :meth:`newsmotion_engine.video.streams.AvSync.as_dict` of the written mp4.
    ``wall_s``: from the loaded inputs to the finished mp4 (plan, frames, encode, mux, the sync
    check), without building caches; ``realtime_factor``: ``wall_s`` over the clip's duration
    (1.0 = real time). ``lip_sync``: the lip-sync score of the written mp4 against the story's
    viseme track (:class:`~newsmotion_engine.render.telemetry.LipSync` as a dict, measured after
    ``wall_s``), or ``None`` with ``lip_sync_reason``. ``lips``: whose lips the clip has,
    ``"backend"`` (the backend's own) or ``"musetalk"``; ``lips_from``: what moved them,
    ``"visemes"`` (the story's viseme track: warp), ``"speech audio"`` (an audio-driven backend heard
    the story's speech: echomimic-v3), ``"musetalk"``, or ``None`` (they did not move). With MuseTalk, ``musetalk``
    says how: its weights (``"random weights"`` without a model folder), frames redrawn, the avatar
    sub-cache built or reused, timings and options (:func:`newsmotion_engine.story.lips.lip_sync_story`).
    """

    story_id: str
    persona_id: str
    backend: str
    backend_info: dict[str, Any]
    moves_lips: bool
    frames: int
    fps: int
    width: int
    height: int
    duration_s: float
    parts: list[dict[str, Any]]
    joins: dict[str, Any]
    speech: list[dict[str, Any]]
    av_sync: dict[str, Any]
    encoder: str
    wall_s: float
    render_ms: float
    plan_ms: float
    encode_wait_ms: float
    mux_ms: float
    realtime_factor: float
    input_digest: str
    output: str
    created_at: str
    lip_sync: dict[str, Any] | None = None
    lip_sync_reason: str | None = None
    lips: str = "backend"
    lips_from: str | None = None
    musetalk: dict[str, Any] | None = None
    outcome: str = "rendered"
    schema_version: int = SCHEMA_VERSION
    kind: str = field(default=KIND)

    @property
    def weights(self) -> str | None:
        return self.backend_info.get("weights")

    @property
    def lips_label(self) -> str:
        """``"backend"``, ``"backend (from the speech audio)"`` or ``"musetalk (WEIGHTS)"``."""
        if self.lips == "musetalk" and self.musetalk:
            return f"musetalk ({self.musetalk['weights']})"
        return f"{self.lips} (from the speech audio)" if self.lips_from == "speech audio" else self.lips

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path | str) -> None:
        """Write atomically (a temporary sibling renamed into place)."""
        with replacing(Path(path)) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: Path | str) -> StoryTelemetry:
        """The record at ``path``; :class:`StoryTelemetryError` naming it when it cannot be used."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoryTelemetryError(path, f"cannot read the story record ({exc})") from None
        if not isinstance(raw, dict) or raw.get("kind") != KIND:
            raise StoryTelemetryError(path, f"not a story record (kind {KIND!r})")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise StoryTelemetryError(path, f"story record version {raw.get('schema_version')!r}; this reader reads {SCHEMA_VERSION}")
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(n for n in required if n not in raw)
        if missing:
            raise StoryTelemetryError(path, f"story record without {', '.join(missing)}")
        return cls(**{k: v for k, v in raw.items() if k in names})
