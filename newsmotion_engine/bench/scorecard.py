"""The scorecard: every render's telemetry plus the latest benchmark results, as one table.

Rows come from ``motion/renders/{persona}/{loop}/{backend}.json`` (kind ``render``) and from the
benchmark result files in ``bench/results/*.json`` (kind ``bench``; nested dicts flattened to
``a.b`` columns). Exported to ``motion/scorecards/{date}.json`` and ``.csv``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from newsmotion_engine import storage

RENDER_COLUMNS = [
    "persona_id", "loop_id", "backend", "weights", "encoder", "frames", "fps", "fps_achieved", "width", "height",
    "render_ms", "mux_ms", "wall_s", "peak_rss_mb", "guidance_cache", "persona_cache", "output",
]

INTEGER_COLUMNS = ("frames", "fps", "width", "height")


def bench_results_dir() -> Path:
    """Committed benchmark results (``$NEWSMOTION_BENCH_RESULTS`` or ``bench/results``)."""
    return Path(os.environ.get("NEWSMOTION_BENCH_RESULTS", "bench/results"))


def nightly_results_dir() -> Path:
    """Results of the scheduled benchmark runs (``motion/bench/``), newest per suite."""
    return storage.motion_dir() / "bench"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list):
        return {prefix[:-1]: json.dumps(value)}
    return {prefix[:-1]: value}


def render_rows() -> list[dict[str, Any]]:
    rows = []
    root = storage.renders_root()
    for path in sorted(root.glob("*/*/*.json")) if root.is_dir() else []:
        try:
            tele = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a damaged telemetry file is left out, not fatal for the whole table
        if not path.with_suffix(".mp4").is_file():
            continue
        info = tele.get("backend_info") or {}
        row = {col: tele.get(col) for col in RENDER_COLUMNS}
        row.update(
            kind="render",
            persona_id=tele.get("persona_id") or path.parent.parent.name,
            loop_id=tele.get("loop_id") or path.parent.name,
            backend=tele.get("backend") or path.stem,
            weights=info.get("weights"),
            output=str(path.with_suffix(".mp4")),
        )
        rows.append(row)
    return rows


def bench_rows(folders: list[Path] | None = None) -> list[dict[str, Any]]:
    """One row per result file in the committed and the nightly results folders."""
    rows = []
    for folder in folders if folders is not None else [bench_results_dir(), nightly_results_dir()]:
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                result = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(result, dict):
                rows.append({"kind": "bench", "bench_file": str(path), **_flatten(result)})
    return rows


def build_scorecard(bench_folders: list[Path] | None = None) -> pd.DataFrame:
    """All render rows then all bench rows; columns are the union (render columns first)."""
    frame = pd.DataFrame(render_rows() + bench_rows(bench_folders))
    if frame.empty:
        return pd.DataFrame(columns=["kind", *RENDER_COLUMNS])
    for column in INTEGER_COLUMNS:  # stay integers despite the bench rows' missing values
        if column in frame.columns:
            values = pd.to_numeric(frame[column], errors="coerce")
            if values.notna().equals(frame[column].notna()) and (values.dropna() % 1 == 0).all():
                frame[column] = values.astype("Int64")
    first = ["kind", *[c for c in RENDER_COLUMNS if c in frame.columns]]
    return frame[first + [c for c in frame.columns if c not in first]]


def export_scorecard(frame: pd.DataFrame, date: str | None = None) -> tuple[Path, Path]:
    """Write ``scorecards/{date}.json`` (records) and ``.csv`` atomically; returns both paths."""
    date = date or _dt.date.today().isoformat()
    folder = storage.scorecards_dir()
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
