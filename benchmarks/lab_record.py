"""A lab bench's output written as a :class:`~newsmotion_engine.bench.record.BenchResult`: the
name is the file's stem, the device and time come from the output when it has them, the command
is the one running."""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from newsmotion_engine.bench.record import BenchResult, current_commit, write_result


def running_command() -> str:
    """This process's command line, as ``python -m <module> ...`` when run as a module."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None else ["python", sys.argv[0] if sys.argv else "-"]
    return shlex.join([*head, *sys.argv[1:]])


def write_lab_result(path: str | Path, data: Mapping[str, Any], *, title: str, headline: Mapping[str, float | int | str],
                     command: str | None = None) -> Path:  # fmt: skip
    """Write ``data`` (the bench's whole output) to ``path`` as a result record; rewritten as a
    run goes, so a run cut short keeps what it measured."""
    path = Path(path)
    result = BenchResult(
        name=path.stem,
        title=title,
        created_at=str(data.get("created_at") or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")),
        device=str(data.get("device") or "unknown"),
        commit=current_commit(),
        command=command or running_command(),
        headline=dict(headline),
        data=dict(data),
        weights=data.get("weights"),
    )
    return write_result(path, result)


def top_level_figures(data: Mapping[str, Any], limit: int = 8) -> dict[str, float | int]:
    """The output's top-level numbers (speedups, seconds, ...), in its order: the headline of a lab
    bench whose figures are all in its output."""
    skip = {"wall_s"}
    figures = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip}
    return dict(list(figures.items())[:limit])


def stock_vs_ours(result: dict[str, Any], key: str, rows: Mapping[str, Mapping[str, Any]], *, seconds: str = "end_to_end_s") -> None:
    """Add one size's figures to a stock-vs-ours bench ``result``: ``clip_{key}_s_stock``,
    ``clip_{key}_s`` (the fastest variant that is not ``stock`` nor ``approximate``: the headline
    is exact), ``fastest_{key}`` and ``speedup_{key}``, from the measured ``rows`` (variant -> row
    with ``seconds``); the fastest approximate row, if any, beside them as
    ``clip_{key}_s_approximate``, ``fastest_{key}_approximate`` and ``speedup_{key}_approximate``."""
    done = {n: r for n, r in rows.items() if seconds in r and not r.get("approximate")}
    stock = done["stock"][seconds] if "stock" in done else None
    if stock is not None:
        result[f"clip_{key}_s_stock"] = stock
    _fastest(result, key, {n: r for n, r in done.items() if n != "stock"}, stock, seconds, "")
    _fastest(result, key, {n: r for n, r in rows.items() if seconds in r and r.get("approximate")}, stock, seconds, "_approximate")


def _fastest(result: dict[str, Any], key: str, rows: Mapping[str, Mapping[str, Any]], stock: float | None, seconds: str,
             suffix: str) -> None:  # fmt: skip
    if not rows:
        return
    best = min(rows, key=lambda n: rows[n][seconds])
    result[f"clip_{key}_s{suffix}"] = rows[best][seconds]
    result[f"fastest_{key}{suffix}"] = best
    if stock is not None:
        result[f"speedup_{key}{suffix}"] = round(stock / rows[best][seconds], 3)


def read_lab_data(path: str | Path) -> dict[str, Any]:
    """The bench output inside the result record at ``path``."""
    from newsmotion_engine.bench.record import read_result

    return read_result(Path(path)).data


def combine_runs(paths: list[str | Path], *, same: tuple[str, ...] = ("device", "preset", "shape")) -> dict[str, Any]:
    """One stock-vs-ours output from the records of several runs of the same bench, each holding
    some of its variants (a model too slow for stock and ours in one device command: stock in one
    call, ours in the next, on the same warm machine). The runs must agree on ``same`` (the card,
    the preset, the clip); their ``rows`` are merged (a later run's variant replaces an earlier
    one's) and each size's stock-vs-ours figures computed again. ``runs`` lists each record's time
    and variants; the figures come only from rows measured on that card."""
    datas = [read_lab_data(p) for p in paths]
    first = datas[0]
    for path, data in zip(paths[1:], datas[1:], strict=True):
        for key in same:
            if data.get(key) != first.get(key):
                raise ValueError(f"{path}: {key} {data.get(key)!r} differs from {paths[0]}'s {first.get(key)!r}: "
                                 "only runs of the same clip on the same card combine")  # fmt: skip
    # The first run's settings; its figures (numbers) are recomputed from the merged rows below.
    out = {k: v for k, v in first.items() if k != "rows" and (isinstance(v, bool) or not isinstance(v, (int, float)))}
    out["rows"] = {}
    out["runs"] = []
    for path, data in zip(paths, datas, strict=True):
        out["runs"].append({"record": Path(path).name, "created_at": data.get("created_at"),
                            "variants": sorted({n for rows in data.get("rows", {}).values() for n in rows})})  # fmt: skip
        for size, rows in (data.get("rows") or {}).items():
            merged = out["rows"].setdefault(size, {})
            merged.update({n: r for n, r in rows.items() if "skipped" not in r or n not in merged})
    for size, rows in out["rows"].items():
        stock_vs_ours(out, size, rows)
    return out


COMBINE_HELP = "join the records of runs that each measured some variants (same card, clip, preset) into --json"


def combine_to_record(paths: list[str | Path], json_path: str | Path | None, *, bench: str) -> dict[str, Any]:
    """A bench's ``--combine``: :func:`combine_runs` of ``paths``, written as a result record at
    ``json_path`` (when given) and its figures printed; returns the joined output."""
    import json

    joined = combine_runs(paths)
    figures = top_level_figures(joined)
    if json_path:
        write_lab_result(json_path, joined, title=f"{bench} {joined.get('preset')}: a {joined['shape']['frames']}-frame clip, "
                         f"stock vs ours ({len(paths)} runs on one card)", headline=figures)  # fmt: skip
    print(json.dumps(figures))
    return joined
