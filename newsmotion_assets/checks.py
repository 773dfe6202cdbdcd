"""Asset checks. The cache checks are blocking, so a cache that fails its check stops its own run's
downstream steps and (see :mod:`newsmotion_assets.automation`) automation downstream of it. The
render and story checks (pose fidelity, lip sync) are not: a clip that gestures too little or whose
lips lag is reported, not withheld."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.speech import speech_cache
from newsmotion_assets.assets.story import story
from newsmotion_assets.partitions import loop_partitions, persona_partitions, render_partitions, speech_partitions, story_render_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.errors import CacheError
from newsmotion_engine.guidance.cache import keypoint_problems, load_guidance
from newsmotion_engine.persona.cache import load_persona, persona_problems
from newsmotion_engine.render.fidelity import TARGET_MOTION_ENERGY, TARGET_PCK, fidelity_problems
from newsmotion_engine.render.lipsync import OFF_REASON, SILENT_REASON, TARGET_CORRELATION, TARGET_OFFSET_FRAMES, lip_sync_problems
from newsmotion_engine.render.telemetry import LipSync, RenderTelemetry, TelemetryError
from newsmotion_engine.speech.cache import load_speech_cache, speech_problems
from newsmotion_engine.story.telemetry import StoryTelemetry, StoryTelemetryError


@dg.asset_check(
    asset=guidance_cache,
    partitions_def=loop_partitions,
    blocking=True,
    description="Hashes match metadata.json; shapes, dtypes, no NaN, confidences in [0, 1].",
)
def guidance_cache_valid(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    loop_id = context.partition_key
    try:
        cache = load_guidance(storage.store, loop_id, verify=True)
    except CacheError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    problems = keypoint_problems(cache.keypoints)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": "; ".join(problems) or "none", "frames": cache.frames},
    )


@dg.asset_check(
    asset=persona_cache,
    partitions_def=persona_partitions,
    blocking=True,
    description="Hashes match metadata.json; masks hold a person, face inside it, landmarks sane.",
)
def persona_cache_valid(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    try:
        cache = load_persona(storage.store, context.partition_key, verify=True)
    except CacheError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    problems = persona_problems(cache)
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": "; ".join(problems) or "none"})


@dg.asset_check(
    asset=speech_cache,
    partitions_def=speech_partitions,
    blocking=True,
    description="Hashes match metadata.json; audio finite and of its duration, voice segments ordered inside it, "
    "one viseme frame per video frame with values in [0, 1].",
)
def speech_cache_valid(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    try:
        cache = load_speech_cache(storage.store, context.partition_key, verify=True)
    except CacheError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    problems = speech_problems(cache)
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": "; ".join(problems) or "none",
                                                              "viseme_frames": len(cache.visemes)})


@dg.asset_check(
    asset=render,
    partitions_def=render_partitions,
    blocking=False,
    description=f"Pose fidelity of the clip(s), measured on the mp4: pck >= {TARGET_PCK} over the visible head, "
    f"torso and arm joints and motion energy ratio >= {TARGET_MOTION_ENERGY} (warning, non-blocking).",
)
def render_pose_fidelity(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    records, problems, folder = _render_records(storage, context.partition_key)
    if not records and not problems:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={"problems": f"no rendered clip in {folder}"})
    metadata = {}
    for tele in records:  # one clip per backend
        found = fidelity_problems(tele.pose_fidelity, tele.pose_fidelity_reason)
        problems += [f"{tele.backend}: {p}" for p in found]
        pf = tele.pose_fidelity
        metadata[f"{tele.backend}_pck_body"] = pf.pck_body if pf and pf.pck_body is not None else -1.0
        metadata[f"{tele.backend}_motion_energy_ratio"] = pf.motion_energy_ratio if pf and pf.motion_energy_ratio is not None else -1.0
    metadata["problems"] = "; ".join(problems) or "none"
    return dg.AssetCheckResult(passed=not problems, severity=dg.AssetCheckSeverity.WARN, metadata=metadata)


def _render_records(storage: StorageResource, partition_key: str) -> tuple[list[RenderTelemetry], list[str], str]:
    """The telemetry of every clip (one per backend) of a render partition, the problems reading
    them, and the folder."""
    dims = render_partitions.get_partition_key_from_str(partition_key).keys_by_dimension
    folder = storage.store.render_path(dims["persona"], dims["loop"], "warp").parent
    return *_clip_records(folder, RenderTelemetry, TelemetryError), str(folder)


def _clip_records(folder: Path, record: type, error: type[Exception]) -> tuple[list, list[str]]:
    """``record.read`` of every ``{backend}.json`` in ``folder`` that has its mp4 beside it, and the
    problems (``error``) reading them."""
    clips = sorted(p for p in folder.glob("*.json") if p.with_suffix(".mp4").is_file()) if folder.is_dir() else []
    records, problems = [], []
    for path in clips:
        try:
            records.append(record.read(path))
        except error as exc:
            problems.append(str(exc))
    return records, problems


@dg.asset_check(
    asset=render,
    partitions_def=render_partitions,
    blocking=False,
    description=f"Lip sync of the clip(s) rendered with speech, measured on the mp4: mouth aperture vs the speech's "
    f"viseme track, correlation >= {TARGET_CORRELATION} at an audio-video offset of at most {TARGET_OFFSET_FRAMES} "
    "frame (warning, non-blocking; silent clips pass with nothing to score).",
)
def render_lip_sync(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return lip_sync_check_result(storage, context.partition_key)


def lip_sync_check_result(storage: StorageResource, partition_key: str) -> dg.AssetCheckResult:
    """What :func:`render_lip_sync` reports for one render partition (``"{loop}|{persona}"``)."""
    records, problems, folder = _render_records(storage, partition_key)

    def unscored(tele: RenderTelemetry) -> str | None:
        silent = tele.lip_sync is None and (tele.lip_sync_reason or "").startswith((SILENT_REASON, "recorded by telemetry schema"))
        return "a silent clip" if silent else None

    return _lip_sync_result(records, problems, f"no rendered clip in {folder}", unscored, lambda tele: tele.lip_sync, "clips_with_speech")


def _lip_sync_result(records: list, problems: list[str], nothing: str, unscored: Callable[[Any], str | None],
                     score: Callable[[Any], LipSync | None], count_key: str) -> dg.AssetCheckResult:  # fmt: skip
    """The lip-sync check's result over clip records (one per backend): ``nothing`` when there is no
    record; a record ``unscored`` names a reason for is left out (listed under ``not_scored``),
    each other one's ``score`` is judged against the targets (``count_key``: how many were)."""
    if not records and not problems:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={"problems": nothing})
    metadata: dict[str, float | str] = {}
    left_out, scored = [], 0
    for tele in records:
        if (why := unscored(tele)) is not None:
            left_out.append(f"{tele.backend}: {why}")
            continue
        scored += 1
        ls = score(tele)
        problems += [f"{tele.backend}: {p}" for p in lip_sync_problems(ls, tele.lip_sync_reason)]
        metadata[f"{tele.backend}_lip_sync_correlation"] = ls.correlation if ls and ls.correlation is not None else -1.0
        metadata[f"{tele.backend}_audio_video_offset_frames"] = float(ls.offset_frames) if ls and ls.offset_frames is not None else -99.0
    metadata[count_key] = float(scored)
    metadata["not_scored"] = "; ".join(left_out) or "none"
    metadata["problems"] = "; ".join(problems) or "none"
    return dg.AssetCheckResult(passed=not problems, severity=dg.AssetCheckSeverity.WARN, metadata=metadata)


