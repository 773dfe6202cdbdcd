"""The 3-stage render queue: CPU preparation, GPU denoise, decode + infill + encode, overlapped.

A diffusion render is three kinds of work with different resources:

1. **prepare** (CPU): load the sub-caches, build the face video (the warp backend's frames),
   draw the noise — ``backend.plan_clip``;
2. **denoise** (GPU, main stream): every segment's denoising loop — ``backend.denoise_clip_segment``;
   segments of one clip in order; a continuation segment starts from what the previous segment
   left (wan-animate: its decoded tail, VAE-encoded), so it waits until the clip's work says it is
   there (``work.wait_ready(k, timeout)``, when the work has it);
3. **finish** (GPU decode on a second CUDA stream, then the CPU): VAE decode
   (``backend.decode_clip_segment``), the sparse-keyframe infill and the encoder — the ordinary
   :func:`~newsmotion_engine.render.clip.render_clip`, which writes the mp4 and its telemetry.
   A backend may stream its decode (wan-animate: a few frames at a time, the next ones decoding
   while the infill and the encoder take these), so this stage's CPU work overlaps its GPU work.

Run one after the other, the GPU waits while a clip is prepared and while its frames are infilled
and encoded. :func:`render_queue` runs them as a pipeline: while segment ``k`` denoises, the CPU
infills and encodes ``k - 1``'s frames, and clip ``j + 1`` is prepared while clip ``j`` denoises.
Decode and denoise overlap where nothing orders them: a backend whose segments continue from the
previous segment's latents decodes ``k - 1`` while ``k`` denoises; wan-animate's trained
continuation reads segment ``k - 1``'s decoded frames, so within a clip segment ``k`` denoises after
``k - 1``'s decode, and only a clip's last decode overlaps the next clip's first denoise. Bounded
queues keep at most one prepared clip and two denoised segments waiting (memory stays that of
about one clip). The renderer resource owns the queue (``RendererResource.render_queue``).

A backend without the three stage methods (the warp backend renders frames on the CPU, its
encoder already overlaps in a writer thread) renders its clips one after the other.

Errors: the first failure of any stage stops the queue, the clip in flight leaves nothing at its
target (``render_clip``'s guarantee), clips finished before it stay, and the error propagates with
its own message. ``QueueReport.gpu_idle_fraction`` is the share of the wall time in which no GPU
stage was running (from the stages' host-side timeline: every GPU stage synchronizes at its end,
except a streamed decode, whose chunks the backend places by their GPU time).

Example::

    report = render_queue(backend, [RenderJob(loop, persona, spec, out) for loop in loops])
    report.clips_per_hour, report.gpu_idle_fraction, [t.output for t in report.telemetry]
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.base import Backend, RenderSpec
from newsmotion_engine.render.clip import clip_driving_keypoints, render_clip
from newsmotion_engine.render.telemetry import RenderProvenance, RenderTelemetry

__all__ = ["QueueReport", "RenderJob", "is_staged", "render_queue"]

_STAGES = ("plan_clip", "denoise_clip_segment", "decode_clip_segment")
_POLL_S = 0.2  # how often a blocked stage looks whether another one failed


@dataclass(frozen=True)
class RenderJob:
    """One clip for the queue: what :func:`render_clip` takes."""

    guidance: Any
    persona: Any
    spec: RenderSpec
    out_path: Path
    provenance: RenderProvenance | None = None


@dataclass
class QueueReport:
    """What a queue run did: each clip's telemetry (in job order), wall seconds, seconds some GPU
    stage was running, the idle share of the wall time, clips per hour, and the mode."""

    telemetry: list[RenderTelemetry]
    mode: str
    wall_s: float
    gpu_busy_s: float | None
    gpu_idle_fraction: float | None
    clips_per_hour: float
    stage_s: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "clips": len(self.telemetry), "wall_s": round(self.wall_s, 3),
                "gpu_busy_s": None if self.gpu_busy_s is None else round(self.gpu_busy_s, 3),
                "gpu_idle_fraction": None if self.gpu_idle_fraction is None else round(self.gpu_idle_fraction, 4),
                "clips_per_hour": round(self.clips_per_hour, 1), "stage_s": {k: round(v, 3) for k, v in self.stage_s.items()}}  # fmt: skip


def is_staged(backend: Any) -> bool:
    """Whether ``backend`` offers the three stage methods the pipeline overlaps."""
    return all(callable(getattr(backend, name, None)) for name in _STAGES)


class _Failure:
    """A stage's exception travelling through a queue to the stage that must raise it."""

    def __init__(self, error: BaseException):
        self.error = error


