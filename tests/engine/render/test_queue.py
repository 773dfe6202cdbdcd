"""The 3-stage render queue: same clips as serial, stages overlap, ordering, and the error path."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pytest

from newsmotion_engine.render import BackendNeeds, RenderSpec, get_backend
from newsmotion_engine.render.clip import render_clip
from newsmotion_engine.render.queue import RenderJob, is_staged, render_queue
from newsmotion_engine.videoio import iter_frames

SPEC = RenderSpec(64, 128)


@dataclass
class _Plan:
    segments: int


@dataclass
class _Work:
    clip: str
    frames: int
    plan: _Plan
    timeline: list = field(default_factory=list)


class _Staged:
    """A staged backend: each segment is 4 frames of one grey level; records every stage call.
    ``fail`` = (stage, clip, segment) raises there; ``wait_for_prepare`` makes the first clip's
    first denoise wait until the second clip was prepared (proves the stages overlap)."""

    name = "staged"
    needs = BackendNeeds()

    def __init__(self, fail=None, wait_for_prepare=False):
        self.calls, self.fail = [], fail
        self.prepared = {}
        self.wait = wait_for_prepare
        self.lock = threading.Lock()

    def load(self):
        pass

    def close(self):
        pass

    def describe(self):
        return {"weights": "none"}

    def _log(self, *call):
        with self.lock:
            self.calls.append(call)
        if self.fail == call:
            raise RuntimeError(f"{call[0]} failed on {call[1]} segment {call[2]}")

    def plan_clip(self, guidance, persona, keypoints, spec):
        self._log("plan", guidance.loop_id, None)
        self.prepared[guidance.loop_id] = threading.Event()
        self.prepared[guidance.loop_id].set()
        return _Work(guidance.loop_id, len(keypoints), _Plan(-(-len(keypoints) // 4)))

    def denoise_clip_segment(self, work, k):
        if self.wait and (work.clip, k) == ("a", 0):
            for _ in range(100):  # up to 5 s: the next clip must be prepared meanwhile
                if "b" in self.prepared:
                    break
                threading.Event().wait(0.05)
        self._log("denoise", work.clip, k)
        return 40 * k + (0 if work.clip == "a" else 100)

    def decode_clip_segment(self, work, k, latents):
        self._log("decode", work.clip, k)
        for j in range(4):
            if 4 * k + j < work.frames:
                yield np.full((SPEC.height, SPEC.width, 3), latents, np.uint8)

    def frames(self, guidance, persona, keypoints, spec):
        work = self.plan_clip(guidance, persona, keypoints, spec)
        for k in range(work.plan.segments):
            yield from self.decode_clip_segment(work, k, self.denoise_clip_segment(work, k))


def _jobs(synth, persona, tmp_path, names=("a", "b")):
    jobs = []
    for name in names:
        loop = synth.make_loop(10)
        loop.loop_id = name
        jobs.append(RenderJob(loop, persona, SPEC, tmp_path / f"{name}.mp4"))
    return jobs


def _levels(path):
    """Each frame's grey level, to the nearest 20 (h264 moves flat colours by a level or two)."""
    return [int(round(f[..., 0].mean() / 20) * 20) for f in iter_frames(path)]


