"""The bench suites by name, each run in a private storage root (a :class:`Storage` of a temporary
folder, so a benchmark never touches a newsroom's caches nor the process environment) and written
as JSON. Used by ``newsmotion bench ...`` and the nightly ``benchmarks`` asset."""

from __future__ import annotations

import contextlib
import json
import tempfile
from datetime import datetime, timezone
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
    from newsmotion_engine.persona.cache import ensure_persona

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


SUITES: dict[str, Callable[[Log], dict[str, Any]]] = {
    "guidance": _guidance,
    "persona": _persona,
    "warp": _warp,
    "matte": _matte,
    "fidelity": _fidelity,
}


def run_suite(
    name: str, json_path: Path | None = None, *, log: Log = print, history_dir: Path | None = None
) -> dict[str, Any]:
    """Run one suite; write its result to ``json_path`` atomically when given, and keep a dated
    copy as ``{history_dir}/{name}/{UTC time}.json`` when ``history_dir`` is given (the nightly
    runs' trend)."""
    result = SUITES[name](log)
    targets = [json_path] if json_path is not None else []
    if history_dir is not None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
        targets.append(history_dir / name / f"{stamp}.json")
    for path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(path)
    return result
