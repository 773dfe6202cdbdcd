"""``render[persona x loop]``: an mp4 + telemetry per pair, through the renderer resource.

The asset only loads caches (:func:`render_persona_loop`): a missing or stale upstream cache
fails the run with the name of the asset to materialize. A render whose inputs did not change
(same input digest as the clip on disk) is skipped, and a one-partition run reports the input
digest as the data version, so the UI shows a render stale when an upstream cache changed.
"""


import dagster as dg
import numpy as np

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.automation import eager_after_valid_upstream
from newsmotion_assets.metadata import png_markdown
from newsmotion_assets.partitions import render_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.render.job import render_persona_loop
from newsmotion_engine.render.telemetry import RenderTelemetry
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
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=eager_after_valid_upstream(updates_from=[backend_guidance_cache, backend_persona_cache]),
    description="The loop performed by the persona: storage/motion/renders/{persona}/{loop}/{backend}.mp4 "
    "plus a telemetry .json beside it.",
)
def render(context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    backend, spec = renderer.loaded, renderer.spec()
    keys = context.partition_keys  # one key, or many in a single-run backfill (backend stays warm)
    records: list[RenderTelemetry] = []
    for key in keys:
        dims = render_partitions.get_partition_key_from_str(key).keys_by_dimension
        persona_id, loop_id = dims["persona"], dims["loop"]
        tele = render_persona_loop(store, persona_id, loop_id, backend, spec, fidelity=renderer.fidelity_config())
        if tele.outcome == "skipped":
            context.log.info(f"{persona_id} x {loop_id}: current (same input digest), not rendered again -> {tele.output}")
        else:
            context.log.info(
                f"{persona_id} x {loop_id}: {tele.frames} frames at {tele.fps_achieved:.1f} fps "
                f"({tele.encoder}) -> {tele.output}"
            )
        # Per partition: each materialization event carries its own clip's digest and outcome.
        context.add_asset_metadata(
            {"input_digest": tele.input_digest, "outcome": tele.outcome, "path": dg.MetadataValue.path(tele.output)},
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
