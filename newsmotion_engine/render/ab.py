"""A/B: the same persona x loop rendered by two configured backends (or two configurations of
one), then compared frame by frame (:mod:`newsmotion_engine.video.compare`).

Each side is an :class:`ABSide` (label, backend name, options as the resource / CLI give them).
Each backend is loaded, its sub-caches made current (``ensure_render_inputs``, as ``newsmotion
render`` does: the backend caches of the Dagster graph belong to the renderer resource's one
backend), rendered with :func:`render_persona_loop` to ``storage.ab_dir(persona, loop)/{label}.mp4``
(an unchanged clip is skipped by its input digest) and closed. How the two sides share the
machine is ``concurrency`` (:data:`CONCURRENCY_MODES`):

- ``"serial"``: side A loads, renders and closes, then side B. One model in memory at a time.
- ``"streams"``: both backends loaded and prepared in this process (one after the other), then
  each side renders on a thread of its own, under a CUDA stream of its own when its backend runs
  on a CUDA device (on the CPU: two threads).
- ``"processes"``: each side in a child process (multiprocessing ``spawn``); both load and
  prepare at once, and render together once both are ready; the telemetry comes back through a
  pipe.

``streams`` and ``processes`` need **both models resident on the GPU at once** (``processes``
also a CUDA context per process); serial needs the larger of the two. Whether two sides gain
anything from sharing one GPU depends on how much of it each fills: ``python -m
benchmarks.ab_concurrency`` measures the two light models of the reference design, and
``python -m benchmarks.animate2 --part multistream`` two 1.3B sides at 720x1280. The default,
:data:`DEFAULT_AB_CONCURRENCY` ``"auto"``, follows those measurements (:func:`choose_concurrency`).

Whatever the mode, the clips, their telemetry and ``comparison.json`` are the same, except for
the record of how it ran (``comparison.json``'s ``concurrency``: mode, whole wall, rendering wall
and each side's load and render seconds). A side that fails fails the A/B with its own error
(the same error class in every mode, its message prefixed with the side's label); no
``comparison.json`` is written, and one left by an earlier run is removed when a clip it
described was rendered again. The other side finishes (a render in flight is not cut off) and
keeps its clip.

    result = run_ab(storage, "anna", "nod", ABSide("v1", "wan-animate"), ABSide("v2", "wan-animate-2"), spec,
                    concurrency="streams")
    result.comparison.summary(), result.timing.render_wall_s
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from newsmotion_engine.errors import BadInputError, error_from_record, error_record
from newsmotion_engine.ids import validate_id
from newsmotion_engine.render.base import Backend, RenderSpec, get_backend
from newsmotion_engine.render.fidelity import FidelityConfig
from newsmotion_engine.render.job import (
    RenderInputs,
    check_render_request,
    ensure_render_inputs,
    render_persona_loop,
    storage_backend_options,
)
from newsmotion_engine.render.read_ahead import on_stream
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.compare import VideoComparison, compare_videos

__all__ = ["CONCURRENCY_MODES", "DEFAULT_AB_CONCURRENCY", "ABResult", "ABSide", "SideWork", "SidesRun", "SidesTiming",
           "choose_concurrency", "run_ab", "run_sides"]  # fmt: skip

COMPARISON_NAME = "comparison.json"
CONCURRENCY_MODES = ("serial", "streams", "processes")
# "auto" picks per pair (choose_concurrency): what the GPU measurements found fastest.
DEFAULT_AB_CONCURRENCY = "auto"
# Sides measured light enough to share a GPU: echomimic-v3 (1.3B, one preset) and the Wan
# backends' small presets; warp runs on the CPU.
_LIGHT_BACKENDS = frozenset({"warp", "echomimic-v3"})
_LIGHT_PRESETS = frozenset({"tiny", "1.3b"})


def choose_concurrency(a: "ABSide", b: "ABSide") -> str:
    """``"auto"``'s choice for a pair: two streams when both sides are light (echomimic-v3, warp,
    or a ``tiny`` / ``1.3b`` preset without a model folder), serial otherwise.

    Measured: two light models on an H100 render 1.065x faster on two streams than serial (8.38 s
    vs 8.93 s; two processes 0.97x; ``benchmarks/results/ab_concurrency_h100.json``; that run's
    GPU work still shared the default stream, see docs/ab.md). Two sides that
    each fill the GPU gain nothing (1.00x; ``wan_animate_2_multistream_h200.json``) and would hold
    both models at once, which two 14B models do not fit on an 80 GB card."""

    def light(side: ABSide) -> bool:
        if side.backend in _LIGHT_BACKENDS:
            return True
        return not side.options.get("model_path") and str(side.options.get("preset", "")).lower() in _LIGHT_PRESETS

    return "streams" if light(a) and light(b) else "serial"


@dataclass(frozen=True)
class ABSide:
    """One side: a slug ``label`` (the clip's file name), a registered backend and its options."""

    label: str
    backend: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_id(self.label, "A/B label")


# ------------------------------------------------------------------ two sides, three ways
class SideWork(Protocol):
    """What one side does. In ``processes`` mode the object is pickled into a child process, so
    it must pickle and its class be importable there."""

    label: str

    def setup(self) -> Backend:
        """Build, load and prepare the side's backend; close it again before raising."""
        ...

    def run(self, backend: Backend) -> Any:
        """Render with the loaded backend; the result must pickle."""
        ...


@dataclass(frozen=True)
class SidesTiming:
    """How two sides ran: ``wall_s`` the whole run (loads, preparations, renders),
    ``render_wall_s`` the rendering (serial: the two renders' sum; streams / processes: from both
    starting to the last one done), ``sides``: label -> ``{"setup_s", "render_s"}``."""

    mode: str
    wall_s: float
    render_wall_s: float
    sides: dict[str, dict[str, float]]

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "wall_s": self.wall_s, "render_wall_s": self.render_wall_s, "sides": self.sides}


