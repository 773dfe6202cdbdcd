"""``driving_clip[loop]``: the real video of a person performing the loop, at the video model's
24 fps and the renderer's size, that Wan-Animate-2 is driven by (format and origins:
:mod:`newsmotion_engine.guidance.driver` — the user's clip in ``motion/driving_clips/``, a custom
loop's source video, or the warp render of the fixed driver portrait). Persona-independent, so it
is per loop; ``backend_guidance_cache`` depends on it. Its cache digest is the data version.
"""

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.automation import eager_after_valid_upstream
from newsmotion_assets.partitions import loop_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_assets.retries import bad_input, is_bad_input
from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError, NewsmotionError
from newsmotion_engine.guidance.cache import load_guidance
from newsmotion_engine.guidance.driver import ensure_driving_clip

VIDEO_DRIVEN = frozenset({"wan-animate-2", "scail-2"})


@dg.asset(
    partitions_def=loop_partitions,
    deps=[guidance_cache],
    group_name="motion",
    kinds={"python", "numpy"},
    automation_condition=eager_after_valid_upstream(),
    description="A real video of a person performing the loop at 24 fps and the renderer's size (the user's clip, "
    "the custom loop's source video, or the driver portrait's warp render): what wan-animate-2 is driven by; "
    "storage/motion/preprocessed/{loop}/driving/{W}x{H}/.",
)
def driving_clip(context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource) -> dg.MaterializeResult:
    loop_id = context.partition_key
    spec = renderer.spec()
    if renderer.backend not in VIDEO_DRIVEN:
        # Only video-driven backends read it: no clip is built for the others (it is large).
        return dg.MaterializeResult(metadata={"skipped": f"backend {renderer.backend} is driven by keypoints, not a video"})
    try:
        guidance = load_guidance(storage.store, loop_id)
    except CacheError as exc:
        raise NewsmotionError(f"driving_clip[{loop_id}] needs guidance_cache[{loop_id}]: materialize it first ({exc})") from None
    try:
        clip, built = ensure_driving_clip(guidance, spec.width, spec.height)
    except Exception as exc:
        if is_bad_input(exc):  # an unreadable or too short user clip: not retried
            raise bad_input(context, exc, loop=loop_id) from None
        raise
    context.log.info(f"{loop_id}: driving clip {'built' if built else 'current, reused'} ({clip.origin}, {clip.path})")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(clip.digest),
        metadata={
            "origin": clip.origin,
            "frames": int(clip.frames.shape[0]),
            "fps": clip.fps,
            "size": f"{spec.width}x{spec.height}",
            "built": built,
            "digest": clip.digest,
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(clip.path)),
            "path": dg.MetadataValue.path(str(clip.path)),
        },
    )
