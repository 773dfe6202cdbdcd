"""The product benchmarks by name: what each measures, how to re-run it and the figures people
read (its :class:`~newsmotion_engine.bench.record.BenchResult`); the suites among them run in a
private storage root (a :class:`Storage` of a temporary folder, so a benchmark never touches a
newsroom's caches nor the process environment). Used by ``newsmotion bench ...`` and the nightly
``benchmarks`` asset."""

from __future__ import annotations

import contextlib
import importlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from newsmotion_engine.bench.common import cpu_device
from newsmotion_engine.bench.record import BenchResult, write_result
from newsmotion_engine.storage import Storage

Log = Callable[[str], None]


@contextlib.contextmanager
def private_storage() -> Iterator[Storage]:
    """A :class:`Storage` rooted in a fresh temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="newsmotion-bench-") as root:
        yield Storage(root)


def sample_portrait(folder: Path) -> Path:
    """The bundled sample persona (scikit-image's astronaut) written as a PNG into ``folder``."""
    from newsmotion_engine.samples import write_sample_portrait

    return write_sample_portrait("astronaut", folder)


def _guidance(log: Log) -> dict[str, Any]:
    from newsmotion_engine.bench.guidance import bench_guidance

    return bench_guidance(log=log)


def _persona(log: Log) -> dict[str, Any]:
    from newsmotion_engine.bench.persona import bench_persona

    with private_storage() as store:
        log("building and loading the sample persona (astronaut)")
        result = bench_persona(store, sample_portrait(store.persona_samples), persona_id="astronaut")
    return {"benchmark": "persona", **result}


def _warp(log: Log) -> dict[str, Any]:
    from newsmotion_engine.bench.warp import bench_warp
    from newsmotion_engine.guidance.cache import ensure_guidance
    from newsmotion_engine.persona.build import ensure_persona

    with private_storage() as store:
        log("building the welcome loop and the sample persona, then rendering 720x1280 end to end")
        guidance, _ = ensure_guidance(store, "welcome")
        persona, _ = ensure_persona(store, "astronaut", image=sample_portrait(store.persona_samples))
        result = bench_warp(guidance, persona, frames=120, width=720, height=1280, threads=2, repeats=5, log=log)
    return {"benchmark": "warp", "loop": "welcome", "persona": "astronaut", **result}


def _matte(log: Log) -> dict[str, Any]:
    from newsmotion_engine.bench.matte import bench_matte

    with private_storage() as store:
        return bench_matte(store, log=log)


def _fidelity(log: Log) -> dict[str, Any]:
    from newsmotion_engine.bench.fidelity import bench_fidelity

    with private_storage() as store:
        return bench_fidelity(store, log=log)


@dataclass(frozen=True)
class ProductBench:
    title: str  # BenchResult.title
    command: str  # BenchResult.command
    run: Callable[[Log], dict[str, Any]] | None = None  # a suite: runnable by name (CLI, nightly asset)

    def headline(self, name: str, data: dict[str, Any]) -> dict[str, float | int | str]:
        """The ``headline`` function of the bench's own module (``bench/<name>.py``)."""
        return importlib.import_module(f"newsmotion_engine.bench.{name}").headline(data)


def _cli(name: str) -> str:
    return f"newsmotion bench {name} --json benchmarks/results/{name}.json"


BENCHES: dict[str, ProductBench] = {
    "guidance": ProductBench("guidance cache of a 120-frame loop: warm / cold load vs re-extraction (mediapipe, 720x1280)",
                             _cli("guidance"), _guidance),
    "persona": ProductBench("persona cache of the sample astronaut: warm / cold load and build", _cli("persona"), _persona),
    "warp": ProductBench("warp backend, astronaut x welcome, 120 frames at 720x1280, render + libx264, best of 5",
                         _cli("warp"), _warp),
    "matte": ProductBench("persona mattes of the sample portraits, before and after cleaning", _cli("matte"), _matte),
    "fidelity": ProductBench("pose fidelity of the warp renders (3 sample portraits x 7 loops, 720x1280) read back by mediapipe",
                             _cli("fidelity") + " --sheets docs/contact_sheets", _fidelity),
    "infill": ProductBench("flow infill of dropped frames at 1:2 and 1:3 keyframes, 720x1280, vs the true frames",
                           "python -m newsmotion_engine.bench.infill --json benchmarks/results/infill.json"),
    "chroma": ProductBench("green screen of generated-like frames (3 sample personas, 360x640) vs the true background",
                           "python -m newsmotion_engine.bench.chroma --json benchmarks/results/chroma.json"),
}  # fmt: skip
# The benches runnable by name in a private storage root.
SUITES: dict[str, ProductBench] = {name: bench for name, bench in BENCHES.items() if bench.run is not None}


def bench_record(name: str, data: dict[str, Any]) -> BenchResult:
    """The record of a product bench's output ``data``, measured now on this machine."""
    bench = BENCHES[name]
    return BenchResult.now(name, title=bench.title, device=cpu_device(), command=bench.command,
                           headline=bench.headline(name, data), data=data)


def run_suite(
    name: str, json_path: Path | None = None, *, log: Log = print, history_dir: Path | None = None
) -> BenchResult:
    """Run one suite; write its record to ``json_path`` atomically when given, and keep a dated
    copy as ``{history_dir}/{name}/{UTC time}.json`` when ``history_dir`` is given (the nightly
    runs' trend)."""
    suite = SUITES[name]
    assert suite.run is not None
    result = bench_record(name, suite.run(log))
    targets = [json_path] if json_path is not None else []
    if history_dir is not None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
        targets.append(history_dir / name / f"{stamp}.json")
    for path in targets:
        write_result(path, result)
    return result