@dataclass
class SidesRun:
    """What :func:`run_sides` gives back: each finished side's result, each failed side's error
    (already carrying its label), and the timing."""

    results: dict[str, Any]
    errors: dict[str, BaseException]
    timing: SidesTiming

    def raise_failure(self, order: Sequence[str]) -> None:
        """Raise the first failed side's error in ``order`` (no-op when none failed)."""
        for label in order:
            if label in self.errors:
                raise self.errors[label]


def run_sides(works: Sequence[SideWork], concurrency: str) -> SidesRun:
    """Set up and run each of ``works`` ``"serial"``-ly, on ``"streams"`` or in ``"processes"``
    (module docstring). A failing side does not raise here: its error is in ``errors`` (serial
    stops at the first). Raises ``ValueError`` for an unknown mode."""
    if concurrency not in CONCURRENCY_MODES:
        raise ValueError(f"concurrency {concurrency!r}: use one of {', '.join(CONCURRENCY_MODES)}")
    return {"serial": _run_serial, "streams": _run_streams, "processes": _run_processes}[concurrency](works)


def _side_error(label: str, exc: BaseException | None = None, record: dict[str, Any] | None = None) -> BaseException:
    """The error a failed side fails the A/B with: the same :class:`NewsmotionError` class, its
    message prefixed with the label (rebuilt through its record, so in-process and child errors
    read alike); anything else (a bug) as a ``RuntimeError`` carrying the original's text."""
    record = dict(record if record is not None else error_record(exc))  # type: ignore[arg-type]
    record["message"] = f"A/B side {label!r}: {record['message']}"
    detail = f"\n{record['traceback']}" if record.get("traceback") else ""
    error = error_from_record(record) or RuntimeError(f"{record['message']} ({record['kind']}){detail}")
    error.__cause__ = exc
    return error


def _setup(work: SideWork, timing: dict[str, dict[str, float]]) -> Backend:
    t0 = time.perf_counter()
    backend = work.setup()
    timing[work.label] = {"setup_s": round(time.perf_counter() - t0, 3)}
    return backend


def _timed_run(work: SideWork, backend: Backend, timing: dict[str, dict[str, float]]) -> Any:
    t0 = time.perf_counter()
    try:
        stream = _side_stream(backend)
        with on_stream(stream):  # read-ahead's worker carries it over
            result = work.run(backend)
            if stream is not None:
                stream.synchronize()  # its queued work belongs to this side's time
        return result
    finally:
        timing[work.label]["render_s"] = round(time.perf_counter() - t0, 3)


def _side_stream(backend: Backend) -> Any:
    """A new CUDA stream on the device the backend runs on (its components' ``device``), or
    ``None`` off CUDA. The device is synchronized first, so the stream sees the loaded weights."""
    device = getattr(getattr(backend, "components", None), "device", None)
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    torch.cuda.synchronize(device)
    return torch.cuda.Stream(device)


def _timing(mode: str, t0: float, sides: dict[str, dict[str, float]], render_wall_s: float) -> SidesTiming:
    return SidesTiming(mode, round(time.perf_counter() - t0, 3), round(render_wall_s, 3), sides)


