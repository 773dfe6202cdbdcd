"""A silent clip lip-synced to a speech through MuseTalk: :class:`MuseTalkPass` (the clip's frames
and where its face is -> the avatar sub-cache, the audio tokens, the stage), used by
:func:`lip_sync_render` (a rendered loop -> an mp4 with the speech muxed as AAC) and by stories
(:mod:`newsmotion_engine.story.lips`).

Where the face is on every frame comes from the render's own inputs, not a detector: the loop's
keypoints retargeted onto the persona (what every backend follows) and placed on the frame as the
portrait is (:func:`~newsmotion_engine.render.placement.place_portrait`). A diffusion backend
that drifts from its pose guidance drifts from these boxes too; the telemetry says how they were
found.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.clip import retargeted_keypoints
from newsmotion_engine.render.musetalk.audio import audio_tokens, whisper_hidden_states
from newsmotion_engine.render.musetalk.avatar import MASK_METHOD, ensure_avatar
from newsmotion_engine.render.musetalk.components import load_components
from newsmotion_engine.render.musetalk.config import MuseTalkOptions
from newsmotion_engine.render.musetalk.stage import StageStats, lip_sync_frames
from newsmotion_engine.render.placement import place_portrait, to_frame_pixels
from newsmotion_engine.skeleton import FACE_START

__all__ = ["LipSyncResult", "MuseTalkPass", "frame_faces", "lip_sync_render", "placed_faces"]

FACE_POINTS = 68
BOXES_FROM = "the loop's keypoints retargeted onto the persona and placed as the portrait (no face detector)"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class LipSyncResult:
    """What one MuseTalk pass wrote and measured (``stage_fps``: frames per second of the
    UNet + decode + paste, without reading, the avatar, the audio encoder and writing)."""

    output: str
    frames: int
    redrawn: int
    render_frames: int
    avatar_built: bool
    avatar_s: float
    audio_s: float
    stage_s: float
    stage_fps: float
    wall_s: float
    weights: str
    mask_method: str = MASK_METHOD
    boxes_from: str = BOXES_FROM

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def placed_faces(keypoints: np.ndarray, persona: Any, width: int, height: int) -> np.ndarray:
    """float ``[T, 68, 3]``: the 68 face landmarks of ``keypoints`` (retargeted onto ``persona``,
    normalized to its portrait) in frame pixels (x, y, confidence)."""
    face = np.asarray(keypoints, np.float64)[:, FACE_START : FACE_START + FACE_POINTS].copy()
    face[..., :2] = to_frame_pixels(face, place_portrait(np.asarray(persona.portrait).shape[:2], width, height))
    return face


def frame_faces(guidance: Any, persona: Any, width: int, height: int) -> np.ndarray:
    """float ``[T, 68, 3]``: the 68 face landmarks of every render frame in frame pixels (x, y, confidence)."""
    return placed_faces(retargeted_keypoints(guidance, persona), persona, width, height)


class MuseTalkPass:
    """The stage over one silent clip: its avatar (the sub-cache at ``avatar_dir``, read when
    current for ``source``, else built), the speech's audio tokens, then :meth:`frames`.

    Args:
        frames: the silent clip, uint8 ``[N, H, W, 3]`` (an array or a memory map).
        faces: its 68 face landmarks per frame in pixels (:func:`placed_faces`).
        samples: the speech, float32 mono at ``sample_rate`` (16 kHz).
        fps: the clip's frame rate.
        opts: the stage's options; ``components``: its loaded models (default: loaded here).
        frames_out: output frames (default: as many as the speech lasts at ``fps``).
        on_avatar: ``progress(done, total)`` while the avatar is being built.
    """

    def __init__(self, frames: np.ndarray, faces: np.ndarray, samples: np.ndarray, sample_rate: int, fps: int,
                 opts: MuseTalkOptions, *, avatar_dir: Path, source: dict[str, Any], components: Any = None,
                 frames_out: int | None = None, on_avatar: Progress | None = None) -> None:  # fmt: skip
        if len(faces) != len(frames):  # a clip's frames follow its keypoints one to one
            raise ValueError(f"{len(frames)} frames, but {len(faces)} frames of face landmarks")
        self.clip, self.opts = frames, opts
        self.components = components if components is not None else load_components(opts)
        metadata = Path(avatar_dir) / "metadata.json"
        before = metadata.stat().st_mtime_ns if metadata.exists() else None
        t0 = time.perf_counter()
        self.avatar = ensure_avatar(Path(avatar_dir), frames, faces, self.components, opts, source, progress=on_avatar)
        self.avatar_built = before != metadata.stat().st_mtime_ns
        t1 = time.perf_counter()
        samples = np.asarray(samples, np.float32)
        hidden = whisper_hidden_states(samples, self.components)
        self.tokens = audio_tokens(hidden, len(samples) / float(sample_rate), fps, self.components.inference, frames=frames_out)
        t2 = time.perf_counter()
        self.avatar_s, self.audio_s = t1 - t0, t2 - t1
        self.stats = StageStats()

    @property
    def total(self) -> int:
        """Frames :meth:`frames` yields."""
        return len(self.tokens)

    def frames(self, progress: Progress | None = None) -> Iterator[np.ndarray]:
        """The lip-synced frames, one per audio-token row; ``progress(done, total)`` per batch."""
        report = (lambda n: progress(self.stats.frames, self.total)) if progress is not None else None
        yield from lip_sync_frames(self.clip, self.avatar, self.tokens, self.components, batch_size=self.opts.batch_size,
                                   stats=self.stats, progress=report)  # fmt: skip

    def result(self, output: Path, wall_s: float) -> LipSyncResult:
        """The record of a finished pass written to ``output`` in ``wall_s`` seconds."""
        stats = self.stats
        return LipSyncResult(
            output=str(output), frames=stats.frames, redrawn=stats.redrawn, render_frames=len(self.clip),
            avatar_built=self.avatar_built, avatar_s=round(self.avatar_s, 3), audio_s=round(self.audio_s, 3),
            stage_s=round(stats.model_s + stats.paste_s, 3), stage_fps=round(stats.fps, 2), wall_s=round(wall_s, 3),
            weights=self.components.weights_label,
        )  # fmt: skip


def lip_sync_render(render_mp4: Path, guidance: Any, persona: Any, speech: Any, out_path: Path, opts: MuseTalkOptions, *,
                    avatar_dir: Path, components: Any = None, progress: Progress | None = None) -> LipSyncResult:  # fmt: skip
    """``render_mp4`` (a silent render of ``guidance`` on ``persona``) lip-synced to ``speech``
    (a loaded speech cache) into ``out_path``: as many frames as the speech lasts at the render's
    frame rate (the render cycled forward and back), the speech muxed as AAC."""
    from newsmotion_engine.speech.audio import write_wav
    from newsmotion_engine.video.encode import VideoEncoder
    from newsmotion_engine.videoio import iter_frames, open_video

    t_start = time.perf_counter()
    fps = int(round(open_video(render_mp4).fps))
    frames = np.stack(list(iter_frames(render_mp4)))
    faces = frame_faces(guidance, persona, frames.shape[2], frames.shape[1])
    if len(faces) != len(frames):
        raise ValueError(f"{render_mp4}: {len(frames)} frames, but its loop has {len(faces)} keypoint frames")
    stat = Path(render_mp4).stat()
    source = {"kind": "render", "path": Path(render_mp4).name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    samples = np.asarray(speech.audio, np.float32)
    lips = MuseTalkPass(frames, faces, samples, speech.sample_rate, fps, opts, avatar_dir=avatar_dir, source=source,
                        components=components)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="newsmotion-lips-") as tmp:
        wav = write_wav(Path(tmp) / "speech.wav", samples, speech.sample_rate)
        with VideoEncoder(out_path, frames.shape[2], frames.shape[1], fps, audio=wav) as enc:
            for frame in lips.frames(progress):
                enc.write(frame)
    return lips.result(out_path, time.perf_counter() - t_start)
