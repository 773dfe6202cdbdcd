"""``render[persona x loop]``: an mp4 + telemetry per pair, through the renderer resource.

The asset only loads caches (:func:`~newsmotion_engine.render.job.render_persona_loop`, which the
renderer resource runs in process or in an engine process): a missing or stale upstream cache
fails the run with the name of the asset to materialize. A render whose inputs did not change
(same input digest as the clip on disk) is skipped, and a one-partition run reports the input
digest as the data version, so the UI shows a render stale when an upstream cache changed.

One run per partition (the backfill policy): each render is recorded the moment it completes, an
interrupted run loses only the clip in flight, and a retried run redoes only that clip. A transient
failure is retried (the step's retry policy, run retries, automation); bad input never is
(:mod:`newsmotion_assets.retries`). Each run first sweeps stale temporary files (a killed run's
half-written mp4).
"""


import dagster as dg

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.automation import eager_after_valid_upstream
from newsmotion_assets.metadata import png_markdown, studio_url
from newsmotion_assets.partitions import render_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_assets.retries import TRANSIENT_RETRY, bad_input, is_bad_input, sweep_temp_files
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.studio.paths import render_page
from newsmotion_engine.video.frames import contact_sheet_from_video


@dg.asset(
    partitions_def=render_partitions,
    # The base caches are direct deps too (not only through the backend caches) so their blocking
    # checks gate this asset's automation.
    deps=[
        dg.AssetDep(asset, partition_mapping=dg.MultiToSingleDimensionPartitionMapping(dimension))
        for asset, dimension in (
            (guidance_cache, "loop"),
            (backend_guidance_cache, "loop"),
            (persona_cache, "persona"),
            (backend_persona_cache, "persona"),
        )
    ],
    group_name="renders",
    kinds={"python", "mp4"},
    pool="gpu",
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    retry_policy=TRANSIENT_RETRY,
    automation_condition=eager_after_valid_upstream(
        updates_from=[backend_guidance_cache, backend_persona_cache], retry_failures=True
    ),
    description="The loop performed by the persona: storage/motion/renders/{persona}/{loop}/{backend}.mp4 "
    "plus a telemetry .json beside it.",
)
def render(context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    keys = context.partition_keys  # one key (a run per partition); many when launched as a range
    sweep_temp_files(context, store)
    records: list[RenderTelemetry] = []
    for key in keys:
        dims = render_partitions.get_partition_key_from_str(key).keys_by_dimension
        persona_id, loop_id = dims["persona"], dims["loop"]
        try:
            # The resource renders where its launcher says: in process with the warm backend, or in an
            # engine process through Dagster Pipes; either way this clip's telemetry comes back (an
            # engine error comes back as the same class, so bad input is still recognised).
            (tele,) = renderer.render(context, store, [(persona_id, loop_id)])
        except Exception as exc:
            if is_bad_input(exc):
                raise bad_input(context, exc, persona=persona_id, loop=loop_id) from None
            raise  # transient (ffmpeg killed, I/O): the retry policy runs the step again
        if tele.outcome == "skipped":
            context.log.info(f"{persona_id} x {loop_id}: current (same input digest), not rendered again -> {tele.output}")
        else:
            context.log.info(
                f"{persona_id} x {loop_id}: {tele.frames} frames at {tele.fps_achieved:.1f} fps "
                f"({tele.encoder}) -> {tele.output}"
            )
        # Per partition: each materialization event carries its own clip's digest and outcome.
        context.add_asset_metadata(
            {"input_digest": tele.input_digest, "outcome": tele.outcome, "path": dg.MetadataValue.path(tele.output),
             "studio_page": studio_url(render_page(persona_id, loop_id, tele.backend))},
            partition_key=key,
        )
        records.append(tele)
    kinds = RenderTelemetry.column_kinds()
    metadata: dict = {
        "renders": len(records),
        "rendered": sum(t.outcome == "rendered" for t in records),
        "skipped": sum(t.outcome == "skipped" for t in records),
        "telemetry": dg.MetadataValue.table(
            records=[dg.TableRecord({k: _cell(v, kinds[k]) for k, v in t.row().items()}) for t in records],
            schema=dg.TableSchema(columns=[dg.TableColumn(k, kind) for k, kind in kinds.items()]),
        ),
    }
    data_version = None
    if len(records) == 1:
        tele = records[0]
        metadata["weights"] = str(tele.weights or "unknown")
        pf = tele.pose_fidelity
        metadata["pose_fidelity"] = (
            dg.MetadataValue.json(tele.to_dict()["pose_fidelity"]) if pf else f"not measured: {tele.pose_fidelity_reason}"
        )
        metadata["contact_sheet"] = png_markdown(png_bytes(contact_sheet_from_video(tele.output, count=6)), "frames")
        # One MaterializeResult carries one data version for all its partitions, so it is given only
        # when the run has one; a multi-partition run lets Dagster derive it from the caches' versions.
        data_version = dg.DataVersion(tele.input_digest)
    return dg.MaterializeResult(metadata=metadata, data_version=data_version)


def _cell(value, kind: str):
    if value is None:
        return None
    if kind == "int":
        return int(value)
    if kind == "float":
        return round(float(value), 3)
    return str(value)