class _StageView:
    """The backend as ``render_clip`` sees it inside the queue: ``frames()`` yields the frames of
    the segments the denoise stage hands over, decoding each on the decode stream."""

    def __init__(self, backend: Any, work: Any, segments: queue.Queue | None, stream: Any) -> None:
        self._backend, self._work, self._segments, self._stream = backend, work, segments, stream
        self.name, self.needs = backend.name, backend.needs

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return self._backend.describe()

    def frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        from newsmotion_engine.render.chroma import composite_frames

        # The green screen the backend's own frames() applies (chroma="matte" unless "off"): a
        # clip through the queue is the same clip as one rendered directly.
        mode = getattr(getattr(self._backend, "options", None), "chroma", "off")
        yield from composite_frames(self._decoded(keypoints), spec.background, mode)

    def _decoded(self, keypoints: np.ndarray) -> Iterator[np.ndarray]:
        work = self._work
        if len(keypoints) != work.frames:
            raise RuntimeError(f"the queue prepared {work.frames} driving frames, render_clip asks for {len(keypoints)}")
        for k in range(work.plan.segments):
            if self._segments is None:  # serial: denoise right here
                latents, event = self._backend.denoise_clip_segment(work, k), None
            else:
                item = self._segments.get()
                if isinstance(item, _Failure):
                    raise item.error
                _, latents, event = item
            self._wait_for(latents, event)
            yield from self._backend.decode_clip_segment(work, k, latents)

    def _wait_for(self, latents: Any, event: Any) -> None:
        """Order the decode stream (the finish thread's current one) after the denoise stream."""
        if self._stream is None:
            return
        self._stream.wait_event(event)  # the latents were written on the denoise stream
        latents.record_stream(self._stream)  # ... and are read here: keep their memory until done


def _put(q: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put ``item``, giving up (``False``) once another stage has failed."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def render_queue(
    backend: Backend,
    jobs: Sequence[RenderJob],
    *,
    pipelined: bool = True,
    on_done: Callable[[RenderJob, RenderTelemetry], None] | None = None,
    **clip_kwargs: Any,
) -> QueueReport:
    """Render ``jobs`` with ``backend``: pipelined (default) or serially, through the same stages.

    Args:
        backend: a loaded (or loadable) backend; staged (:func:`is_staged`) for the overlap.
        jobs: the clips, rendered and reported in this order.
        pipelined: ``False`` runs every stage of every clip one after the other (the baseline).
        on_done: called with each finished clip's telemetry as soon as it is written (so an
            orchestrator records each clip when it completes, not when the batch ends).
        clip_kwargs: passed to :func:`render_clip` (``encoder``, ``sink``, ...).

    Raises:
        The first stage failure, as raised by that stage.
    """
    backend.load()
    t_start = time.perf_counter()
    results: list[RenderTelemetry] = []
    works: list[Any] = []
    staged = is_staged(backend)

    def finish(job: RenderJob, view: Any) -> None:
        tele = render_clip(job.guidance, job.persona, view, job.spec, job.out_path, provenance=job.provenance, **clip_kwargs)
        results.append(tele)
        if on_done is not None:
            on_done(job, tele)

    if not staged or not pipelined:
        for job in jobs:
            if staged:
                work = backend.plan_clip(job.guidance, job.persona, clip_driving_keypoints(job.guidance, job.persona, job.spec), job.spec)
                works.append(work)
                finish(job, _StageView(backend, work, None, None))
            else:
                finish(job, backend)
        return _report(results, works, "serial" if staged else "serial (not staged)", t_start, staged)
    _pipeline(backend, jobs, works, finish)
    return _report(results, works, "pipelined", t_start, staged)


