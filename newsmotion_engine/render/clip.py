"""Render one persona x loop clip to an mp4 plus a telemetry JSON.

``render_clip`` is the one entry point the CLI and the Dagster asset share (through
:func:`newsmotion_engine.render.job.render_persona_loop`): retarget the loop onto the persona,
stream the backend's frames into the encoder, and write ``out.mp4`` and ``out.json`` (a
:class:`~newsmotion_engine.render.telemetry.RenderTelemetry`), both atomically. The clip is never
held in memory.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import Backend, RenderSpec, check_visemes, own_clip_frames
from newsmotion_engine.render.keyframes import InfillStats, clip_schedule, driving_keypoints, driving_visemes, infill_frames
from newsmotion_engine.render.fidelity import FidelityConfig, measure_render, rest_frame
from newsmotion_engine.render.lipsync import OFF_REASON, measure_lip_sync
from newsmotion_engine.render.retarget import retarget
from newsmotion_engine.render.telemetry import RenderProvenance, RenderTelemetry
from newsmotion_engine.video.encode import VideoEncoder, check_output_folder

if TYPE_CHECKING:
    from newsmotion_engine.speech.visemes import VisemeTrack

__all__ = ["clip_driving_keypoints", "loop_canvas_size", "peak_rss_mb", "render_clip", "retargeted_keypoints"]

# The canonical loops are normalized to a 720x1280 portrait frame; a guidance object may say
# otherwise with ``width``/``height`` attributes.
DEFAULT_LOOP_CANVAS = (720, 1280)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (a process-lifetime high-water mark)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def loop_canvas_size(guidance: Any) -> tuple[int, int]:
    """``(width, height)`` in pixels of the frame a loop's keypoints are normalized to."""
    w = getattr(guidance, "width", None)
    h = getattr(guidance, "height", None)
    if isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0:
        return (w, h)
    return DEFAULT_LOOP_CANVAS


def retargeted_keypoints(guidance: Any, persona: Any) -> np.ndarray:
    """The loop's keypoints retargeted onto the persona's proportions (what a backend follows)."""
    portrait_hw = np.asarray(persona.portrait).shape[:2]
    return retarget(
        np.asarray(guidance.keypoints),
        persona.landmarks,
        loop_size=loop_canvas_size(guidance),
        persona_size=(int(portrait_hw[1]), int(portrait_hw[0])),
    )


def clip_driving_keypoints(guidance: Any, persona: Any, spec: RenderSpec) -> np.ndarray:
    """What :func:`render_clip` hands the backend: the retargeted keypoints, at the keyframes
    only when ``spec.keyframes > 1``."""
    kp = retargeted_keypoints(guidance, persona)
    return driving_keypoints(kp, clip_schedule(kp.shape[0], spec))