@dg.asset_check(
    asset=story,
    partitions_def=story_render_partitions,
    blocking=False,
    description=f"Lip sync of the story clip(s), measured on the mp4: mouth aperture vs the story's viseme track, "
    f"correlation >= {TARGET_CORRELATION} at an audio-video offset of at most {TARGET_OFFSET_FRAMES} frame (warning, "
    "non-blocking; a backend that does not move lips, or a story rendered with the measurement off, passes unscored).",
)
def story_lip_sync(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return story_lip_sync_check_result(storage, context.partition_key)


def story_lip_sync_check_result(storage: StorageResource, partition_key: str) -> dg.AssetCheckResult:
    """What :func:`story_lip_sync` reports for one story partition (``"{persona}|{story}"``): the
    story records' scores (:class:`~newsmotion_engine.story.telemetry.StoryTelemetry`), judged as
    :func:`render_lip_sync` judges a render's."""
    dims = story_render_partitions.get_partition_key_from_str(partition_key).keys_by_dimension
    folder = storage.store.story_render_path(dims["persona"], dims["story"], "warp").parent
    records, problems = _clip_records(folder, StoryTelemetry, StoryTelemetryError)

    def unscored(tele: StoryTelemetry) -> str | None:
        if not tele.moves_lips:
            return "the backend does not move lips"
        return OFF_REASON if tele.lip_sync is None and tele.lip_sync_reason == OFF_REASON else None

    return _lip_sync_result(records, problems, f"no rendered story in {folder}", unscored,
                            lambda tele: LipSync(**tele.lip_sync) if tele.lip_sync else None, "clips_scored")  # fmt: skip
