"""The render-level sparse-keyframe stage: which poses the backend is asked for, infilled frames
in order, telemetry, and the wan-animate segment fit."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import BackendNeeds, RenderSpec, RenderTelemetry, get_backend, render_clip
from newsmotion_engine.render.base import InvalidSpecError
from newsmotion_engine.render.keyframes import clip_schedule, driving_keypoints, infill_frames, keyed_matte
from newsmotion_engine.render.backends.wan.segments import plan_segments
from newsmotion_engine.video import probe_video

BG = (0, 177, 64)


class _MovingSquare:
    """A backend whose frame for keypoint frame ``i`` is a square at x = 4 * (its first keypoint's
    x value): keyframes carry their pose index, so the test can see which poses were asked for."""

    name = "square"
    needs = BackendNeeds()

    def __init__(self):
        self.asked: list[int] = []

    def load(self):
        pass

    def close(self):
        pass

    def describe(self):
        return {"weights": "none"}

    def frames(self, guidance, persona, keypoints, spec):
        for kp in keypoints:
            i = int(round(kp[0, 2] * 1000))  # the frame index hidden in the nose confidence
            self.asked.append(i)
            frame = np.empty((spec.height, spec.width, 3), np.uint8)
            frame[:] = spec.background
            x = 20 + 2 * i
            frame[100:140, x : x + 40] = (200, 60, 90)
            yield frame


def _indexed_loop(synth, frames):
    loop = synth.make_loop(frames)
    loop.keypoints = loop.keypoints.copy()
    loop.keypoints[:, 0, 2] = np.arange(frames) / 1000.0  # retargeting keeps confidences
    return loop


def test_schedule_and_driving_poses():
    spec = RenderSpec(216, 384, keyframes=2)
    s = clip_schedule(10, spec)
    assert s.keyframes == (0, 2, 4, 6, 8) and s.infilled == (1, 3, 5, 7, 9)
    kp = np.arange(10 * 133 * 3, dtype=np.float32).reshape(10, 133, 3)
    assert np.array_equal(driving_keypoints(kp, s), kp[::2])
    assert driving_keypoints(kp, clip_schedule(10, RenderSpec(216, 384))) is kp  # 1: every frame, untouched
    with pytest.raises(ValueError, match="9 keypoint frames"):
        driving_keypoints(kp[:9], s)


@pytest.mark.parametrize("bad", [0, 9, 1.5, True])
def test_keyframe_ratio_is_validated(bad):
    with pytest.raises(InvalidSpecError, match="keyframes"):
        RenderSpec(216, 384, keyframes=bad)


def test_spec_dict_mentions_keyframes_only_when_sparse():
    assert "keyframes" not in RenderSpec().as_dict()  # every-frame digests stay what they were
    assert RenderSpec(keyframes=3).as_dict()["keyframes"] == 3


def test_keyed_matte_is_exact_background():
    frame = np.full((8, 8, 3), BG, np.uint8)
    frame[2:4, 2:4] = (1, 2, 3)
    frame[5, 5] = (0, 178, 64)  # one step off the colour: person
    m = keyed_matte(frame, BG)
    assert m.dtype == np.uint8 and m.sum() == 255 * 5 and m[2, 2] == 255 and m[0, 0] == 0


@pytest.mark.parametrize("ratio", [2, 3])
def test_render_clip_asks_for_keyframes_and_infills_the_rest(tmp_path, persona, synth, ratio):
    loop = _indexed_loop(synth, 12)
    backend = _MovingSquare()
    spec = RenderSpec(216, 384, keyframes=ratio)
    out = tmp_path / "square.mp4"
    tele = render_clip(loop, persona, backend, spec, out)
    assert backend.asked == list(range(0, 12, ratio))  # the keyframes' poses, in order
    assert probe_video(out)["frames"] == 12 and tele.frames == 12
    k = tele.keyframes
    assert k["ratio"] == ratio and k["keyframes"] == len(range(0, 12, ratio)) and k["infilled"] == 12 - k["keyframes"]
    assert k["flow_ms"] > 0 and k["infill_ms_per_frame"] > 0
    assert RenderTelemetry.read(out.with_suffix(".json")).keyframes == k


def test_every_frame_render_records_no_keyframes(tmp_path, persona, synth):
    tele = render_clip(_indexed_loop(synth, 6), persona, _MovingSquare(), RenderSpec(216, 384), tmp_path / "a.mp4")
    assert tele.keyframes is None


def test_infilled_frames_follow_the_motion_and_keep_the_background_exact(synth):
    loop = _indexed_loop(synth, 8)
    spec = RenderSpec(216, 384, keyframes=2)
    s = clip_schedule(8, spec)
    backend = _MovingSquare()
    stats = {}
    frames = list(infill_frames(backend.frames(loop, None, driving_keypoints(loop.keypoints, s), spec), s, spec, stats=stats))
    assert len(frames) == 8 and stats["infilled"] == 4
    truth = list(_MovingSquare().frames(loop, None, loop.keypoints, spec))
    for i in (0, 2, 4, 6):
        assert np.array_equal(frames[i], truth[i])  # keyframes pass through untouched
    far = frames[3][300:, :]
    assert (far == np.array(BG, np.uint8)).all()  # away from the person the colour is exact
    cols = np.where((frames[3][120] != np.array(BG, np.uint8)).any(axis=1))[0]
    assert abs(cols.min() - (20 + 2 * 3)) <= 1  # the square moved halfway between keyframes 2 and 4


def test_infill_refuses_a_backend_that_yields_too_few_keyframes(synth):
    spec = RenderSpec(216, 384, keyframes=2)
    s = clip_schedule(8, spec)
    few = (np.full((384, 216, 3), BG, np.uint8) for _ in range(3))
    with pytest.raises(RuntimeError, match="3 of the 4 keyframes"):
        list(infill_frames(few, s, spec))


def test_warp_renders_keyframes_end_to_end(tmp_path, persona, synth):
    tele = render_clip(synth.make_loop(12), persona, get_backend("warp", threads=1), RenderSpec(216, 384, keyframes=2),
                       tmp_path / "warp.mp4")  # fmt: skip
    assert tele.frames == 12 and tele.keyframes["keyframes"] == 6


def test_wan_animate_segments_fit_a_short_keyframe_clip():
    # 120 frames at 1:2 -> 60 keyframes -> one segment of 61 frames (4k + 1), not a 77-frame one.
    fit = plan_segments(60, 77, 1, fit=True)
    assert (fit.segment_frames, fit.segments, fit.latent_frames) == (61, 1, 16)
    assert plan_segments(40, 77, 1, fit=True).segment_frames == 41
    assert plan_segments(60, 77, 1).segment_frames == 77  # the stock plan: whole segments
    assert plan_segments(120, 77, 1, fit=True).segment_frames == 77  # longer clips: unchanged
    assert plan_segments(3, 77, 1, fit=True).segment_frames == 5


def test_fitted_segment_frames_cover_the_clip_in_as_many_segments():
    from newsmotion_engine.render.backends.wan.segments import fitted_segment_frames

    assert fitted_segment_frames(120, 81, 1) == 61  # 2 x 61 (121 frames) instead of 2 x 81 (161)
    for frames in (13, 40, 81, 82, 120, 200, 333):
        n = fitted_segment_frames(frames, 81, 1)
        plan = plan_segments(frames, n, 1)
        assert (n - 1) % 4 == 0 and 5 <= n <= 81
        assert plan.segments == plan_segments(frames, 81, 1).segments  # no extra segment
        assert plan.segments * (n - 1) + 1 >= frames  # the clip is covered
        assert n == 5 or plan_segments(frames, n - 4, 1).segments > plan.segments  # and n is the shortest
