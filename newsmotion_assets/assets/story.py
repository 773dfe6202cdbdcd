"""``story[persona x story]``: a story file from ``storage/stories/`` read by a persona -> one mp4
with sound (:func:`~newsmotion_engine.story.render.render_story`).

Thin: the engine plans, renders, muxes and checks the sync. The persona and loop caches are only
loaded (a missing one fails naming the asset to materialize); the story's own sentences (text or
audio in the file) become speeches as ``newsmotion speech say`` / ``add`` would make them, since
the story file is their source. The story renders in this process with the renderer resource's
backend and output size (the Pipes launchers run loop renders only), and with its ``lips``
(the backend's own, or MuseTalk's over the backend's silent frames). An unchanged story (same
input digest as the mp4 on disk; the lips choice and MuseTalk options are in it) is skipped; its
digest is the data version.
"""

import dataclasses

import dagster as dg

from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.metadata import png_markdown
from newsmotion_assets.partitions import story_render_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_assets.retries import TRANSIENT_RETRY, bad_input, is_bad_input, sweep_temp_files
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.story.render import render_story, stored_story
from newsmotion_engine.video.frames import contact_sheet_from_video


@dg.asset(
    partitions_def=story_render_partitions,
    deps=[dg.AssetDep(persona_cache, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("persona"))],
    group_name="renders",
    kinds={"python", "mp4"},
    pool="gpu",
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    retry_policy=TRANSIENT_RETRY,
    description="The story read by the persona, with sound: storage/motion/stories/{persona}/{story}/{backend}.mp4 "
    "plus its story record .json beside it.",
)
def story(context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    sweep_temp_files(context, store)
    dims = story_render_partitions.get_partition_key_from_str(context.partition_key).keys_by_dimension
    persona_id, story_id = dims["persona"], dims["story"]
    try:
        script = stored_story(store, story_id, persona_id)
        spec = dataclasses.replace(renderer.spec(), keyframes=1)  # a story renders every frame
        # Lip sync is measured with pose fidelity: one switch, "measure the written clip".
        tele = render_story(store, script, renderer.loaded, spec, build=False, lip_sync=renderer.fidelity,
                            lips=renderer.story_lips())  # fmt: skip
    except Exception as exc:
        if is_bad_input(exc):
            raise bad_input(context, exc, persona=persona_id, story=story_id) from None
        raise
    if tele.outcome == "skipped":
        context.log.info(f"{persona_id} x {story_id}: current (same input digest), not rendered again -> {tele.output}")
    else:
        context.log.info(f"{persona_id} x {story_id}: {tele.duration_s:.2f} s in {tele.wall_s:.1f} s "
                         f"({tele.realtime_factor:.2f}x real time) -> {tele.output}")  # fmt: skip
    metadata = {
        "path": dg.MetadataValue.path(tele.output),
        "outcome": tele.outcome,
        "input_digest": tele.input_digest,
        "duration_s": tele.duration_s,
        "realtime_factor": tele.realtime_factor,
        "in_sync": bool(tele.av_sync["in_sync"]),
        "av_offset_frames": tele.av_sync["offset_frames"],
        "max_jump_at_joins_px": tele.joins["max_jump_at_joins_px"],
        "max_jump_inside_px": tele.joins["max_jump_inside_px"],
        "parts": dg.MetadataValue.json(tele.parts),
        "lip_sync": dg.MetadataValue.json(tele.lip_sync) if tele.lip_sync else f"not measured: {tele.lip_sync_reason}",
        "weights": str(tele.weights or "unknown"),
        "lips": tele.lips_label,
        "contact_sheet": png_markdown(png_bytes(contact_sheet_from_video(tele.output, count=6)), "frames"),
    }
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(tele.input_digest))
