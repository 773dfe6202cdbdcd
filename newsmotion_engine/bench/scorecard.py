"""The scorecard: every render's telemetry plus the latest benchmark results, as one table.

Rows come from ``motion/renders/{persona}/{loop}/{backend}.json`` (kind ``render``, read as
:class:`~newsmotion_engine.render.telemetry.RenderTelemetry`, columns
:attr:`RenderTelemetry.COLUMNS`) and from the benchmark result files in ``bench/results/*.json``
and ``motion/bench/`` (kind ``bench``; nested dicts flattened to ``a.b`` columns). Exported to
``motion/scorecards/{date}.json`` and ``.csv``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from newsmotion_engine.render.telemetry import RenderTelemetry, TelemetryError
from newsmotion_engine.storage import Storage

log = logging.getLogger(__name__)

INTEGER_COLUMNS = tuple(c for c, kind in RenderTelemetry.column_kinds().items() if kind == "int")


def bench_results_dir() -> Path:
    """Committed benchmark results (``$NEWSMOTION_BENCH_RESULTS`` or ``bench/results``)."""
    return Path(os.environ.get("NEWSMOTION_BENCH_RESULTS", "bench/results"))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list):
        return {prefix[:-1]: json.dumps(value)}
    return {prefix[:-1]: value}


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


def bench_rows(folders: list[Path], *, on_skip: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One row per result file in ``folders``; unreadable files are reported as in
    :func:`render_records` and left out."""
    skip = on_skip or log.warning
    rows = []
    for folder in folders:
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                result = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                skip(f"left out of the scorecard: {path}: not a readable JSON result ({exc})")
                continue
            if isinstance(result, dict):
                rows.append({"kind": "bench", "bench_file": str(path), **_flatten(result)})
    return rows


def build_scorecard(
    storage: Storage,
    bench_folders: list[Path] | None = None,
    *,
    on_skip: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """All render rows (:attr:`RenderTelemetry.COLUMNS`) then all bench rows; columns are the
    union, render columns first. ``bench_folders`` default: the committed results and the nightly
    ones (``storage.bench_dir``)."""
    folders = bench_folders if bench_folders is not None else [bench_results_dir(), storage.bench_dir]
    renders = [{"kind": "render", **t.row()} for t in render_records(storage, on_skip=on_skip)]
    frame = pd.DataFrame(renders + bench_rows(folders, on_skip=on_skip))
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
