"""The scorecard as charts (matplotlib, no pyplot state): SVG for the studio, PNG for Dagster.

- seconds per stage of every render (telemetry: retarget, backend, encoder wait, mux) and of the
  GPU render benchmarks (stock pipeline vs ours: denoise, decode, ...);
- speed-ups vs stock from the committed result records in ``benchmarks/results/`` (every
  ``variants.*.speedup_vs_stock`` in a record's data);
- the nightly benchmark's trend (the records in ``motion/bench/history/{suite}/`` plus the latest
  ``motion/bench/{suite}.json``): each suite's first headline figures over time.

Each chart function returns a :class:`Chart` or ``None`` when there is nothing to draw.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from newsmotion_engine.bench.matrix import read_matrix
from newsmotion_engine.bench.record import BenchResult, read_results
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.storage import Storage

__all__ = [
    "TREND_FIGURES",
    "Chart",
    "bench_history",
    "gpu_stage_chart",
    "scorecard_charts",
    "speedup_bars",
    "speedup_chart",
    "stage_seconds_chart",
    "trend_chart",
]

# How many of each nightly suite's headline figures (numbers, in display order) the trend draws.
TREND_FIGURES = 2

_BG, _PANEL, _TEXT, _MUTED, _GRID = "#14161b", "#1c1f26", "#e6e8ee", "#9aa3b2", "#2c313c"
_PALETTE = ("#4cc2ff", "#ffb547", "#7ee787", "#ff7b9c", "#b69cff", "#5ad1c4")
_PALETTE_GREY = _MUTED
_STYLE = {
    "figure.facecolor": _BG, "axes.facecolor": _PANEL, "axes.edgecolor": _GRID, "axes.labelcolor": _TEXT,
    "text.color": _TEXT, "xtick.color": _MUTED, "ytick.color": _MUTED, "grid.color": _GRID,
    "axes.grid": True, "grid.linewidth": 0.6, "font.size": 9, "axes.titlesize": 10,
    "axes.titleweight": "bold", "axes.spines.top": False, "axes.spines.right": False,
    "svg.fonttype": "path", "legend.frameon": False, "axes.axisbelow": True,
}  # fmt: skip


@dataclass(frozen=True)
class Chart:
    """One chart: ``name`` (file stem), ``title``, ``caption`` (where the numbers come from),
    ``svg`` (text, inline-able) and ``png`` (bytes)."""

    name: str
    title: str
    caption: str
    svg: str
    png: bytes


def _render(fig: Figure, name: str, title: str, caption: str) -> Chart:
    svg = io.BytesIO()
    FigureCanvasSVG(fig).print_svg(svg)
    png = io.BytesIO()
    FigureCanvasAgg(fig).print_png(png)
    text = svg.getvalue().decode("utf-8")
    text = text[text.find("<svg") :]  # inline: no XML prolog or doctype
    return Chart(name, title, caption, text, png.getvalue())


def _figure(width: float, height: float) -> Figure:
    with matplotlib.rc_context(_STYLE):
        return Figure(figsize=(width, height), dpi=110, layout="constrained")


# ------------------------------------------------------------------------------ stages
def stage_seconds_chart(records: list[RenderTelemetry]) -> Chart | None:
    """Seconds per stage of each render, stacked: retarget, backend (frames), encoder wait, mux."""
    if not records:
        return None
    stages = (("retarget", "retarget_ms"), ("backend frames", "render_ms"), ("encoder wait", "encode_wait_ms"), ("mux", "mux_ms"))
    labels = [f"{t.persona_id}/{t.loop_id} · {t.backend}" for t in records]
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8, 0.9 + 0.32 * len(records))
        ax = fig.add_subplot()
        left = [0.0] * len(records)
        for (label, attr), color in zip(stages, _PALETTE):
            values = [getattr(t, attr) / 1000.0 for t in records]
            _barh(ax, labels, values, left=left, color=color, label=label, height=0.6)
            left = [a + b for a, b in zip(left, values)]
        for y, (total, t) in enumerate(zip(left, records)):
            ax.text(total, y, f"  {t.wall_s:.2f} s wall", va="center", color=_MUTED, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        ax.set_xlim(0, max(left) * 1.25 or 1)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=4, fontsize=8)
    return _render(fig, "stages", "Seconds per stage, per render", "From each render's telemetry (RenderTelemetry).")


def _walk(value: Any, path: tuple[str, ...] = ()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, path + (str(key),))
    else:
        yield path, value


# Presets whose benchmarks time toy shapes (a check that the paths run, not a speed figure).
_TOY_PRESETS = ("tiny", "smoke")


def _real_results(results: list[BenchResult]) -> list[BenchResult]:
    return [r for r in results if r.data.get("preset") not in _TOY_PRESETS]


def _barh(ax, labels: list[str], values: list[float], **kw) -> None:
    # Numeric positions: two bars with the same label must stay two bars.
    ax.barh(range(len(labels)), values, **kw)
    ax.set_yticks(range(len(labels)), labels)


def _later_run(result: BenchResult, path: tuple[str, ...]) -> bool:
    """Whether ``path`` runs through a repeat of a record whose ``data.runs`` joins several runs of
    one bench (the first run stands for them: one bar per variant, not one per run)."""
    runs = result.data.get("runs")
    if not path or path[0] != "runs" or not isinstance(runs, dict) or not runs:
        return False
    return len(path) > 1 and path[1] != next(iter(runs))


APPROXIMATION = " (approximation)"  # a bar's label suffix: the variant changes the picture, not only the speed


def _approximate(variant: Any) -> bool:
    """Whether a record's variant is an approximation: it says ``approximate``, or a setting under it
    is marked ``experimental`` (e.g. block-sparse attention); exact variants carry neither."""
    return isinstance(variant, dict) and any(
        (path[-1] == "approximate" or path[-1] == "experimental") and value is True for path, value in _walk(variant) if path)


def _at(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def speedup_bars(results: list[BenchResult]) -> list[tuple[str, float]]:
    """``[(label, speed-up)]``, toy presets left out: first each record's headline speed-ups (a
    headline figure whose label says "speed-up"; the figures the docs quote, e.g. a whole clip vs
    stock), then the acceleration matrix's rows no headline quoted
    (:mod:`~newsmotion_engine.bench.matrix`), then a zoo record's fastest approximation (``speedup_{size}_approximate``),
    then every ``...variants.{name}.speedup_vs_stock`` in the records' data (the first of
    joined runs only); the label is the record's name, the path to ``variants`` when there is one,
    and the variant, with :data:`APPROXIMATION` after a variant that is one (:func:`_approximate`)."""
    real = _real_results(results)
    bars: list[tuple[str, float]] = []
    quoted: set[str] = set()
    for result in real:
        for label, value in result.headline.items():
            if "speed-up" in label and isinstance(value, (int, float)) and not isinstance(value, bool):
                bars.append((f"{result.name} · {label.removesuffix(' (x)')}", float(value)))
                quoted.add(result.name)
    # The acceleration matrix's other measured rows (the model-zoo records keep their figures per size).
    for row in read_matrix(real):
        if row.record and row.record not in quoted and row.speedup is not None:
            bars.append((f"{row.record} · {row.backend} stock vs ours{f' ({row.note})' if row.note else ''}", row.speedup))
    # A zoo record's fastest approximation, which the bench keeps beside its exact headline
    # (benchmarks.lab_record.stock_vs_ours: speedup_{size}_approximate).
    for result in real:
        for key, value in result.data.items():
            if key.startswith("speedup_") and key.endswith("_approximate") and isinstance(value, (int, float)):
                size = key.removeprefix("speedup_").removesuffix("_approximate")
                variant = result.data.get(f"fastest_{size}_approximate", "approximation")
                bars.append((f"{result.name} · {variant} (size {size}){APPROXIMATION}", float(value)))
    for result in real:
        for path, value in _walk(result.data):
            if len(path) >= 3 and path[-1] == "speedup_vs_stock" and path[-3] == "variants" and isinstance(value, (int, float)):
                if _later_run(result, path):
                    continue
                where = ".".join(path[:-3])
                mark = APPROXIMATION if _approximate(_at(result.data, path[:-1])) else ""
                bars.append((f"{result.name}{' ' + where if where else ''} · {path[-2]}{mark}", float(value)))
    return bars


def speedup_chart(results: list[BenchResult]) -> Chart | None:
    """:func:`speedup_bars`, one bar each, against the stock line at 1.0."""
    bars = speedup_bars(results)
    if not bars:
        return None
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8, 0.9 + 0.24 * len(bars))
        ax = fig.add_subplot()
        names = [b[0] for b in bars]
        values = [b[1] for b in bars]
        # approximations in grey: faster, but what they draw needs real weights to judge
        colors = [_PALETTE_GREY if n.endswith(APPROXIMATION) else _PALETTE[2] if v >= 1.0 else _PALETTE[3] for n, v in zip(names, values)]
        _barh(ax, names, values, color=colors, height=0.65)
        ax.axvline(1.0, color=_TEXT, linewidth=1, linestyle="--")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.2f}x", va="center", fontsize=7.5, color=_TEXT)
        ax.invert_yaxis()
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xlabel("speed-up vs stock (dashed = stock; red slower; grey approximate)")
        ax.set_xlim(0, max(values) * 1.15)
        ax.tick_params(axis="y", labelsize=7.5)
    return _render(
        fig, "speedups", "Speed-ups vs stock",
        "Each committed benchmarks/results record's headline speed-up, then every variants.*.speedup_vs_stock (the "
        "first of joined runs), random weights, each at the architecture and on the card its record names "
        "(tiny/smoke-preset checks left out: they time toy shapes).",
    )


def gpu_stage_chart(results: list[BenchResult]) -> Chart | None:
    """Seconds per stage of the GPU render benchmarks: stock pipeline vs each of our variants."""
    rows: list[tuple[str, dict[str, float]]] = []
    for result in _real_results(results):
        render = result.data.get("render")
        if not isinstance(render, dict) or not isinstance(render.get("stock"), dict):
            continue
        stock = render["stock"]
        rows.append((f"{result.name} · stock", {k: stock[k] for k in ("pipeline_s", "text_encode_s") if isinstance(stock.get(k), (int, float))}))
        for name, variant in (render.get("variants") or {}).items():
            if isinstance(variant, dict):
                rows.append((f"{result.name} · {name}", {k: variant[k] for k in ("denoise_s", "decode_s") if isinstance(variant.get(k), (int, float))}))
    rows = [r for r in rows if r[1]]
    if not rows:
        return None
    stages = ["pipeline_s", "text_encode_s", "denoise_s", "decode_s"]
    names = {"pipeline_s": "stock pipeline", "text_encode_s": "text encode", "denoise_s": "denoise", "decode_s": "VAE decode"}
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8, 0.9 + 0.34 * len(rows))
        ax = fig.add_subplot()
        labels = [r[0] for r in rows]
        left = [0.0] * len(rows)
        for stage, color in zip(stages, (_PALETTE[5], _PALETTE[4], _PALETTE[0], _PALETTE[1])):
            values = [r[1].get(stage, 0.0) for r in rows]
            if any(values):
                _barh(ax, labels, values, left=left, color=color, label=names[stage], height=0.6)
                left = [a + b for a, b in zip(left, values)]
        for y, total in enumerate(left):
            ax.text(total, y, f" {total:.1f} s", va="center", fontsize=8, color=_MUTED)
        ax.invert_yaxis()
        ax.set_xlabel("seconds (one segment)")
        ax.set_xlim(0, max(left) * 1.15)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=4, fontsize=8)
        ax.tick_params(axis="y", labelsize=7.5)
    return _render(fig, "gpu_stages", "GPU render: seconds per stage", "render.stock and render.variants of the committed GPU render benchmarks (random weights).")


# ------------------------------------------------------------------------------ trend
def _when(result: BenchResult) -> datetime:
    return datetime.fromisoformat(result.created_at)


def bench_history(storage: Storage, *, on_skip: Callable[[str], None] | None = None) -> dict[str, list[BenchResult]]:
    """``{suite: [record]}`` oldest first: the kept nightly runs (``history/{suite}/``) plus the
    latest record of each suite when no kept run has its time (runs from before history was
    kept). Files that are not records are left out (reported through ``on_skip``)."""
    skip = on_skip or (lambda message: None)
    runs: dict[str, dict[str, BenchResult]] = {}
    folders = sorted(p for p in storage.bench_history_dir.iterdir() if p.is_dir()) if storage.bench_history_dir.is_dir() else []
    for result in [r for folder in [*folders, storage.bench_dir] for r in read_results(folder, on_skip=skip)]:
        runs.setdefault(result.name, {}).setdefault(result.created_at, result)
    return {name: sorted(by_time.values(), key=_when) for name, by_time in sorted(runs.items())}


def _trend_figures(result: BenchResult) -> list[str]:
    numbers = [k for k, v in result.headline.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return numbers[:TREND_FIGURES]


def trend_chart(history: dict[str, list[BenchResult]]) -> Chart | None:
    """One small panel per trend figure of each suite (:data:`TREND_FIGURES` of the latest run's
    headline), over time."""
    series = []
    for suite, points in history.items():
        for label in _trend_figures(points[-1]):
            xy = [(_when(r), float(r.headline[label])) for r in points if isinstance(r.headline.get(label), (int, float))]
            if xy:
                series.append((f"{suite}: {label}", xy))
    if not series:
        return None
    cols = 2
    rows = (len(series) + cols - 1) // cols
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8, 0.4 + 1.9 * rows)
        for i, ((label, xy), color) in enumerate(zip(series, _PALETTE * 4)):
            ax = fig.add_subplot(rows, cols, i + 1)
            xs, ys = [p[0] for p in xy], [p[1] for p in xy]
            ax.plot(xs, ys, marker="o", color=color, linewidth=1.6, markersize=4)
            ax.set_title(label, loc="left", fontsize=9)
            ax.annotate(f"{ys[-1]:.3g}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), fontsize=8, color=_TEXT)
            ax.tick_params(axis="x", labelsize=7, rotation=20)
            ax.set_ylim(bottom=0, top=max(ys) * 1.3 or 1)
            if len(xs) == 1:
                ax.set_xticks(xs, [xs[0].strftime("%Y-%m-%d %H:%M")])
    runs = max(len(p) for p in history.values())
    return _render(fig, "trend", "Nightly benchmark trend", f"storage/motion/bench/history (kept runs, up to {runs} per suite) and the latest motion/bench/*.json.")


def scorecard_charts(
    storage: Storage, records: list[RenderTelemetry], bench_results: Path, *, on_skip: Callable[[str], None] | None = None
) -> list[Chart]:
    """Every chart that has data, in the order the scorecard page shows them; files that are not
    result records are left out (reported through ``on_skip``)."""
    results = read_results(bench_results, on_skip=on_skip or (lambda message: None))
    charts = [
        stage_seconds_chart(records),
        gpu_stage_chart(results),
        speedup_chart(results),
        trend_chart(bench_history(storage, on_skip=on_skip)),
    ]
    return [c for c in charts if c is not None]
