"""``render[persona x loop]``: an mp4 + telemetry per pair, through the renderer resource."""


import dagster as dg
import numpy as np

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.metadata import png_markdown
from newsmotion_assets.partitions import render_partitions
from newsmotion_assets.resources import RendererResource
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.render.job import render_persona_loop
from newsmotion_engine.video.frames import contact_sheet_from_video

TELEMETRY_KEYS = (
    "backend", "encoder", "frames", "fps", "fps_achieved", "render_ms", "mux_ms", "wall_s",
    "peak_rss_mb", "guidance_cache", "persona_cache",
)


@dg.asset(
    partitions_def=render_partitions,
    deps=[
        dg.AssetDep(guidance_cache, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("loop")),
        dg.AssetDep(persona_cache, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("persona")),
    ],
    group_name="renders",
    kinds={"python", "mp4"},
    pool="gpu",
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=dg.AutomationCondition.eager(),
    description="The loop performed by the persona: storage/motion/renders/{persona}/{loop}/{backend}.mp4 "
    "plus a telemetry .json beside it.",
)
def render(context: dg.AssetExecutionContext, renderer: RendererResource) -> dg.MaterializeResult:
    backend, spec = renderer.loaded, renderer.spec()
    keys = context.partition_keys  # one key, or many in a single-run backfill (backend stays warm)
    rows = []
    for key in keys:
        dims = render_partitions.get_partition_key_from_str(key).keys_by_dimension
        persona_id, loop_id = dims["persona"], dims["loop"]
        tele = render_persona_loop(persona_id, loop_id, backend, spec)
        context.log.info(
            f"{persona_id} x {loop_id}: {tele['frames']} frames at {tele['fps_achieved']:.1f} fps "
            f"({tele['encoder']}) -> {tele['output']}"
        )
        rows.append(tele)
    metadata: dict = {
        "renders": len(rows),
        "telemetry": dg.MetadataValue.table(
            records=[dg.TableRecord({k: _scalar(t.get(k)) for k in ("persona_id", "loop_id", *TELEMETRY_KEYS)}) for t in rows],
            schema=dg.TableSchema(
                columns=[dg.TableColumn(k, "string" if k in ("persona_id", "loop_id", "backend", "encoder", "guidance_cache", "persona_cache") else "float") for k in ("persona_id", "loop_id", *TELEMETRY_KEYS)]
            ),
        ),
    }
    if len(rows) == 1:
        tele = rows[0]
        metadata["path"] = dg.MetadataValue.path(tele["output"])
        metadata["weights"] = str((tele.get("backend_info") or {}).get("weights", "unknown"))
        metadata["contact_sheet"] = png_markdown(png_bytes(contact_sheet_from_video(tele["output"], count=6)), "frames")
    return dg.MaterializeResult(metadata=metadata)


def _scalar(value):
    if isinstance(value, (np.floating, float)):
        return round(float(value), 3)
    if isinstance(value, (np.integer, int)):
        return int(value)
    return None if value is None else str(value)
