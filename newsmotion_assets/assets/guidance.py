"""``guidance_cache[loop]``: Tier-1 motion keypoints per loop, built once, memory-mapped later.

The asset builds through :func:`ensure_guidance` (the same function ``newsmotion guidance build``
and ``newsmotion render`` use) and reports the cache's digest as its data version, so renders
downstream show stale exactly when the keypoints changed.
"""


import dagster as dg

from newsmotion_assets.metadata import png_markdown, warm_load_ms
from newsmotion_assets.partitions import loop_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.retries import TRANSIENT_RETRY, bad_input, is_bad_input, sweep_temp_files
from newsmotion_engine import cachedir, skeleton
from newsmotion_engine.guidance import draw
from newsmotion_engine.guidance.cache import ensure_guidance, load_guidance


@dg.asset(
    partitions_def=loop_partitions,
    group_name="motion",
    kinds={"python", "numpy"},
    # One partition per run: a run reports one data version, this loop's cache digest.
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    retry_policy=TRANSIENT_RETRY,
    description="Raw whole-body keypoints of one motion loop (COCO-WholeBody 133, normalized), "
    "authored procedurally or extracted from a driving video; storage/motion/preprocessed/{loop}/.",
)
def guidance_cache(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    loop_id = context.partition_key
    last_logged = [-1]

    def progress(done: int, total: int) -> None:
        # A log line every ~10% of frames: enough to follow a long extraction in the UI.
        step = max(total // 10, 1)
        if done // step != last_logged[0]:
            last_logged[0] = done // step
            context.log.info(f"{loop_id}: {done}/{total} frames")

    sweep_temp_files(context, store)
    try:
        cache, built = ensure_guidance(store, loop_id, progress=progress)
    except Exception as exc:
        if is_bad_input(exc):  # e.g. a driving video with no person in it: not retried
            raise bad_input(context, exc, loop=loop_id) from None
        raise
    context.log.info(f"{loop_id}: {'built' if built else 'cache current, reused'} ({cache.path})")
    confidence = skeleton.part_confidence(cache.keypoints)
    sheet = draw.contact_sheet(cache.keypoints)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(cache.digest),
        metadata={
            "frames": cache.frames,
            "fps": cache.fps,
            "source": cache.source_kind,
            "source_sha256": cache.metadata["source"]["sha256"],
            "built": built,
            "digest": cache.digest,
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(cache.path)),
            "path": dg.MetadataValue.path(str(cache.path)),
            "warm_load_ms_p50": warm_load_ms(lambda: load_guidance(store, loop_id)),
            **{f"confidence_{part}": round(value, 3) for part, value in confidence.items()},
            "preview": png_markdown(draw.png_bytes(sheet), f"{loop_id} pose maps"),
        },
    )
