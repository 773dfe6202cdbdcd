"""A story -> one continuous mp4 with sound: load (or build) its inputs, plan the timeline, render
it in one pass through the backend with the speech's viseme track, mux the speech as AAC, check
the audio/video sync on the written file, and record a :class:`StoryTelemetry` per render.

Shared by ``newsmotion story render`` and the Dagster ``story`` asset. Like a loop render, the
story's input digest (the story file, its audio files, the speech, the persona and loop caches,
the backend's identity, the spec, and with MuseTalk lips the stage's options) is recorded, and a
story whose mp4 on disk records the same digest is not rendered again.

Lips: the backend's own (default) — from the viseme track (``visemes=``, warp), or, for an
audio-driven backend (``hears_speech``: echomimic-v3), from the story's assembled speech itself
(``speech=``, a :class:`~newsmotion_engine.speech.audio.SpeechTrack` whose derived features are
cached under ``speech/clips/{digest}/``) — or MuseTalk 1.5's drawn over the backend's silent frames
before the mux (``lips=MuseTalkOptions(...)``, :mod:`.lips`).

Example::

    store = Storage.from_env()
    story = load_story("storage/stories/evening.yaml")
    backend = get_backend("warp"); backend.load()
    tele = render_story(store, story, backend, RenderSpec())
    tele.output, tele.av_sync["in_sync"], tele.realtime_factor
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.guidance.cache import GuidanceCache, check_loop_exists, ensure_guidance
from newsmotion_engine.guidance.choreography import author_idle
from newsmotion_engine.ids import validate_id
from newsmotion_engine.persona.cache import PersonaCache
from newsmotion_engine.render.base import Backend, RenderSpec, hears_speech, moves_lips, refuse_second_speech
from newsmotion_engine.render.clip import retargeted_keypoints
from newsmotion_engine.render.lipsync import OFF_REASON, measure_lip_sync
from newsmotion_engine.render.musetalk.config import MuseTalkOptions
from newsmotion_engine.speech.audio import SpeechTrack, write_wav
from newsmotion_engine.render.job import (
    OnStep,
    Progress,
    announce_step,
    backend_identity,
    ensure_persona_input,
    load_guidance_input,
    load_persona_input,
    render_lock,
)
from newsmotion_engine.storage import Storage
from newsmotion_engine.story.format import IDLE_REST, STORY_SUFFIXES, Story, load_story
from newsmotion_engine.story.lips import HeldFrames, MuseTalkLips, lip_sync_story, story_avatar_dir
from newsmotion_engine.story.speech import StorySpeech, story_speech
from newsmotion_engine.story.telemetry import StoryTelemetry, StoryTelemetryError
from newsmotion_engine.story.timeline import Slot, Timeline, join_smoothness, joint_jumps, plan_timeline
from newsmotion_engine.video.encode import VideoEncoder
from newsmotion_engine.video.streams import av_sync

__all__ = ["StoryInputs", "check_story", "check_story_backend", "plan_story", "prepare_story", "render_story", "stored_story", "story_slots"]



@dataclass(frozen=True)
class _Loop:
    """A loop that is not a cache (the built-in idle), shaped like a guidance cache for retargeting."""

    loop_id: str
    keypoints: np.ndarray
    fps: int


@dataclass(frozen=True)
class _StoryClip:
    """What the backend is handed as the "guidance" of a story: the whole timeline as one clip."""

    loop_id: str
    keypoints: np.ndarray
    fps: int

    @property
    def frames(self) -> int:
        return int(self.keypoints.shape[0])


@dataclass(frozen=True)
class StoryInputs:
    """A story's loaded inputs: the persona cache, the loops it uses (gesture loops, and the idle
    loop when it is a loop id) and the laid-out speech."""

    story: Story
    persona: PersonaCache
    loops: dict[str, GuidanceCache]
    speech: StorySpeech


def stored_story(storage: Storage, story_id: str, persona_id: str | None = None) -> Story:
    """The story ``story_id`` from ``storage.stories_dir``, read by ``persona_id`` (default: the
    persona the file names).

    Raises:
        BadInputError: no such story file; StoryError: the file is not a valid story.
    """
    validate_id(story_id, "story id")
    for suffix in STORY_SUFFIXES:
        path = storage.stories_dir / f"{story_id}{suffix}"
        if path.is_file():
            story = load_story(path)
            return dataclasses.replace(story, persona_id=validate_id(persona_id, "persona id")) if persona_id else story
    raise BadInputError(storage.stories_dir / f"{story_id}.yaml", f"no story {story_id!r} (a story is a {' or '.join(STORY_SUFFIXES)} file here)")


def check_story_backend(backend: Backend) -> None:
    """Refuse a backend that renders loops from per-loop sub-caches (the Wan models' pose latents,
    driving clips, ...): a story's timeline is no cached loop, so it follows keypoints alone (warp)
    or needs no loop at all (echomimic-v3, which hears the story's speech). A backend that hears
    speech must not be set to perform a speech of its own (echomimic-v3's ``-o speech``).

    Raises:
        NewsmotionError: naming the backend and what it needs.
        SpeechConflictError: the backend would perform its own speech instead of the story's.
    """
    extra = sorted(set(getattr(getattr(backend, "needs", None), "guidance", frozenset())) - {"keypoints"})
    if extra:
        raise NewsmotionError(f"backend {backend.name!r} cannot render a story: it renders cached loops "
                              f"({', '.join(extra)} per loop), a story is a new timeline of keypoints; use a "
                              "backend that needs keypoints alone (warp, echomimic-v3)")  # fmt: skip
    if hears_speech(backend):
        refuse_second_speech(backend, "the story's speech")


def check_story(storage: Storage, story: Story) -> None:
    """Fail fast, before any work: the persona is known and every loop the story names exists
    (each a :class:`StoryError` naming the story file and the field)."""
    try:
        if not storage.persona_dir(story.persona_id).is_dir() and storage.find_persona_source(story.persona_id) is None:
            raise NewsmotionError(f"unknown persona {story.persona_id!r}: add it with `newsmotion persona add IMAGE --id {story.persona_id}`")
    except NewsmotionError as exc:
        raise story.error("persona", str(exc)) from None
    named = [(cue.field + ".loop", cue.loop_id) for cue in story.gestures]
    if story.idle != IDLE_REST:
        named.append(("idle", story.idle))
    for field, loop_id in named:
        try:
            check_loop_exists(storage, loop_id)
        except NewsmotionError as exc:
            raise story.error(field, str(exc)) from None


def prepare_story(storage: Storage, story: Story, spec: RenderSpec, *, build: bool = True,
                  on_step: OnStep | None = None) -> StoryInputs:  # fmt: skip
    """Load the story's inputs; with ``build`` (the CLI) missing or stale caches are built first,
    each announced through ``on_step(label)``; without it (the Dagster asset) the persona and loop
    caches are only loaded (:class:`~newsmotion_engine.errors.CacheNotReadyError` names what to
    materialize). Sentences given as text or audio are built either way: the story is their source.
    """
    check_story(storage, story)
    loop_ids = list(dict.fromkeys([cue.loop_id for cue in story.gestures] + ([story.idle] if story.idle != IDLE_REST else [])))
    if build:
        persona, _ = ensure_persona_input(storage, story.persona_id, on_step=on_step)
        loops = {loop_id: ensure_guidance(storage, loop_id, progress=announce_step(on_step, f"building guidance cache {loop_id}"))[0]
                 for loop_id in loop_ids}  # fmt: skip
    else:
        persona = load_persona_input(storage, story.persona_id)
        loops = {loop_id: load_guidance_input(storage, loop_id) for loop_id in loop_ids}
    for loop_id, cache in loops.items():
        if int(cache.fps) != spec.fps:
            raise BadInputError(story.path, f"loop {loop_id!r} is {cache.fps} fps; render the story at {cache.fps} fps")
    speech = story_speech(story, storage, spec.fps, build=build,
                          on_build=lambda sid: on_step(f"building speech cache {sid}")(0, 1) if on_step else None)  # fmt: skip
    return StoryInputs(story, persona, loops, speech)


def story_slots(story: Story, speech: StorySpeech, loop_frames: dict[str, int]) -> list[Slot]:
    """Each gesture cue's frames: its sentence's span, or ``at`` for ``for`` seconds (default one
    play of the loop), cut at the clip's end.

    Raises:
        StoryError: a cue starting after the speech ends, or overlapping an earlier cue.
    """
    fps, total = speech.fps, speech.frames
    slots = []
    for cue in story.gestures:
        if cue.sentence is not None:
            start, stop = speech.spans[cue.sentence - 1]
        else:
            start = round(cue.at * fps)
            stop = start + (round(cue.seconds * fps) if cue.seconds is not None else loop_frames[cue.loop_id])
            if start >= total:
                raise story.error(f"{cue.field}.at", f"{cue.at:g} s is after the story ends ({total / fps:.2f} s)")
        slots.append(Slot(cue.loop_id, start, max(start + 1, min(stop, total)), cue.field, cue.fit))
    ordered = sorted(slots, key=lambda s: s.start)
    for before, after in zip(ordered, ordered[1:]):
        if after.start < before.stop:
            raise story.error(after.field, f"starts at {after.start / fps:.2f} s, inside {before.field} "
                                           f"({before.start / fps:.2f}-{before.stop / fps:.2f} s)")  # fmt: skip
    return slots


def plan_story(inputs: StoryInputs, spec: RenderSpec) -> Timeline:
    """The story's per-frame poses on its persona (:func:`~newsmotion_engine.story.timeline.plan_timeline`)."""
    story, persona = inputs.story, inputs.persona
    retargeted = {loop_id: retargeted_keypoints(cache, persona) for loop_id, cache in inputs.loops.items()}
    if story.idle == IDLE_REST:
        idle = retargeted_keypoints(_Loop(IDLE_REST, author_idle(spec.fps), spec.fps), persona)
    else:
        idle = retargeted[story.idle]
    slots = story_slots(story, inputs.speech, {k: v.shape[0] for k, v in retargeted.items()})
    return plan_timeline(slots, total_frames=inputs.speech.frames, loops=retargeted, idle=idle, idle_id=story.idle,
                         max_blend_frames=round(story.blend * spec.fps), canvas=persona_canvas(persona))  # fmt: skip


def persona_canvas(persona: PersonaCache) -> tuple[int, int]:
    """``(width, height)`` of the persona's canvas, which retargeted keypoints are normalized to."""
    h, w = np.asarray(persona.portrait).shape[:2]
    return (int(w), int(h))


def _input_digest(inputs: StoryInputs, backend: Backend, spec: RenderSpec, lips: MuseTalkOptions | None = None) -> str:
    story = inputs.story
    audio_files = [s.audio for s in story.sentences if s.audio is not None]
    payload = {
        "story": {k: v for k, v in dataclasses.asdict(story).items() if k != "path"},  # what it says, not its comments
        "audio_files": [cachedir.sha256_file(p) for p in audio_files],
        "speech": hashlib.sha256(np.ascontiguousarray(inputs.speech.audio).tobytes()).hexdigest(),
        "visemes": hashlib.sha256(inputs.speech.visemes.stacked().tobytes()).hexdigest(),
        "persona": inputs.persona.digest,
        "loops": {k: v.digest for k, v in sorted(inputs.loops.items())},
        "backend": backend.name,
        "identity": backend_identity(backend),
        "spec": spec.as_dict(),
    }
    if lips is not None:  # only then: a story with the backend's lips keeps the digest it had before MuseTalk
        payload["lips"] = {"musetalk": dataclasses.asdict(lips)}
    # Round-trip through JSON (non-JSON values as their str) so the hash sees plain data.
    return cachedir.sha256_json(json.loads(json.dumps(payload, default=str)))


def _current(out: Path, digest: str) -> StoryTelemetry | None:
    json_path = out.with_suffix(".json")
    if not (out.is_file() and json_path.is_file()):
        return None
    try:
        recorded = StoryTelemetry.read(json_path)
    except StoryTelemetryError:
        return None
    return recorded if recorded.input_digest == digest else None


def render_story(
    storage: Storage,
    story: Story,
    backend: Backend,
    spec: RenderSpec,
    *,
    inputs: StoryInputs | None = None,
    out_path: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    build: bool = True,
    on_step: OnStep | None = None,
    encoder: str = "auto",
    lip_sync: bool = True,
    lips: MuseTalkOptions | None = None,
    lips_components: Any = None,
) -> StoryTelemetry:
    """Render ``story`` to ``out_path`` (default ``motion/stories/{persona}/{story}/{backend}.mp4``)
    with its telemetry beside it, and return the record.

    Args:
        inputs: from :func:`prepare_story` (default: prepared here with ``build`` and ``on_step``).
        force: render even when the mp4 on disk records the same input digest.
        progress: ``progress(done, total)`` per frame.
        encoder: the video encoder (:class:`~newsmotion_engine.video.encode.VideoEncoder`).
        lip_sync: score the written mp4's lip sync (:mod:`~newsmotion_engine.render.lipsync`, a
            face-mesh pass after the render, outside ``wall_s``); off: the record says so.
        lips: ``None``: the backend's own lips; MuseTalk options (:func:`.lips.story_lips`): the
            backend renders silent and MuseTalk redraws the lower face from the speech.
        lips_components: MuseTalk's loaded models to reuse (default: loaded here, only when the
            story is rendered).

    Raises:
        StoryError: the story file names something that cannot be used.
        CacheNotReadyError: a cache that is only loaded (``build=False``) is not ready.
        MuseTalkModelError: ``lips.model_path`` is not a usable MuseTalk folder.
        NewsmotionError: the encoder failed. Nothing is left at the target on failure.
    """
    check_story_backend(backend)
    inputs = inputs or prepare_story(storage, story, spec, build=build, on_step=on_step)
    backend.load()
    out = Path(out_path) if out_path is not None else storage.story_render_path(story.persona_id, story.story_id, backend.name)
    digest = _input_digest(inputs, backend, spec, lips)
    if not force and (recorded := _current(out, digest)) is not None:
        return dataclasses.replace(recorded, outcome="skipped")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(out.parent, f"cannot create the output folder ({exc.strerror or exc})") from None
    with render_lock(out):
        if not force and (recorded := _current(out, digest)) is not None:
            return dataclasses.replace(recorded, outcome="skipped")
        if build:  # a backend's persona sub-cache (echomimic-v3's latents and tokens; none for warp)
            backend.prepare_persona(inputs.persona, spec)
        musetalk = None
        if lips is not None:
            from newsmotion_engine.render.musetalk.components import load_components

            musetalk = MuseTalkLips(lips, lips_components if lips_components is not None else load_components(lips),
                                    story_avatar_dir(storage, story.persona_id, story.story_id, backend.name),
                                    _input_digest(inputs, backend, spec))  # fmt: skip
        # An audio-driven backend hears the speech itself (with MuseTalk lips it renders silent, as every backend does).
        heard = SpeechTrack(inputs.speech.audio, label=f"story {story.story_id}", cache_root=storage.speech_root,
                            sample_rate=inputs.speech.sample_rate) if lips is None else None  # fmt: skip
        return _render(inputs, backend, spec, out, digest, progress, encoder, lip_sync, musetalk, heard, on_step)


def _render(inputs: StoryInputs, backend: Backend, spec: RenderSpec, out: Path, digest: str,
            progress: Progress | None, encoder: str, lip_sync: bool, musetalk: MuseTalkLips | None,
            heard: SpeechTrack | None, on_step: OnStep | None) -> StoryTelemetry:  # fmt: skip
    story, speech = inputs.story, inputs.speech
    t_start = t0 = time.perf_counter()
    timeline = plan_story(inputs, spec)
    plan_ms = (time.perf_counter() - t0) * 1e3
    kp = timeline.keypoints
    total = kp.shape[0]
    part_of = np.zeros(total, np.int32)
    for i, part in enumerate(timeline.parts):
        part_of[part.start : part.stop] = i
    part_ms = np.zeros(len(timeline.parts))
    clip = _StoryClip(f"story-{story.story_id}", kp, spec.fps)
    done = 0
    with tempfile.TemporaryDirectory(prefix="newsmotion-story-") as tmp:
        wav = Path(tmp) / "speech.wav"
        write_wav(wav, speech.audio, speech.sample_rate)
        # Asked before the encoder opens: a backend that checks its inputs when called refuses here.
        visemes = speech.visemes if musetalk is None else None
        frames = iter(backend.frames(clip, inputs.persona, kp, spec, visemes=visemes, speech=heard))
        with contextlib.ExitStack() as stack:
            enc = stack.enter_context(VideoEncoder(out, spec.width, spec.height, spec.fps, encoder=encoder, audio=wav))
            # With MuseTalk the backend renders silent into held frames, which then go through the stage.
            held = stack.enter_context(HeldFrames(total, spec.width, spec.height)) if musetalk is not None else None
            write = held.write if held is not None else enc.write
            while True:
                t0 = time.perf_counter()
                try:
                    frame = next(frames)
                except StopIteration:
                    break
                if done < total:
                    part_ms[part_of[done]] += (time.perf_counter() - t0) * 1e3
                write(frame)
                done += 1
                if progress is not None:
                    progress(done, total)
            if done != total:
                raise RuntimeError(f"backend {backend.name!r} yielded {done} frames for a {total}-frame story")
            lips_record = None
            if held is not None and musetalk is not None:
                lips_record = lip_sync_story(held, kp, inputs.persona, speech, spec, musetalk, enc.write, out, on_step)
    wall_s = time.perf_counter() - t_start
    sync = av_sync(out, spec.fps)
    if lip_sync:
        lips, lips_reason = measure_lip_sync(out, speech.visemes)
    else:
        lips, lips_reason = None, OFF_REASON

    # What moved the backend's lips: the viseme track, or the speech's audio for a backend that hears it.
    lips_from = "visemes" if moves_lips(backend) else "speech audio" if heard is not None and hears_speech(backend) else None
    canvas = persona_canvas(inputs.persona)
    joins = join_smoothness(timeline, canvas)
    jumps = joint_jumps(kp, canvas)
    join_of = {j["frame"]: j["max_jump_px"] for j in joins["joins"]}
    parts = []
    for part, ms in zip(timeline.parts, part_ms):
        inside = jumps[part.start + part.blend_after : max(part.start + part.blend_after, part.stop - 1)]
        parts.append({
            "kind": part.kind, "loop_id": part.loop_id, "cue": part.field,
            "start_s": round(part.start / spec.fps, 3), "stop_s": round(part.stop / spec.fps, 3),
            "frames": part.frames, "blend_frames": part.blend, "render_ms": round(float(ms), 1),
            "max_jump_inside_px": round(float(inside.max()), 2) if inside.size else None,
            "join_jump_px": join_of.get(part.start),
        })  # fmt: skip
    telemetry = StoryTelemetry(
        story_id=story.story_id,
        persona_id=story.persona_id,
        backend=backend.name,
        backend_info=backend.describe(),
        moves_lips=bool(lips_from) if lips_record is None else lips_record["redrawn"] > 0,
        frames=done,
        fps=spec.fps,
        width=spec.width,
        height=spec.height,
        duration_s=round(speech.duration_s, 3),
        parts=parts,
        joins={k: v for k, v in joins.items() if k != "joins"},
        speech=[dict(s) for s in speech.sentences],
        av_sync=sync.as_dict(),
        encoder=enc.encoder,
        wall_s=round(wall_s, 3),
        render_ms=round(float(part_ms.sum()), 1),
        plan_ms=round(plan_ms, 2),
        encode_wait_ms=round(enc.wait_ms, 1),
        mux_ms=round(enc.mux_ms, 1),
        realtime_factor=round(wall_s / speech.duration_s, 3),
        input_digest=digest,
        output=str(out),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        lip_sync=dataclasses.asdict(lips) if lips is not None else None,
        lip_sync_reason=lips_reason,
        lips="backend" if lips_record is None else "musetalk",
        lips_from="musetalk" if lips_record is not None else lips_from,
        musetalk=lips_record,
    )
    try:
        telemetry.write(out.with_suffix(".json"))
    except OSError as exc:
        out.unlink(missing_ok=True)  # an mp4 without its record would look finished
        raise NewsmotionError(f"{out.with_suffix('.json')}: could not write the story record ({exc})") from None
    return telemetry

