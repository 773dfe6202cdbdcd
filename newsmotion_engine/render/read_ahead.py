"""Run a frame generator ahead of its consumer on a worker thread (:func:`read_ahead`), and map
a function over frames on a few threads, in order (:func:`ordered_map`).

A diffusion backend makes a clip segment by segment: a segment's frames all arrive at once after
its decode, then nothing while the next segment denoises on the GPU. Pulled from the caller's
thread, the next segment starts only after the consumer (the chroma matte, the mp4 writer) has
taken every frame of the previous one, so the CPU work and the GPU work take turns. Read ahead,
the worker thread starts the next segment as soon as the previous one's frames are queued, and the
consumer works through them meanwhile; the frames, their order and their values are the same.

The queue holds at most ``limit`` items (a segment's frames plus what the consumer has in flight);
closing the consumer stops the worker after the item it is making (GPU work cannot be interrupted
mid-call) and closes the source; an exception in the source is raised in the consumer's thread.

Thread-local state does not travel by itself: the source sets its own ``torch.no_grad()`` (the Wan
backends do), and CUDA-graph trees, recorded per thread, are not used with it (the backends keep a
render in the caller's thread when compile records CUDA graphs). The current CUDA stream is
carried over: the worker runs on the stream that was current where ``read_ahead`` was called, so a
render on its own stream (an A/B side, ``render/ab.py``) keeps its GPU work there instead of the
default stream, which would serialize it with every other stream.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ordered_map", "read_ahead"]

T = TypeVar("T")
R = TypeVar("R")
_POLL_S = 0.1  # how often a worker blocked on a full queue looks for a stop


@dataclass(frozen=True)
class _End:
    """The source is exhausted (``error`` None) or raised ``error``."""

    error: BaseException | None = None


def current_cuda_stream() -> object | None:
    """The calling thread's current CUDA stream, or None where torch is not imported or CUDA not
    initialized (nothing to carry: no import here, so CPU-only callers never load torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.current_stream()


def on_stream(stream: object | None) -> contextlib.AbstractContextManager:
    """``torch.cuda.stream(stream)``, or nothing for None."""
    if stream is None:
        return contextlib.nullcontext()
    return sys.modules["torch"].cuda.stream(stream)


def read_ahead(source: Iterator[T], limit: int, *, name: str = "read-ahead") -> Iterator[T]:
    """Yield ``source``'s items, produced on a worker thread up to ``limit`` ahead (on the CUDA
    stream current here, see the module docstring)."""
    if limit < 1:
        raise ValueError(f"read_ahead limit {limit}: use 1 or more")
    stream = current_cuda_stream()
    items: queue.Queue = queue.Queue(maxsize=limit)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            with on_stream(stream):
                for item in source:
                    if not put(item):
                        return
            put(_End())
        except BaseException as exc:  # everything reaches the consumer, which re-raises it
            put(_End(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        stop.set()
        worker.join()


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int, *, name: str = "ordered-map") -> Iterator[R]:
    """``fn(item)`` for each of ``items`` on up to ``workers`` threads, handed out in the items'
    order. At most ``2 * workers`` results are in flight, and ``items`` is read only as they are
    handed out, so a stream of frames stays a stream. For work that releases the GIL (NumPy,
    OpenCV, torch): the chroma matte, champ's guidance maps."""
    pending: collections.deque = collections.deque()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=name) as pool:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * max(1, workers):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