def _run_serial(works: Sequence[SideWork]) -> SidesRun:
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    sides: dict[str, dict[str, float]] = {}
    for work in works:
        try:
            backend = _setup(work, sides)
        except Exception as exc:
            errors[work.label] = _side_error(work.label, exc)
            break
        try:
            results[work.label] = _timed_run(work, backend, sides)
        except Exception as exc:
            errors[work.label] = _side_error(work.label, exc)
            break
        finally:
            backend.close()  # before the other side loads: one model in memory at a time
    return SidesRun(results, errors, _timing("serial", t0, sides, sum(s.get("render_s", 0.0) for s in sides.values())))


def _run_streams(works: Sequence[SideWork]) -> SidesRun:
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    sides: dict[str, dict[str, float]] = {}
    backends: dict[str, Backend] = {}
    render_wall = 0.0
    try:
        # Loads one after the other on this thread: a backend's random weights come from the
        # global RNG, which two loading threads would interleave.
        for work in works:
            try:
                backends[work.label] = _setup(work, sides)
            except Exception as exc:
                errors[work.label] = _side_error(work.label, exc)
                return SidesRun(results, errors, _timing("streams", t0, sides, 0.0))

        def render(work: SideWork) -> None:
            try:
                results[work.label] = _timed_run(work, backends[work.label], sides)
            except Exception as exc:  # raised by the caller, on its own thread
                errors[work.label] = _side_error(work.label, exc)

        threads = [threading.Thread(target=render, args=(w,), name=f"newsmotion-ab-{w.label}") for w in works]
        t_render = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        render_wall = time.perf_counter() - t_render
    finally:
        for backend in backends.values():
            backend.close()
    return SidesRun(results, errors, _timing("streams", t0, sides, render_wall))


def _child_record(exc: BaseException) -> dict[str, Any]:
    return {**error_record(exc), "traceback": traceback.format_exc()}


def _side_process(work: SideWork, conn: Any) -> None:
    """A child's whole life in ``processes`` mode: set up, say ready, wait for "go", render, send
    the result. Module level: ``spawn`` imports it by name."""
    backend = None
    try:
        t0 = time.perf_counter()
        try:
            backend = work.setup()
        except BaseException as exc:
            conn.send(("error", _child_record(exc), time.perf_counter() - t0))
            return
        conn.send(("ready", None, time.perf_counter() - t0))
        if conn.recv() != "go":
            return
        t0 = time.perf_counter()
        try:
            result = work.run(backend)
            conn.send(("done", result, time.perf_counter() - t0))
        except BaseException as exc:
            conn.send(("error", _child_record(exc), time.perf_counter() - t0))
    finally:
        if backend is not None:
            backend.close()
        conn.close()


def _receive(proc: Any, conn: Any, phase: str) -> tuple[str, Any, float]:
    """The child's next message; a child that died without one is an error message too."""
    while not conn.poll(0.2):
        if not proc.is_alive() and not conn.poll():
            break
    try:
        return conn.recv()
    except (EOFError, OSError):
        proc.join(5)
        record = {"kind": "ChildProcessError", "bases": [], "message": f"its process ended (exit code {proc.exitcode}) while {phase}"}
        return ("error", record, 0.0)


def _run_processes(works: Sequence[SideWork]) -> SidesRun:
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold a CUDA context
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    sides: dict[str, dict[str, float]] = {w.label: {} for w in works}
    children: dict[str, tuple[Any, Any]] = {}
    render_wall = 0.0
    try:
        for work in works:
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=_side_process, args=(work, child_end), name=f"newsmotion-ab-{work.label}")
            proc.start()
            child_end.close()
            children[work.label] = (proc, parent_end)
        for label, (proc, conn) in children.items():
            kind, payload, seconds = _receive(proc, conn, "loading")
            sides[label]["setup_s"] = round(seconds, 3)
            if kind == "error":
                errors[label] = _side_error(label, record=payload)
        if errors:
            for label, (_proc, conn) in children.items():
                if label not in errors:
                    conn.send("stop")
            return SidesRun(results, errors, _timing("processes", t0, sides, 0.0))
        t_render = time.perf_counter()
        for _proc, conn in children.values():
            conn.send("go")
        for label, (proc, conn) in children.items():
            kind, payload, seconds = _receive(proc, conn, "rendering")
            sides[label]["render_s"] = round(seconds, 3)
            if kind == "done":
                results[label] = payload
            else:
                errors[label] = _side_error(label, record=payload)
        render_wall = time.perf_counter() - t_render
    except BaseException:  # interrupted: the children's work is not wanted any more
        for proc, _conn in children.values():
            proc.terminate()
        raise
    finally:
        for proc, conn in children.values():
            proc.join()  # each has sent its last message: it only closes its backend now
            conn.close()
    return SidesRun(results, errors, _timing("processes", t0, sides, render_wall))


