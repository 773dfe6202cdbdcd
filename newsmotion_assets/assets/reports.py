"""``benchmarks`` (the bench suites, nightly, through the renderer's launcher) and ``scorecard``
(renders + bench results table)."""


import dagster as dg
import pandas as pd

from newsmotion_assets.assets.render import render
from newsmotion_assets.metadata import images_markdown
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.bench.scorecard import bench_results_dir, build_scorecard, export_scorecard, render_records
from newsmotion_engine.bench.suites import SUITES
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.studio.charts import scorecard_charts


class BenchmarksConfig(dg.Config):
    """Which suites the ``benchmarks`` step runs: the CPU suites by default; ``gpu_preset`` (e.g.
    ``"14b"``) adds the GPU forward bench — with the ``k8s`` launcher it runs in the GPU pod."""

    suites: list[str] = list(SUITES)
    gpu_preset: str | None = None


@dg.asset(
    group_name="reports",
    kinds={"python"},
    description="Re-runs the benchmark suites (CPU: guidance, persona, warp; optionally the GPU forward "
    "bench) through the renderer's launcher and writes their result records to storage/motion/bench/; the "
    "committed figures stay in benchmarks/results/.",
)
def benchmarks(
    context: dg.AssetExecutionContext, config: BenchmarksConfig, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    results = renderer.run_benchmarks(context, storage.store, config.suites, config.gpu_preset)
    summary = {  # each result record's headline numbers
        f"{name}.{label}": v
        for name, result in results.items()
        for label, v in result["headline"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    metadata: dict = {k: round(float(v), 4) for k, v in summary.items()}
    metadata["launcher"] = renderer.active_launcher
    return dg.MaterializeResult(metadata=metadata)


def _column_type(dtype) -> str:
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(dtype):
        return "int"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    return "string"


@dg.asset(
    deps=[render, benchmarks],
    group_name="reports",
    kinds={"pandas"},
    description="Every render's telemetry plus benchmark results, exported to "
    "storage/motion/scorecards/{date}.json and .csv.",
)
def scorecard(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    frame = build_scorecard(store, on_skip=context.log.warning)
    json_path, csv_path = export_scorecard(store, frame)
    renders = frame[frame["kind"] == "render"] if not frame.empty else frame
    shown = [c for c in RenderTelemetry.SUMMARY if c in renders.columns]
    records = [
        dg.TableRecord({c: (None if pd.isna(v) else (v if isinstance(v, (int, float, str, bool)) else str(v))) for c, v in row.items()})
        for row in renders[shown].to_dict("records")
    ]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(frame),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(str(c), _column_type(t)) for c, t in frame.dtypes.items()]
            ),
            "renders": dg.MetadataValue.table(
                records=records,
                schema=dg.TableSchema(columns=[dg.TableColumn(c, _column_type(renders[c].dtype)) for c in shown]),
            ),
            "json": dg.MetadataValue.path(str(json_path)),
            "csv": dg.MetadataValue.path(str(csv_path)),
            "chart": images_markdown([(c.png, c.title) for c in scorecard_charts(store, render_records(store), bench_results_dir())]),
        }
    )