def render_clip(
    guidance: Any,
    persona: Any,
    backend: Backend,
    spec: RenderSpec,
    out_path: Path | str,
    *,
    progress: Callable[[int, int], None] | None = None,
    provenance: RenderProvenance | None = None,
    encoder: str = "auto",
    encoder_threads: int | None = None,
    encoder_preset: str | None = None,
    sink: Callable[..., Any] | None = None,
    infill_device: str | None = None,
    launcher: str = "in-process",
    fidelity: FidelityConfig | None = None,
    visemes: VisemeTrack | None = None,
) -> RenderTelemetry:
    """Render ``guidance`` (a motion loop) on ``persona`` with ``backend`` into ``out_path``.

    Args:
        guidance: a loaded loop: ``loop_id``, ``keypoints`` ``[T, 133, 3]``, ``fps``, ``frames``.
        persona: a loaded appearance: ``persona_id``, ``portrait``, ``person_mask``, ``face_mask``,
            ``landmarks``.
        backend: a backend from ``get_backend``; ``load()`` is called (it is idempotent).
        spec: output size, fps, background.
        out_path: the ``.mp4`` to write; its folder must exist and be writable (checked before
            any rendering). Telemetry goes to ``out_path.with_suffix(".json")``.
        progress: ``progress(done, total)`` after each frame.
        provenance: what the frames were made from (input digest, cache digests and states), as
            :func:`~newsmotion_engine.render.job.render_persona_loop` records it; ``None`` for
            inputs that are not caches (benchmarks).
        encoder, encoder_threads, encoder_preset: passed to :class:`VideoEncoder` (``None`` = its
            defaults: auto, ffmpeg's thread choice, libx264 superfast).
        sink: what takes the frames instead of :class:`VideoEncoder` (same constructor and
            attributes); benchmarks on a machine without ffmpeg pass a frame counter.
        infill_device: where the sparse-keyframe infill warps (``None``: OpenCV on the CPU;
            ``"cuda"``: torch on the GPU); see :func:`~newsmotion_engine.render.keyframes.infill_frames`.
        launcher: which process runs this render, recorded in the telemetry (one of
            :data:`~newsmotion_engine.render.telemetry.LAUNCHERS`).
        fidelity: measure pose fidelity on the written mp4 (:mod:`~newsmotion_engine.render.fidelity`)
            after the render, outside ``wall_s``; ``None`` (benchmarks) records no measurement.
            :func:`~newsmotion_engine.render.job.render_persona_loop` passes one (on by default).
            A clip rendered with ``visemes`` gets its lip sync measured with it
            (:mod:`~newsmotion_engine.render.lipsync`), also outside ``wall_s``.
        visemes: a :class:`~newsmotion_engine.speech.visemes.VisemeTrack` with one frame per loop
            frame: the mouth shapes the backend performs (``backend.moves_lips``); ``None``: a
            silent clip.

    Returns:
        The :class:`RenderTelemetry` written beside the mp4.

    Raises:
        BadInputError: output folder missing or read-only.
        EncoderError: ffmpeg failed. Any error leaves no mp4/json at the target (an older one
        there stays untouched).

    Example::

        backend = get_backend("warp"); backend.load()
        tele = render_clip(loop, persona, backend, RenderSpec(), Path("out/anna/nod/warp.mp4"))
    """
    t_start = time.perf_counter()
    out_path = check_output_folder(out_path)
    json_path = out_path.with_suffix(".json")
    kp = np.asarray(guidance.keypoints)
    total = int(kp.shape[0]) if kp.ndim == 3 else 0
    if total < 1:
        raise NewsmotionError(f"loop {getattr(guidance, 'loop_id', '?')}: no keypoint frames to render")
    if not hasattr(backend, "clip_frames"):  # otherwise checked once the backend has set the clip's length
        check_visemes(visemes, total, what=f"loop {getattr(guidance, 'loop_id', '?')!r}")

    backend.load()
    t0 = time.perf_counter()
    retargeted = retargeted_keypoints(guidance, persona)
    retarget_ms = (time.perf_counter() - t0) * 1e3
    # An audio-driven backend performing a speech sets the clip's length; the loop is cycled to it.
    own = own_clip_frames(backend, guidance, spec)
    follows_loop = own is None or own == total
    if not follows_loop:
        total = own
        retargeted = retargeted[np.arange(total) % len(retargeted)]
    check_visemes(visemes, total, what=f"loop {getattr(guidance, 'loop_id', '?')!r}" if follows_loop else f"{backend.name} clip")

    render_s = 0.0
    done = 0
    enc_opts: dict[str, Any] = {"encoder": encoder, "threads": encoder_threads}
    if encoder_preset:
        enc_opts["preset"] = encoder_preset
    with (sink or VideoEncoder)(out_path, spec.width, spec.height, spec.fps, **enc_opts) as enc:
        # Sparse keyframes (spec.keyframes > 1): the backend renders the keyframes' poses only and
        # the infill stage fills the frames between (a pass-through at 1).
        schedule = clip_schedule(total, spec)
        keyframe_stats = InfillStats()
        # The viseme keyword only when there is speech, so a silent render calls frames() as before.
        speech = {"visemes": driving_visemes(visemes, schedule)} if visemes is not None else {}
        frames = iter(infill_frames(backend.frames(guidance, persona, driving_keypoints(retargeted, schedule), spec, **speech),
                                    schedule, spec, stats=keyframe_stats, device=infill_device))  # fmt: skip
        while True:
            t0 = time.perf_counter()
            try:
                frame = next(frames)
            except StopIteration:
                render_s += time.perf_counter() - t0
                break
            render_s += time.perf_counter() - t0
            enc.write(frame)
            done += 1
            if progress is not None:
                progress(done, total)
        if done != total:
            # A backend bug, not user input: fail loudly, and the encoder leaves no file.
            raise RuntimeError(f"backend {backend.name!r} yielded {done} frames for a {total}-frame loop")
    wall_s = time.perf_counter() - t_start

    if fidelity is None:
        pose_fidelity, pose_reason = None, "not requested (render_clip called without a fidelity configuration)"
    elif not follows_loop:
        pose_fidelity, pose_reason = None, f"{backend.name} set the clip's length (it performs a speech, not the loop's pose)"
    else:
        portrait_hw = np.asarray(persona.portrait).shape[:2]
        rest = rest_frame(persona.portrait, persona.person_mask, spec.width, spec.height, spec.background)
        pose_fidelity, pose_reason = measure_render(
            out_path, retargeted, persona.landmarks, portrait_hw=(int(portrait_hw[0]), int(portrait_hw[1])),
            config=fidelity, rest=rest,
        )
    # Lip sync is measured with pose fidelity (one switch: "measure the written clip").
    if visemes is not None and (fidelity is None or not fidelity.enabled):
        lip_sync, lip_sync_reason = None, OFF_REASON
    else:
        lip_sync, lip_sync_reason = measure_lip_sync(out_path, visemes)
    telemetry = RenderTelemetry(
        persona_id=getattr(persona, "persona_id", None),
        loop_id=getattr(guidance, "loop_id", None),
        backend=backend.name,
        backend_info=backend.describe(),
        encoder=enc.encoder,
        frames=done,
        fps=spec.fps,
        width=spec.width,
        height=spec.height,
        background=spec.as_dict()["background"],
        seed=spec.seed,
        fps_achieved=round(done / wall_s, 2) if wall_s > 0 else None,
        render_ms=round(render_s * 1e3, 1),
        retarget_ms=round(retarget_ms, 2),
        mux_ms=round(enc.mux_ms, 1),
        encode_wait_ms=round(enc.wait_ms, 1),
        wall_s=round(wall_s, 3),
        peak_rss_mb=round(peak_rss_mb(), 1),
        output=str(out_path),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        provenance=provenance,
        keyframes=dict(keyframe_stats) if schedule.ratio > 1 else None,
        launcher=launcher,
        pose_fidelity=pose_fidelity,
        pose_fidelity_reason=pose_reason,
        lip_sync=lip_sync,
        lip_sync_reason=lip_sync_reason,
    )
    try:
        telemetry.write(json_path)
    except OSError as exc:
        # An mp4 without its telemetry would look like a finished render: take it back.
        out_path.unlink(missing_ok=True)
        raise NewsmotionError(f"{json_path}: could not write the render telemetry ({exc})") from None
    return telemetry
