"""The one on-disk format of a benchmark result: a :class:`BenchResult` per benchmark, one file
``benchmarks/results/<name>.json`` each (git keeps the earlier runs).

A reader takes the figures people read from ``headline`` (label with its unit -> value, in display
order) and anything else from ``data`` (the bench's full output), so no reader needs to know the
shape of a particular bench's output.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import replacing, utc_now

SCHEMA = "newsmotion.bench_result"
VERSION = 1

_REPO = Path(__file__).resolve().parents[2]
# The committed results of a checkout (absent in an installed package).
RESULTS_DIR = _REPO / "benchmarks" / "results"


@dataclass(frozen=True)
class BenchResult:
    name: str  # the benchmark's id; its file is benchmarks/results/<name>.json
    title: str  # one line: what was measured, on what (shape, settings)
    created_at: str  # ISO-8601 UTC of the measurement
    device: str  # e.g. "NVIDIA H100 80GB HBM3", "cpu (2 cores)"
    commit: str | None  # git commit of the measured tree when known
    command: str  # the command that reproduces it
    headline: dict[str, float | int | str]  # label (unit in it) -> value, in display order
    data: dict[str, Any]  # the bench's full output
    weights: str | None = None  # "random weights" for diffusion benches; None without model weights

    @classmethod
    def now(cls, name: str, *, title: str, device: str, command: str, headline: dict[str, float | int | str],
            data: dict[str, Any], weights: str | None = None) -> BenchResult:  # fmt: skip
        """A record of a measurement just made: ``created_at`` now, ``commit`` this checkout's."""
        return cls(name=name, title=title, created_at=utc_now(), device=device, commit=current_commit(), command=command,
                   headline=headline, data=data, weights=weights)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The record as it is on disk (JSON-able)."""
        return {"schema": SCHEMA, "version": VERSION, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str) + "\n"


def figure_text(value: float | int | str) -> str:
    """A headline value as shown: floats to 4 significant digits, the rest as they are."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class NotABenchResult(ValueError):
    """A file that is not a benchmark result record (or not one this version reads)."""


def current_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout this package runs from, or None outside one."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def write_result(path: Path, result: BenchResult) -> Path:
    """Write ``result`` to ``path`` atomically (a temporary sibling renamed into place), so a reader
    never sees half a record."""
    path = Path(path)
    with replacing(path) as tmp:
        tmp.write_text(result.to_json(), encoding="utf-8")
    return path


def read_result(path: Path) -> BenchResult:
    """The record in ``path``; :class:`NotABenchResult` naming the file when it is not one."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotABenchResult(f"{path}: not a benchmark result ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise NotABenchResult(f"{path}: not a benchmark result (no \"schema\": \"{SCHEMA}\")")
    if raw.get("version") != VERSION:
        raise NotABenchResult(f"{path}: benchmark result version {raw.get('version')!r}, this reader reads {VERSION}")
    names = {f.name for f in fields(BenchResult)}
    required = {f.name for f in fields(BenchResult) if f.name != "weights"}
    missing = sorted(required - raw.keys())
    unknown = sorted(raw.keys() - names - {"schema", "version"})
    if missing or unknown:
        raise NotABenchResult(f"{path}: benchmark result with missing fields {missing} / unknown fields {unknown}")
    if not isinstance(raw["headline"], dict) or not isinstance(raw["data"], dict):
        raise NotABenchResult(f"{path}: benchmark result whose headline or data is not an object")
    return BenchResult(**{k: raw[k] for k in names if k in raw})


def read_results(directory: Path, *, on_skip: Callable[[str], None] | None = None) -> list[BenchResult]:
    """Every record ``*.json`` in ``directory``, sorted by name (none when it does not exist). A
    file that is not a record raises :class:`NotABenchResult`, or, with ``on_skip``, is reported
    through ``on_skip(message)`` and left out (a page of charts should not fail on one old file)."""
    directory = Path(directory)
    results = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            results.append(read_result(path))
        except NotABenchResult as exc:
            if on_skip is None:
                raise
            on_skip(str(exc))
    return sorted(results, key=lambda r: r.name)