@pytest.mark.parametrize("pipelined", [True, False])
def test_queue_renders_every_clip_in_order(tmp_path, synth, persona, pipelined):
    backend = _Staged()
    done = []
    report = render_queue(backend, _jobs(synth, persona, tmp_path), pipelined=pipelined, on_done=lambda j, t: done.append(j.out_path.name))
    assert [t.output for t in report.telemetry] == [str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4")]
    assert done == ["a.mp4", "b.mp4"]  # each clip reported as it finished
    assert _levels(tmp_path / "a.mp4") == [0] * 4 + [40] * 4 + [80] * 2
    assert _levels(tmp_path / "b.mp4") == [100] * 4 + [140] * 4 + [180] * 2
    for clip in "ab":  # a clip's segments denoise in order, each decoded after its denoise
        seq = [c for c in backend.calls if c[1] == clip]
        assert [c[2] for c in seq if c[0] == "denoise"] == [0, 1, 2]
        assert all(seq.index(("denoise", clip, k)) < seq.index(("decode", clip, k)) for k in range(3))
    assert report.mode == ("pipelined" if pipelined else "serial") and report.clips_per_hour > 0


def test_pipelined_prepares_the_next_clip_while_one_denoises(tmp_path, synth, persona):
    backend = _Staged(wait_for_prepare=True)
    render_queue(backend, _jobs(synth, persona, tmp_path))
    assert backend.calls.index(("plan", "b", None)) < backend.calls.index(("denoise", "a", 0))


def test_serial_prepares_after_the_previous_clip(tmp_path, synth, persona):
    backend = _Staged()
    render_queue(backend, _jobs(synth, persona, tmp_path), pipelined=False)
    assert backend.calls.index(("plan", "b", None)) > backend.calls.index(("decode", "a", 2))


@pytest.mark.parametrize("fail", [("denoise", "b", 1), ("decode", "b", 1), ("plan", "b", None), ("denoise", "a", 0)])
def test_a_failing_stage_fails_with_its_message_and_leaves_no_partial_clip(tmp_path, synth, persona, fail):
    (tmp_path / "b.mp4").write_bytes(b"previous good render")
    with pytest.raises(RuntimeError, match=f"{fail[0]} failed on {fail[1]}"):
        render_queue(_Staged(fail=fail), _jobs(synth, persona, tmp_path))
    assert (tmp_path / "b.mp4").read_bytes() == b"previous good render"  # untouched
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == (["b.mp4"] if fail[1] == "a" else ["a.json", "a.mp4", "b.mp4"])  # nothing half-written


def test_an_unstaged_backend_renders_one_clip_after_the_other(tmp_path, synth, persona):
    warp = get_backend("warp", threads=1)
    assert not is_staged(warp) and is_staged(_Staged())
    report = render_queue(warp, _jobs(synth, persona, tmp_path, names=("a",)))
    assert report.mode == "serial (not staged)" and report.gpu_idle_fraction is None and len(report.telemetry) == 1


def test_wan_animate_queue_matches_its_serial_render(tmp_path, synth, persona, monkeypatch):
    backend = get_backend("wan-animate", preset="tiny", steps=1, device="cpu", dtype="float32", segment_frames=5,
                          cache_root=str(tmp_path / "caches"))  # fmt: skip
    backend.load()
    jobs = []
    for name in ("a", "b"):
        loop = synth.make_loop(9)
        loop.loop_id, loop.path, loop.metadata = name, tmp_path / name, {"source": {"sha256": name * 8}}
        loop.path.mkdir()
        persona.path, persona.metadata = tmp_path / "persona", {"source": {"sha256": "p" * 8}}
        persona.path.mkdir(exist_ok=True)
        backend.prepare_guidance(loop, SPEC)
        backend.prepare_persona(persona, SPEC)
        jobs.append(RenderJob(loop, persona, SPEC, tmp_path / f"{name}.mp4"))
    report = render_queue(backend, jobs)
    first = [f.copy() for f in iter_frames(tmp_path / "a.mp4")]
    serial = render_queue(backend, [RenderJob(jobs[0].guidance, persona, SPEC, tmp_path / "a-serial.mp4")], pipelined=False)
    assert all(np.array_equal(x, y) for x, y in zip(first, iter_frames(tmp_path / "a-serial.mp4")))
    assert len(first) == 9 and report.stage_s["denoise"] > 0 and report.stage_s["decode"] > 0
    assert 0 <= report.gpu_idle_fraction <= 1 and serial.mode == "serial"
    assert report.telemetry[1].backend_info["last_render"]["segments"] == 2
    # The same clip rendered directly (backend.frames: the green screen applied) is the queue's clip.
    render_clip(jobs[0].guidance, persona, backend, SPEC, tmp_path / "a-direct.mp4")
    assert all(np.array_equal(x, y) for x, y in zip(first, iter_frames(tmp_path / "a-direct.mp4")))
    # ... and it went through the green screen (random-weight noise keys as all person, so the
    # pixels alone cannot show it): every generated frame was matted onto the key.
    from newsmotion_engine.render import chroma

    matted = []
    real = chroma.chroma_composite
    monkeypatch.setattr(chroma, "chroma_composite", lambda frame, key: matted.append(tuple(key)) or real(frame, key))
    render_queue(backend, [RenderJob(jobs[0].guidance, persona, SPEC, tmp_path / "a-again.mp4")])
    assert matted == [tuple(SPEC.background)] * 9


@dataclass
class _ContinuingWork(_Work):
    """A clip whose segment ``k`` reads segment ``k - 1``'s decode (wan-animate's trained
    continuation): ``wait_ready`` says when it may denoise."""

    decoded: set = field(default_factory=set)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def wait_ready(self, k, timeout):
        with self.cond:
            return self.cond.wait_for(lambda: k == 0 or k - 1 in self.decoded, timeout)


class _Continuing(_Staged):
    def plan_clip(self, guidance, persona, keypoints, spec):
        w = super().plan_clip(guidance, persona, keypoints, spec)
        return _ContinuingWork(w.clip, w.frames, w.plan)

    def denoise_clip_segment(self, work, k):
        if k > 0 and k - 1 not in work.decoded:
            raise RuntimeError(f"segment {k} denoised before segment {k - 1} was decoded")
        return super().denoise_clip_segment(work, k)

    def decode_clip_segment(self, work, k, latents):
        self._log("decode", work.clip, k)
        with work.cond:
            work.decoded.add(k)
            work.cond.notify_all()
        for j in range(4):
            if 4 * k + j < work.frames:
                yield np.full((SPEC.height, SPEC.width, 3), latents, np.uint8)


def test_pipelined_waits_for_the_previous_decode_when_the_work_says_so(tmp_path, synth, persona):
    """A continuation that reads the previous segment's decode: each segment denoises after that
    decode (no deadlock, same frames); the next clip's first denoise still needs no wait."""
    backend = _Continuing()
    render_queue(backend, _jobs(synth, persona, tmp_path))
    assert _levels(tmp_path / "a.mp4") == [0] * 4 + [40] * 4 + [80] * 2
    assert _levels(tmp_path / "b.mp4") == [100] * 4 + [140] * 4 + [180] * 2
    calls = backend.calls
    for clip in "ab":
        assert all(calls.index(("decode", clip, k - 1)) < calls.index(("denoise", clip, k)) for k in (1, 2))