# ------------------------------------------------------------------ the A/B of two renders
@dataclass
class ABResult:
    clips: dict[str, Path]
    telemetry: dict[str, RenderTelemetry]
    comparison: VideoComparison
    path: Path
    timing: SidesTiming


@dataclass
class _RenderSide:
    """One side of :func:`run_ab` as a :class:`SideWork` (pickled into the child in ``processes``)."""

    side: ABSide
    storage: Storage
    persona_id: str
    loop_id: str
    spec: RenderSpec
    out: Path
    force: bool
    fidelity: FidelityConfig
    inputs: RenderInputs | None = None

    @property
    def label(self) -> str:
        return self.side.label

    def backend(self) -> Backend:
        """The side's backend, constructed (cheap: this validates its options) but not loaded."""
        return get_backend(self.side.backend, **storage_backend_options(self.storage, self.side.options))

    def setup(self) -> Backend:
        backend = self.backend()
        try:
            backend.load()
            self.inputs = ensure_render_inputs(self.storage, self.persona_id, self.loop_id, backend, self.spec)
        except BaseException:
            backend.close()
            raise
        return backend

    def run(self, backend: Backend) -> RenderTelemetry:
        return render_persona_loop(self.storage, self.persona_id, self.loop_id, backend, self.spec, inputs=self.inputs,
                                   out_path=self.out, force=self.force, fidelity=self.fidelity)  # fmt: skip


def run_ab(storage: Storage, persona_id: str, loop_id: str, a: ABSide, b: ABSide, spec: RenderSpec, *, force: bool = False,
           concurrency: str = DEFAULT_AB_CONCURRENCY, fidelity: FidelityConfig = FidelityConfig(),
           log: Callable[[str], None] = lambda _msg: None) -> ABResult:  # fmt: skip
    """Render both sides (``concurrency``: ``"serial"``, ``"streams"`` or ``"processes"``, see
    the module docstring, or ``"auto"``: :func:`choose_concurrency`'s pick for the pair), compare,
    write ``comparison.json`` (atomically).

    Bad labels, an unknown mode, either side's backend options and unknown ids raise before
    anything is loaded or written; a side failing later raises its error (module docstring).
    ``fidelity``: the pose-fidelity measurement of each new clip (as ``render_persona_loop``'s).
    """
    out_dir = storage.ab_dir(persona_id, loop_id)
    if a.label == b.label:
        raise BadInputError(Path(out_dir), f"both A/B sides are labelled {a.label!r}; give two labels")
    if concurrency == "auto":
        concurrency = choose_concurrency(a, b)
        log(f"concurrency auto -> {concurrency}")
    if concurrency not in CONCURRENCY_MODES:
        raise BadInputError(Path(out_dir), f"A/B concurrency {concurrency!r}: use auto or one of {', '.join(CONCURRENCY_MODES)}")
    works = [_RenderSide(s, storage, persona_id, loop_id, spec, out_dir / f"{s.label}.mp4", force, fidelity) for s in (a, b)]
    for work in works:
        work.backend()  # both sides' options validated before any load
    check_render_request(storage, persona_id, loop_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = run_sides(works, concurrency)
    tele: dict[str, RenderTelemetry] = run.results
    for work in works:
        if work.label in tele:
            log(f"{work.label} ({work.side.backend}): {tele[work.label].outcome} -> {work.out} [{concurrency}]")
    if run.errors:
        if any(t.outcome == "rendered" for t in tele.values()):
            (out_dir / COMPARISON_NAME).unlink(missing_ok=True)  # it described a clip that was just replaced
        run.raise_failure([a.label, b.label])
    clips = {w.label: w.out for w in works}
    comparison = compare_videos(clips[a.label], clips[b.label], labels=(a.label, b.label))
    comparison.extra = {
        "persona": persona_id,
        "loop": loop_id,
        "sides": {s.label: {"backend": s.backend, "options": {k: str(v) for k, v in s.options.items()},
                            "weights": tele[s.label].weights, "input_digest": tele[s.label].input_digest}
                  for s in (a, b)},  # fmt: skip
        "concurrency": run.timing.as_dict(),
    }
    path = comparison.write(out_dir / COMPARISON_NAME)
    return ABResult(clips, tele, comparison, path, run.timing)
