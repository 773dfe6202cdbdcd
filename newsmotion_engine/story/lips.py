"""Which lips a story gets: the backend's own (it performs the speech's viseme track; the default)
or MuseTalk 1.5's (:mod:`newsmotion_engine.render.musetalk`), drawn over the backend's frames.

With MuseTalk the backend renders the story silent (no viseme track: no mouth shapes, and for warp
no speech-driven blinks or nods), as ``newsmotion lips`` hands MuseTalk a silent render, so the
face is where the story's keypoints put it and only MuseTalk moves the mouth. The silent frames
are held in a temporary ``.npy`` (memory-mapped: 2.8 MB a frame at 720x1280, about 83 MB per
second of story on disk, not in memory), then each goes through the stage with the story's
assembled speech. The avatar (face boxes, latents, blend masks of every frame) is a sub-cache
beside the story's default output, ``motion/stories/{persona}/{story}/lips/{backend}-avatar/``,
keyed on the silent frames' digest, so a render that changes only the stage's settings (batch
size, dtype, ``--force``) reuses it.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.job import OnStep, announce_step
from newsmotion_engine.render.musetalk.config import MuseTalkConfigError, MuseTalkOptions
from newsmotion_engine.render.musetalk.pipeline import MuseTalkPass, placed_faces
from newsmotion_engine.storage import Storage

__all__ = ["LIPS", "HeldFrames", "MuseTalkLips", "lip_sync_story", "story_avatar_dir", "story_lips"]

LIPS = ("backend", "musetalk")


def story_lips(lips: str, options: Mapping[str, Any] | None = None) -> MuseTalkOptions | None:
    """The MuseTalk options for ``lips="musetalk"`` (``options`` as ``-o KEY=VALUE`` data), or
    ``None`` for the backend's own lips.

    Raises:
        MuseTalkConfigError: an unknown ``lips``, an unknown or out-of-range option, or options
            given with ``lips="backend"`` (they would be ignored).
    """
    options = dict(options or {})
    if lips not in LIPS:
        raise MuseTalkConfigError(f"lips {lips!r}: use {' or '.join(LIPS)}")
    if lips == "backend":
        if options:
            raise MuseTalkConfigError(f"musetalk options ({', '.join(sorted(options))}) need lips 'musetalk', not 'backend'")
        return None
    return MuseTalkOptions.from_options(options)


def story_avatar_dir(storage: Storage, persona_id: str, story_id: str, backend: str) -> Path:
    """The story's MuseTalk avatar sub-cache: ``lips/{backend}-avatar/`` beside its default mp4."""
    return storage.story_render_path(persona_id, story_id, backend).parent / "lips" / f"{backend}-avatar"


@dataclass(frozen=True)
class MuseTalkLips:
    """MuseTalk for one story render: its options, its loaded models, where the avatar sub-cache
    goes, and the digest of the silent frames it is built from."""

    options: MuseTalkOptions
    components: Any
    avatar_dir: Path
    frames_digest: str


def lip_sync_story(held: HeldFrames, keypoints: np.ndarray, persona: Any, speech: Any, spec: Any, lips: MuseTalkLips,
                   write: Callable[[np.ndarray], None], output: Path, on_step: OnStep | None = None) -> dict[str, Any]:  # fmt: skip
    """Send the story's ``held`` silent frames (whose poses are ``keypoints``, retargeted onto
    ``persona``) through the MuseTalk stage with ``speech`` (the story's
    :class:`~newsmotion_engine.story.speech.StorySpeech`), each lip-synced frame to ``write`` (the
    encoder of ``output``); the avatar build and the stage each a visible step through ``on_step``.
    Returns the story record's ``musetalk`` entry: the pass's
    :class:`~newsmotion_engine.render.musetalk.pipeline.LipSyncResult` (weights, frames redrawn, the
    avatar built or reused, timings) and the options."""
    t0 = time.perf_counter()
    faces = placed_faces(keypoints, persona, spec.width, spec.height)
    stage = MuseTalkPass(held.array, faces, speech.audio, speech.sample_rate, spec.fps, lips.options,
                         avatar_dir=lips.avatar_dir, source={"kind": "story", "frames_digest": lips.frames_digest},
                         components=lips.components, frames_out=held.count,
                         on_avatar=announce_step(on_step, f"MuseTalk avatar ({held.count} frames)"))  # fmt: skip
    for frame in stage.frames(on_step("lips: MuseTalk") if on_step is not None else None):
        write(frame)
    return {**stage.result(output, time.perf_counter() - t0).as_dict(), "options": dataclasses.asdict(lips.options)}


class HeldFrames:
    """A story's silent frames in a temporary memory-mapped ``.npy`` (removed on :meth:`close`)."""

    def __init__(self, frames: int, width: int, height: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="newsmotion-story-lips-")
        self.array = np.lib.format.open_memmap(Path(self._dir.name) / "frames.npy", mode="w+", dtype=np.uint8,
                                               shape=(frames, height, width, 3))  # fmt: skip
        self.count = 0

    def write(self, frame: np.ndarray) -> None:
        """Keep the next frame (same signature as the video encoder's ``write``)."""
        self.array[self.count] = frame
        self.count += 1

    def close(self) -> None:
        del self.array  # let go of the map before its file goes
        self._dir.cleanup()

    def __enter__(self) -> HeldFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
