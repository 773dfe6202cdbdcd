"""The engine as its own process: renders and benchmarks launched through Dagster Pipes.

The Dagster renderer resource (``launcher="subprocess"`` or ``"k8s"``) starts this module in a
process of its own, on the same machine or in a Kubernetes GPU pod, so torch and the GPU live
there and not in the Dagster code server::

    python -m newsmotion_engine.pipes render --storage /storage --backend warp \\
        --launcher pipes-subprocess astronaut/nod astronaut/welcome
    python -m newsmotion_engine.pipes prepare --kind guidance --backend wan-animate \\
        --options '{"preset": "tiny"}' --width 64 --height 128 nod
    python -m newsmotion_engine.pipes bench --out-dir /storage/motion/bench guidance warp

What is rendered comes from the command line (visible in the process list and the pod spec); how
it went goes back through Pipes: progress as log lines, every render's
:class:`~newsmotion_engine.render.telemetry.RenderTelemetry` as the materialization's metadata
(``telemetry``: a JSON list, read back on the other side with ``RenderTelemetry.from_json``), and
pose fidelity, when the telemetry has it, as the ``render_pose_fidelity`` check result. An error
the user can act on is sent as one record (:func:`~newsmotion_engine.errors.error_record`), printed
as one ``error:`` line and exits 1; the render itself writes mp4 and telemetry atomically, so a
failed render leaves nothing partial behind.

``dagster_pipes`` (the small package Pipes' external side needs, no Dagster) is imported only here
and only when the process was started by Pipes (``DAGSTER_PIPES_CONTEXT`` set); run by hand, the
same commands print to stdout. The engine itself stays importable without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from newsmotion_engine.errors import NewsmotionError, error_record
from newsmotion_engine.render.prepare import KINDS, PreparedCaches
from newsmotion_engine.render.telemetry import LAUNCHERS, RenderTelemetry

__all__ = ["POSE_FIDELITY_CHECK", "Report", "bench_command", "main", "pose_fidelity_check", "prepare_command", "render_command"]

# The asset check pose fidelity is reported as (defined on the Dagster side).
POSE_FIDELITY_CHECK = "render_pose_fidelity"
# Pass marks for that check when the telemetry does not say its own (the pose-fidelity targets).
_PCK_PASS, _MOTION_ENERGY_PASS = 0.9, 0.8
# Progress is logged at these fractions of a clip (a log line per frame would flood the run log).
_PROGRESS_STEPS = 4


class Report(Protocol):
    """Where the entry point reports: Dagster Pipes, or stdout when run by hand."""

    def log(self, message: str) -> None: ...
    def materialization(self, metadata: dict[str, Any], data_version: str | None) -> None: ...
    def check(self, name: str, passed: bool, metadata: dict[str, Any]) -> None: ...
    def error(self, record: dict[str, Any]) -> None: ...


class _PipesReport:
    """Reports through an open ``dagster_pipes.PipesContext``."""

    def __init__(self, pipes: Any):
        self._pipes = pipes

    def log(self, message: str) -> None:
        self._pipes.log.info(message)

    def materialization(self, metadata: dict[str, Any], data_version: str | None) -> None:
        if self._pipes.is_asset_step:
            self._pipes.report_asset_materialization(metadata=metadata, data_version=data_version)

    def check(self, name: str, passed: bool, metadata: dict[str, Any]) -> None:
        if self._pipes.is_asset_step:
            self._pipes.report_asset_check(check_name=name, passed=passed, severity="WARN", metadata=metadata)

    def error(self, record: dict[str, Any]) -> None:
        # A custom message, so the orchestrator can fail the run with this line (and the same
        # error class) rather than "process failed with code 1".
        self._pipes.report_custom_message({"error": record})
        self._pipes.log.error(record["message"])


class _PrintReport:
    """Run by hand (no Pipes context): log lines and results to stdout."""

    def log(self, message: str) -> None:
        print(message, flush=True)

    def materialization(self, metadata: dict[str, Any], data_version: str | None) -> None:
        print(json.dumps({"materialization": _raw(metadata), "data_version": data_version}, default=str), flush=True)

    def check(self, name: str, passed: bool, metadata: dict[str, Any]) -> None:
        print(json.dumps({"check": name, "passed": passed, "metadata": _raw(metadata)}, default=str), flush=True)

    def error(self, record: dict[str, Any]) -> None:
        pass  # main() prints the one error line


def _raw(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: (v["raw_value"] if isinstance(v, dict) and "raw_value" in v else v) for k, v in metadata.items()}


@contextmanager
def open_report() -> Iterator[Report]:
    """A Pipes report when this process was started by Dagster Pipes, else a print report."""
    if not os.environ.get("DAGSTER_PIPES_CONTEXT"):
        yield _PrintReport()
        return
    from dagster_pipes import open_dagster_pipes  # only the entry point needs it (see module doc)

    with open_dagster_pipes() as pipes:
        yield _PipesReport(pipes)


def pose_fidelity_check(tele: RenderTelemetry) -> tuple[bool, dict[str, Any]] | None:
    """``(passed, metadata)`` of the pose-fidelity check for a render whose telemetry records
    ``pose_fidelity`` (a record or a mapping: ``pck``, ``motion_energy_ratio``, ...), else ``None``
    (nothing to report). The record's own verdict (``meets_targets``, or ``passed``) is used when it
    has one; otherwise PCK@0.05 (``pck_body``, else ``pck``) >= 0.9 and motion energy ratio >= 0.8
    pass."""
    fidelity = getattr(tele, "pose_fidelity", None)
    if fidelity is None:
        return None
    values = dataclasses.asdict(fidelity) if dataclasses.is_dataclass(fidelity) else dict(fidelity)
    verdict = values.get("meets_targets", values.get("passed"))
    if verdict is not None:
        passed = bool(verdict)
    else:
        pck = values.get("pck_body", values.get("pck"))
        energy = values.get("motion_energy_ratio")
        passed = pck is not None and energy is not None and pck >= _PCK_PASS and energy >= _MOTION_ENERGY_PASS
    # Scalars as they are; nested values (per-part scores) as JSON; unmeasured (None) left out.
    metadata: dict[str, Any] = {
        k: v if isinstance(v, (int, float, str)) else {"raw_value": v, "type": "json"}
        for k, v in values.items()
        if v is not None
    }
    metadata["render"] = f"{tele.persona_id} x {tele.loop_id}"
    return passed, metadata


def render_command(
    report: Report,
    *,
    storage_root: str | None,
    pairs: Sequence[tuple[str, str]],
    backend_name: str,
    options: dict[str, Any],
    width: int,
    height: int,
    fps: int,
    background: str,
    launcher: str,
    force: bool = False,
    keyframes: int = 1,
    fidelity: bool = True,
    fidelity_stride: int = 4,
) -> list[RenderTelemetry]:
    """Render every (persona, loop) pair with one loaded backend; report progress, the telemetry
    (as materialization metadata) and pose fidelity (as a check) through ``report``."""
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.fidelity import FidelityConfig
    from newsmotion_engine.render.job import render_persona_loop
    from newsmotion_engine.storage import Storage

    store = Storage(storage_root) if storage_root else Storage.from_env()
    spec = RenderSpec(width=width, height=height, fps=fps, background=background, keyframes=keyframes)
    fidelity_config = FidelityConfig(enabled=fidelity, stride=fidelity_stride)
    report.log(f"{launcher}: loading backend {backend_name} (pid {os.getpid()}, storage {store.root})")
    backend = get_backend(backend_name, **options)
    records: list[RenderTelemetry] = []
    try:
        backend.load()
        for persona_id, loop_id in pairs:
            report.log(f"{persona_id} x {loop_id}: rendering {width}x{height} @ {fps} fps with {backend_name}")
            tele = render_persona_loop(
                store, persona_id, loop_id, backend, spec, force=force, launcher=launcher, fidelity=fidelity_config,
                progress=_progress(report, f"{persona_id} x {loop_id}"),
            )  # fmt: skip
            records.append(tele)
            if (check := pose_fidelity_check(tele)) is not None:
                report.check(POSE_FIDELITY_CHECK, check[0], check[1])
    finally:
        backend.close()
    metadata = {
        "telemetry": {"raw_value": [t.to_dict() for t in records], "type": "json"},
        "launcher": launcher,
    }
    report.materialization(metadata, records[0].input_digest if len(records) == 1 else None)
    return records


def _progress(report: Report, label: str):
    marks: set[int] = set()

    def progress(done: int, total: int) -> None:
        step = done * _PROGRESS_STEPS // max(total, 1)
        if step not in marks and 0 < step:
            marks.add(step)
            report.log(f"{label}: {done}/{total} frames")

    return progress


def prepare_command(
    report: Report, *, storage_root: str | None, kind: str, ids: Sequence[str], backend_name: str, options: dict[str, Any],
    width: int, height: int, fps: int, background: str, launcher: str, keyframes: int = 1,
) -> PreparedCaches:  # fmt: skip
    """Build the backend's sub-caches for loops or personas; report the
    :class:`~newsmotion_engine.render.prepare.PreparedCaches` record as materialization metadata
    (``prepared``: JSON)."""
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.prepare import prepare_backend_caches
    from newsmotion_engine.storage import Storage

    store = Storage(storage_root) if storage_root else Storage.from_env()
    spec = RenderSpec(width=width, height=height, fps=fps, background=background, keyframes=keyframes)
    report.log(f"{launcher}: loading backend {backend_name} (pid {os.getpid()}, storage {store.root})")
    backend = get_backend(backend_name, **options)
    try:
        prepared = prepare_backend_caches(store, backend, spec, kind, ids, log=report.log)
    finally:
        backend.close()
    report.materialization({"prepared": {"raw_value": prepared.to_dict(), "type": "json"}}, None)
    return prepared


def bench_command(report: Report, *, out_dir: str, suites: Sequence[str], gpu_preset: str | None = None) -> dict[str, Any]:
    """Run bench suites (:data:`~newsmotion_engine.bench.suites.SUITES`; ``gpu_preset`` adds the
    GPU forward bench) into ``out_dir/{suite}.json``; report the results as materialization
    metadata (``results``: JSON)."""
    from newsmotion_engine.bench.suites import SUITES, run_suite

    folder = Path(out_dir)
    results: dict[str, Any] = {}
    for name in suites:
        if name not in SUITES:
            raise NewsmotionError(f"unknown bench suite {name!r}; known: {', '.join(SUITES)}")
        report.log(f"running bench suite {name}")
        # history/ beside the latest results: Storage.bench_history_dir (the studio's trend chart)
        results[name] = run_suite(name, folder / f"{name}.json", log=report.log, history_dir=folder / "history").to_dict()
    if gpu_preset:
        from newsmotion_engine.bench.gpu import bench_gpu_forward, forward_record

        name = f"gpu_forward_{gpu_preset}"
        report.log(f"running the GPU forward bench, preset {gpu_preset}")
        folder.mkdir(parents=True, exist_ok=True)
        result = bench_gpu_forward(preset=gpu_preset, json_path=folder / f"{name}.json", log=report.log)
        results[name] = forward_record(name, result).to_dict()  # as the file holds it
    report.materialization({"results": {"raw_value": results, "type": "json"}}, None)
    return results


def _pair(text: str) -> tuple[str, str]:
    persona, sep, loop = text.partition("/")
    if not sep or not persona or not loop:
        raise argparse.ArgumentTypeError(f"{text!r} is not PERSONA/LOOP")
    return persona, loop


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m newsmotion_engine.pipes", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="render PERSONA/LOOP pairs with one loaded backend")
    render.add_argument("pairs", nargs="+", type=_pair, metavar="PERSONA/LOOP")
    _backend_arguments(render)
    render.add_argument("--force", action="store_true", help="render even when the clip on disk is current")
    render.add_argument("--no-fidelity", action="store_true", help="do not measure pose fidelity on the clips")
    render.add_argument("--fidelity-stride", type=int, default=4, help="pose fidelity: every N-th frame re-extracted")
    prepare = commands.add_parser("prepare", help="build the backend's sub-caches for loops or personas")
    prepare.add_argument("ids", nargs="+", metavar="ID")
    prepare.add_argument("--kind", required=True, choices=KINDS, help="guidance (loops) or persona")
    _backend_arguments(prepare)
    bench = commands.add_parser("bench", help="run bench suites into a folder")
    bench.add_argument("suites", nargs="*", metavar="SUITE")
    bench.add_argument("--out-dir", required=True)
    bench.add_argument("--gpu-preset", help="also run the GPU forward bench with this preset (tiny, 14b, ...)")
    return parser


def _backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", help="storage root (default: $NEWSMOTION_STORAGE, else ./storage)")
    parser.add_argument("--backend", default="warp")
    parser.add_argument("--options", default="{}", help="the backend's options as a JSON object")
    parser.add_argument("--width", type=int, default=720)
    parser.add_argument("--height", type=int, default=1280)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--background", default="#00B140")
    parser.add_argument("--keyframes", type=int, default=1, help="sparse keyframes: generate every N-th frame (RenderSpec.keyframes)")
    parser.add_argument("--launcher", default="pipes-subprocess", choices=LAUNCHERS, help="recorded in the telemetry")


def _options(text: str) -> dict[str, Any]:
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise NewsmotionError(f"--options is not JSON ({exc})") from None
    if not isinstance(options, dict):
        raise NewsmotionError("--options must be a JSON object")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    failed: dict[str, Any] | None = None
    with open_report() as report:
        try:
            backend = dict(
                storage_root=getattr(args, "storage", None), backend_name=getattr(args, "backend", None),
                width=getattr(args, "width", None), height=getattr(args, "height", None), fps=getattr(args, "fps", None),
                background=getattr(args, "background", None), launcher=getattr(args, "launcher", None),
                keyframes=getattr(args, "keyframes", 1),
            )  # fmt: skip
            if args.command == "render":
                render_command(report, pairs=args.pairs, options=_options(args.options), force=args.force,
                               fidelity=not args.no_fidelity, fidelity_stride=args.fidelity_stride, **backend)  # fmt: skip
            elif args.command == "prepare":
                prepare_command(report, kind=args.kind, ids=args.ids, options=_options(args.options), **backend)
            else:
                bench_command(report, out_dir=args.out_dir, suites=args.suites, gpu_preset=args.gpu_preset)
        except NewsmotionError as exc:
            failed = error_record(exc)
        except Exception as exc:  # a bug: its one line goes back too; the traceback goes to stderr
            failed = error_record(exc)
            import traceback

            traceback.print_exc()
        if failed is not None:
            report.error(failed)
    if failed is not None:
        print(f"error: {failed['message']}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
