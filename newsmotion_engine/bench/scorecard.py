"""The scorecard: every render's telemetry plus the latest benchmark results, as one table.

Rows come from ``motion/renders/{persona}/{loop}/{backend}.json`` (kind ``render``, read as
:class:`~newsmotion_engine.render.telemetry.RenderTelemetry`, columns
:attr:`RenderTelemetry.COLUMNS`) and from the benchmark result records in ``benchmarks/results/``
and ``motion/bench/`` (kind ``bench``: the record's name, title, device, time and its headline
figures, one column per figure). Exported to ``motion/scorecards/{date}.json`` and ``.csv``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from newsmotion_engine.bench.matrix import read_matrix
from newsmotion_engine.bench.record import RESULTS_DIR, BenchResult, read_results
from newsmotion_engine.render.telemetry import RenderTelemetry, TelemetryError
from newsmotion_engine.storage import Storage

log = logging.getLogger(__name__)

INTEGER_COLUMNS = tuple(c for c, kind in RenderTelemetry.column_kinds().items() if kind == "int")


def bench_results_dir() -> Path:
    """Committed benchmark results (``$NEWSMOTION_BENCH_RESULTS``, else the checkout's
    ``benchmarks/results``)."""
    return Path(os.environ.get("NEWSMOTION_BENCH_RESULTS", RESULTS_DIR))


def render_records(storage: Storage, *, on_skip: Callable[[str], None] | None = None) -> list[RenderTelemetry]:
    """Every render's telemetry (clips whose mp4 is gone are left out). A telemetry file that
    cannot be read is left out too, and reported through ``on_skip(message)`` (default: a logged
    warning), so one damaged or old file does not sink the whole table."""
    skip = on_skip or log.warning
    records = []
    root = storage.renders_root
    for path in sorted(root.glob("*/*/*.json")) if root.is_dir() else []:
        if not path.with_suffix(".mp4").is_file():
            continue
        try:
            records.append(RenderTelemetry.read(path))
        except TelemetryError as exc:
            skip(f"left out of the scorecard: {exc}")
    return records


def bench_results(folders: list[Path], *, on_skip: Callable[[str], None] | None = None) -> list[BenchResult]:
    """The result records in ``folders``, folder by folder; a file that is not one is reported as
    in :func:`render_records` and left out."""
    skip = on_skip or log.warning
    return [r for folder in folders for r in read_results(folder, on_skip=lambda m: skip(f"left out of the scorecard: {m}"))]


def bench_row(result: BenchResult) -> dict[str, Any]:
    """A record as a scorecard row: what was measured, where and when, and its headline figures."""
    return {"kind": "bench", "bench": result.name, "title": result.title, "device": result.device,
            "created_at": result.created_at, "weights": result.weights, **result.headline}  # fmt: skip


def build_scorecard(
    storage: Storage,
    bench_folders: list[Path] | None = None,
    *,
    on_skip: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """All render rows (:attr:`RenderTelemetry.COLUMNS`), then all bench rows, then the
    acceleration matrix (:mod:`~newsmotion_engine.bench.matrix`, kind ``matrix``, one row per
    measured backend and card); columns are the union, render columns first. ``bench_folders`` default: the committed results and the nightly
    ones (``storage.bench_dir``)."""
    folders = bench_folders if bench_folders is not None else [bench_results_dir(), storage.bench_dir]
    renders = [{"kind": "render", **t.row()} for t in render_records(storage, on_skip=on_skip)]
    results = bench_results(folders, on_skip=on_skip)
    matrix = [{"kind": "matrix", **row.as_dict()} for row in read_matrix(results) if row.record]  # measured ones
    frame = pd.DataFrame(renders + [bench_row(r) for r in results] + matrix)
    if frame.empty:
        return pd.DataFrame(columns=["kind", *RenderTelemetry.COLUMNS])
    for column in INTEGER_COLUMNS:  # stay integers despite the bench rows' missing values
        if column in frame.columns:
            values = pd.to_numeric(frame[column], errors="coerce")
            if values.notna().equals(frame[column].notna()) and (values.dropna() % 1 == 0).all():
                frame[column] = values.astype("Int64")
    first = ["kind", *[c for c in RenderTelemetry.COLUMNS if c in frame.columns]]
    return frame[first + [c for c in frame.columns if c not in first]]


def export_scorecard(storage: Storage, frame: pd.DataFrame, date: str | None = None) -> tuple[Path, Path]:
    """Write ``scorecards/{date}.json`` (records) and ``.csv`` atomically; returns both paths."""
    date = date or _dt.date.today().isoformat()
    folder = storage.scorecards_dir
    folder.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = folder / f"{date}.json", folder / f"{date}.csv"
    for path, text in (
        (json_path, frame.to_json(orient="records", indent=2)),
        (csv_path, frame.to_csv(index=False)),
    ):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return json_path, csv_path
