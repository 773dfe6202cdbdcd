"""Asset checks: blocking, so a cache that fails its check stops its own run's downstream steps
and (see :mod:`newsmotion_assets.automation`) automation downstream of it."""

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.errors import CacheError
from newsmotion_engine.guidance.cache import keypoint_problems, load_guidance
from newsmotion_engine.persona.cache import load_persona, persona_problems


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