def _pipeline(backend: Any, jobs: Sequence[RenderJob], works: list[Any], finish: Callable[[RenderJob, Any], None]) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    prepared: queue.Queue = queue.Queue(maxsize=1)  # at most one clip prepared ahead
    finishing: queue.Queue = queue.Queue()  # clips handed to the finish stage, in order
    stream = _decode_stream(backend)

    def prepare() -> None:
        try:
            for job in jobs:
                kp = clip_driving_keypoints(job.guidance, job.persona, job.spec)
                work = backend.plan_clip(job.guidance, job.persona, kp, job.spec)
                if not _put(prepared, (job, work), stop):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the denoise stage, which raises it
            _put(prepared, _Failure(exc), stop)
            return
        _put(prepared, None, stop)

    def finish_all() -> None:
        while True:
            item = finishing.get()
            if item is None:
                return
            job, work, segments = item
            try:
                # Decode, infill and the sink all run on the decode stream: on the denoise stream
                # (the thread's default) their GPU work would queue behind the next denoise.
                with _on(stream):
                    finish(job, _StageView(backend, work, segments, stream))
            except BaseException as exc:  # noqa: BLE001 - re-raised by render_queue
                errors.append(exc)
                stop.set()
                return

    threads = [threading.Thread(target=prepare, name="newsmotion-queue-prepare", daemon=True),
               threading.Thread(target=finish_all, name="newsmotion-queue-finish", daemon=True)]  # fmt: skip
    for t in threads:
        t.start()
    try:
        while not stop.is_set():
            try:
                item = prepared.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item is None:
                break
            if isinstance(item, _Failure):
                raise item.error
            job, work = item
            works.append(work)
            segments: queue.Queue = queue.Queue(maxsize=2)  # two denoised segments waiting at most
            finishing.put((job, work, segments))
            ready = getattr(work, "wait_ready", None)  # a continuation that needs the previous decode
            for k in range(work.plan.segments):
                while ready is not None and not stop.is_set() and not ready(k, _POLL_S):
                    pass
                if stop.is_set():
                    break
                try:
                    latents = backend.denoise_clip_segment(work, k)
                except BaseException as exc:
                    _put(segments, _Failure(exc), stop)  # the clip in flight fails with the same error
                    raise
                _put(segments, (k, latents, _record_event(stream)), stop)
    except BaseException as exc:
        errors.insert(0, exc)
        stop.set()
    finally:
        finishing.put(None)
        threads[1].join()
        stop.set()  # the prepare stage may be waiting to hand over a clip nobody will take
        threads[0].join()
    if errors:
        raise errors[0]


def _on(stream: Any) -> Any:
    """``torch.cuda.stream(stream)``, or nothing on the CPU."""
    if stream is None:
        return contextlib.nullcontext()
    import torch

    return torch.cuda.stream(stream)


def _decode_stream(backend: Any) -> Any:
    """A second CUDA stream for the decode stage (``None`` on the CPU)."""
    device = getattr(getattr(backend, "components", None), "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return None
    import torch

    return torch.cuda.Stream(device=device)


def _record_event(stream: Any) -> Any:
    if stream is None:
        return None
    import torch

    event = torch.cuda.Event()
    event.record()  # on the current (denoise) stream
    return event


def _report(results: list[RenderTelemetry], works: list[Any], mode: str, t_start: float, staged: bool) -> QueueReport:
    wall = time.perf_counter() - t_start
    stage_s: dict[str, float] = {}
    intervals = []
    for work in works:
        for stage, a, b in work.timeline:
            stage_s[stage] = stage_s.get(stage, 0.0) + (b - a)
            intervals.append((a, b))
    busy = _busy_seconds(intervals) if staged else None
    idle = max(0.0, 1.0 - busy / wall) if busy is not None and wall > 0 else None
    return QueueReport(results, mode, wall, busy, idle, 3600.0 * len(results) / wall if wall > 0 else 0.0, stage_s)
