"""Asset checks. The cache checks are blocking, so a cache that fails its check stops its own run's
downstream steps and (see :mod:`newsmotion_assets.automation`) automation downstream of it. The
render check (pose fidelity) is not: a clip that gestures too little is reported, not withheld."""

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.partitions import loop_partitions, persona_partitions, render_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.errors import CacheError
from newsmotion_engine.guidance.cache import keypoint_problems, load_guidance
from newsmotion_engine.persona.cache import load_persona, persona_problems
from newsmotion_engine.render.fidelity import TARGET_MOTION_ENERGY, TARGET_PCK, fidelity_problems
from newsmotion_engine.render.telemetry import RenderTelemetry, TelemetryError


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
    asset=render,
    partitions_def=render_partitions,
    blocking=False,
    description=f"Pose fidelity of the clip(s), measured on the mp4: pck >= {TARGET_PCK} over the visible head, "
    f"torso and arm joints and motion energy ratio >= {TARGET_MOTION_ENERGY} (warning, non-blocking).",
)
def render_pose_fidelity(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    dims = render_partitions.get_partition_key_from_str(context.partition_key).keys_by_dimension
    folder = storage.store.render_path(dims["persona"], dims["loop"], "warp").parent
    clips = sorted(p for p in folder.glob("*.json") if p.with_suffix(".mp4").is_file()) if folder.is_dir() else []
    if not clips:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={"problems": f"no rendered clip in {folder}"})
    problems, metadata = [], {}
    for path in clips:  # one clip per backend
        try:
            tele = RenderTelemetry.read(path)
        except TelemetryError as exc:
            problems.append(str(exc))
            continue
        found = fidelity_problems(tele.pose_fidelity, tele.pose_fidelity_reason)
        problems += [f"{tele.backend}: {p}" for p in found]
        pf = tele.pose_fidelity
        metadata[f"{tele.backend}_pck_body"] = pf.pck_body if pf and pf.pck_body is not None else -1.0
        metadata[f"{tele.backend}_motion_energy_ratio"] = pf.motion_energy_ratio if pf and pf.motion_energy_ratio is not None else -1.0
    metadata["problems"] = "; ".join(problems) or "none"
    return dg.AssetCheckResult(passed=not problems, severity=dg.AssetCheckSeverity.WARN, metadata=metadata)
