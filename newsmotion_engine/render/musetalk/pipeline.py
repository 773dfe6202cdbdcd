"""A rendered loop lip-synced to a speech through MuseTalk: the render's frames and where its face
is, the avatar sub-cache beside the render, the stage, and an mp4 with the speech muxed as AAC.

Where the face is on every frame comes from the render's own inputs, not a detector: the loop's
keypoints retargeted onto the persona (what every backend follows) and placed on the frame as the
portrait is (:func:`~newsmotion_engine.render.placement.place_portrait`). A diffusion backend
that drifts from its pose guidance drifts from these boxes too; the telemetry says how they were
found.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
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

__all__ = ["LipSyncResult", "frame_faces", "lip_sync_render"]

FACE_POINTS = 68
BOXES_FROM = "the loop's keypoints retargeted onto the persona and placed as the portrait (no face detector)"


@dataclass(frozen=True)
class LipSyncResult:
    """What :func:`lip_sync_render` wrote and measured (``stage_fps``: frames per second of the
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


def frame_faces(guidance: Any, persona: Any, width: int, height: int) -> np.ndarray:
    """float ``[T, 68, 3]``: the 68 face landmarks of every render frame in frame pixels (x, y, confidence)."""
    kp = np.asarray(retargeted_keypoints(guidance, persona), np.float64)  # x, y normalized to the portrait
    face = kp[:, FACE_START : FACE_START + FACE_POINTS].copy()
    face[..., :2] = to_frame_pixels(face, place_portrait(np.asarray(persona.portrait).shape[:2], width, height))
    return face


def lip_sync_render(render_mp4: Path, guidance: Any, persona: Any, speech: Any, out_path: Path, opts: MuseTalkOptions, *,
                    avatar_dir: Path, components: Any = None,
                    progress: Callable[[int, int], None] | None = None) -> LipSyncResult:  # fmt: skip
    """``render_mp4`` (a silent render of ``guidance`` on ``persona``) lip-synced to ``speech``
    (a loaded speech cache) into ``out_path``: as many frames as the speech lasts at the render's
    frame rate (the render cycled forward and back), the speech muxed as AAC."""
    from newsmotion_engine.speech.audio import write_wav
    from newsmotion_engine.video.encode import VideoEncoder
    from newsmotion_engine.videoio import iter_frames, open_video

    t_start = time.perf_counter()
    info = open_video(render_mp4)
    fps = int(round(info.fps))
    frames = np.stack(list(iter_frames(render_mp4)))
    comps = components if components is not None else load_components(opts)
    faces = frame_faces(guidance, persona, frames.shape[2], frames.shape[1])
    if len(faces) != len(frames):  # a render's frames follow its loop's keypoints one to one
        raise ValueError(f"{render_mp4}: {len(frames)} frames, but its loop has {len(faces)} keypoint frames")
    t0 = time.perf_counter()
    source = {"kind": "render", "path": Path(render_mp4).name, "bytes": Path(render_mp4).stat().st_size,
              "mtime_ns": Path(render_mp4).stat().st_mtime_ns}  # fmt: skip
    before = (avatar_dir / "metadata.json").stat().st_mtime_ns if (avatar_dir / "metadata.json").exists() else None
    avatar = ensure_avatar(avatar_dir, frames, faces, comps, opts, source)
    built = before != (avatar_dir / "metadata.json").stat().st_mtime_ns
    t1 = time.perf_counter()
    samples = np.asarray(speech.audio, np.float32)
    duration = len(samples) / float(speech.sample_rate)
    tokens = audio_tokens(whisper_hidden_states(samples, comps), duration, fps, comps.inference)
    t2 = time.perf_counter()
    stats = StageStats()
    total = len(tokens)
    with tempfile.TemporaryDirectory(prefix="newsmotion-lips-") as tmp:
        wav = write_wav(Path(tmp) / "speech.wav", samples, speech.sample_rate)
        with VideoEncoder(out_path, frames.shape[2], frames.shape[1], fps, audio=wav) as enc:
            for frame in lip_sync_frames(frames, avatar, tokens, comps, batch_size=opts.batch_size, stats=stats,
                                         progress=(lambda n: progress(stats.frames, total)) if progress else None):  # fmt: skip
                enc.write(frame)
    return LipSyncResult(
        output=str(out_path), frames=stats.frames, redrawn=stats.redrawn, render_frames=len(frames), avatar_built=built,
        avatar_s=round(t1 - t0, 3), audio_s=round(t2 - t1, 3), stage_s=round(stats.model_s + stats.paste_s, 3),
        stage_fps=round(stats.fps, 2),
        wall_s=round(time.perf_counter() - t_start, 3), weights=comps.weights_label,
    )  # fmt: skip
