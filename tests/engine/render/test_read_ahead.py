import threading
import time

import pytest

from newsmotion_engine.render.read_ahead import ordered_map, read_ahead


def test_same_items_in_order():
    assert list(read_ahead(iter(range(50)), 4)) == list(range(50))


def test_runs_ahead_of_the_consumer():
    made = []

    def source():
        for i in range(5):
            made.append(i)
            yield i

    items = read_ahead(source(), 8)
    assert next(items) == 0
    deadline = time.monotonic() + 5
    while len(made) < 5 and time.monotonic() < deadline:  # the worker goes on while we hold item 0
        time.sleep(0.01)
    assert made == [0, 1, 2, 3, 4]
    assert list(items) == [1, 2, 3, 4]


def test_source_error_reaches_the_consumer():
    def source():
        yield 1
        raise KeyError("boom")

    items = read_ahead(source(), 2)
    assert next(items) == 1
    with pytest.raises(KeyError, match="boom"):
        next(items)


def test_closing_stops_the_worker_and_closes_the_source():
    closed = threading.Event()

    def source():
        try:
            for i in range(10_000):
                yield i
        finally:
            closed.set()

    items = read_ahead(source(), 2)
    assert next(items) == 0
    items.close()
    assert closed.is_set()
    assert not any(t.name == "read-ahead" and t.is_alive() for t in threading.enumerate())


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        next(read_ahead(iter([1]), 0))


def test_the_worker_runs_on_the_callers_cuda_stream(monkeypatch):
    """A render on its own CUDA stream (an A/B side) keeps its GPU work there: the stream current
    where read_ahead is called is entered by the worker thread (stand-ins: no GPU here)."""
    import contextlib

    from newsmotion_engine.render import read_ahead as module

    entered = []

    @contextlib.contextmanager
    def on_stream(stream):
        entered.append((stream, threading.current_thread().name))
        yield

    monkeypatch.setattr(module, "current_cuda_stream", lambda: "side-b-stream")
    monkeypatch.setattr(module, "on_stream", on_stream)
    assert list(read_ahead(iter(range(3)), 2, name="side-b")) == [0, 1, 2]
    assert entered == [("side-b-stream", "side-b")]


def test_without_torch_imported_there_is_no_stream_to_carry(monkeypatch):
    import sys

    from newsmotion_engine.render.read_ahead import current_cuda_stream

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert current_cuda_stream() is None


def test_ordered_map_hands_out_in_order_and_reads_its_items_only_a_bounded_way_ahead():
    """Results come in the items' order whichever thread finishes first, and at most
    ``2 * workers`` items are taken before the first result is handed out."""
    taken = []

    def items():
        for i in range(40):
            taken.append(i)
            yield i

    def slow_for_evens(i):
        time.sleep(0.01 if i % 2 == 0 else 0.0)
        return i * i

    out = ordered_map(slow_for_evens, items(), 3)
    assert next(out) == 0 and len(taken) == 6
    assert list(out) == [i * i for i in range(1, 40)]


def test_ordered_map_raises_the_function_error_in_the_consumer():
    def fail_on_3(i):
        if i == 3:
            raise ValueError("bad frame 3")
        return i

    with pytest.raises(ValueError, match="bad frame 3"):
        list(ordered_map(fail_on_3, range(10), 2))
