"""``benchmarks`` (the bench suites, nightly) and ``scorecard`` (renders + bench results table)."""


import dagster as dg
import pandas as pd

from newsmotion_assets.assets.render import render
from newsmotion_assets.metadata import images_markdown
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.bench.scorecard import bench_results_dir, build_scorecard, export_scorecard, render_records
from newsmotion_engine.bench.suites import SUITES, run_suite
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.studio.charts import scorecard_charts


@dg.asset(
    group_name="reports",
    kinds={"python"},
    description="Re-runs the CPU benchmark suites (guidance, persona, warp) and writes their JSON to "
    "storage/motion/bench/; the committed figures stay in bench/results/.",
)
def benchmarks(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    folder = storage.store.bench_dir
    summary = {}
    for name in SUITES:
        context.log.info(f"running bench suite {name}")
        result = run_suite(name, folder / f"{name}.json", log=context.log.info, history_dir=storage.store.bench_history_dir)
        summary.update({f"{name}.{k}": v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return dg.MaterializeResult(metadata={k: round(float(v), 4) for k, v in summary.items()})


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
