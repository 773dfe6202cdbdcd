"""``ab_comparison[persona x loop]``: the same pair rendered by two configured backends (or two
configurations of one), with per-frame PSNR / SSIM / mean |A - B| (the studio draws them).

Thin: :func:`newsmotion_engine.render.ab.run_ab` renders both sides (each backend's sub-caches made
current first, as ``newsmotion render`` does — the backend cache assets belong to the renderer
resource's one backend) into ``storage/motion/ab/{persona}/{loop}/`` and writes ``comparison.json``;
the renderer resource gives the size, fps and background. The config's ``concurrency`` says how the
two sides share the machine (``serial``, ``streams``: two CUDA streams in this process, ``processes``:
one child process a side; the last two hold both models on the GPU at once); its default is
``newsmotion_engine.render.ab.DEFAULT_AB_CONCURRENCY``.
"""

from typing import Any

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.partitions import render_partitions
from newsmotion_assets.metadata import studio_url
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.render.ab import DEFAULT_AB_CONCURRENCY, ABSide, run_ab
from newsmotion_engine.studio.catalog import ab_entry_name
from newsmotion_engine.studio.paths import ab_page


class ABComparisonConfig(dg.Config):
    """The two sides: label (file name), backend, options (as the renderer resource's); how they
    share the machine (``concurrency``)."""

    a_label: str = "wan-animate"
    a_backend: str = "wan-animate"
    a_options: dict[str, Any] = {}
    b_label: str = "wan-animate-2"
    b_backend: str = "wan-animate-2"
    b_options: dict[str, Any] = {}
    force: bool = False
    concurrency: str = DEFAULT_AB_CONCURRENCY  # "auto" (choose_concurrency) or one of CONCURRENCY_MODES


@dg.asset(
    partitions_def=render_partitions,
    deps=[
        dg.AssetDep(guidance_cache, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("loop")),
        dg.AssetDep(persona_cache, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("persona")),
    ],
    group_name="renders",
    kinds={"python", "mp4", "json"},
    pool="gpu",
    description="Two renders of persona x loop (configured backends A and B) and their per-frame "
    "PSNR / SSIM / mean |A-B|: storage/motion/ab/{persona}/{loop}/{label}.mp4 + comparison.json.",
)
def ab_comparison(
    context: dg.AssetExecutionContext, config: ABComparisonConfig, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    dims = render_partitions.get_partition_key_from_str(context.partition_key).keys_by_dimension
    persona_id, loop_id = dims["persona"], dims["loop"]
    a = ABSide(config.a_label, config.a_backend, dict(config.a_options))
    b = ABSide(config.b_label, config.b_backend, dict(config.b_options))
    result = run_ab(storage.store, persona_id, loop_id, a, b, renderer.spec(), force=config.force, concurrency=config.concurrency,
                    log=context.log.info)  # fmt: skip
    summary = result.comparison.summary()
    per_frame = result.comparison.frames
    return dg.MaterializeResult(
        metadata={
            **{k: v for k, v in summary.items() if v is not None},
            "comparison": dg.MetadataValue.path(str(result.path)),
            # The studio's A/B page of these two clips (wipe, heatmap, plots), after `studio` builds.
            "studio_page": studio_url(ab_page(persona_id, loop_id, *sorted((ab_entry_name(a.label), ab_entry_name(b.label))))),
            **{f"clip_{label}": dg.MetadataValue.path(str(p)) for label, p in result.clips.items()},
            **{f"weights_{label}": str(t.weights) for label, t in result.telemetry.items()},
            "concurrency": result.timing.mode,
            "wall_s": result.timing.wall_s,
            "render_wall_s": result.timing.render_wall_s,
            **{f"render_s_{label}": side["render_s"] for label, side in result.timing.sides.items()},
            "per_frame": dg.MetadataValue.table(
                records=[dg.TableRecord({"frame": f.index, "psnr_db": f.psnr_db, "ssim": f.ssim, "mean_abs_diff": f.mean_abs_diff})
                         for f in per_frame[:: max(1, len(per_frame) // 30)]],  # fmt: skip
                schema=dg.TableSchema(columns=[dg.TableColumn("frame", "int"), dg.TableColumn("psnr_db", "float"),
                                               dg.TableColumn("ssim", "float"), dg.TableColumn("mean_abs_diff", "float")]),  # fmt: skip
            ),
        }
    )
