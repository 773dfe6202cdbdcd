"""The lip-sync score: the best lag finds a known audio-video offset, a synthetic clip whose mouth
opens two frames late scores that offset, unmeasurable clips give a reason, and the record
round-trips through the render telemetry."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec, get_backend, render_clip
from newsmotion_engine.render.lipsync import (
    LipSyncError,
    best_lag,
    lip_sync_problems,
    lip_sync_score,
    measure_lip_sync,
    mouth_aperture,
)
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.video.encode import VideoEncoder
from tests.engine.render.viseme_tracks import speaking, track


@pytest.mark.parametrize("shift", [-3, 0, 2])
def test_best_lag_finds_a_known_shift(shift):
    ref = speaking(120, seed=4).open.astype(np.float64)
    rng = np.random.default_rng(0)
    aperture = 0.1 + 0.3 * np.roll(ref, shift) + rng.normal(0, 0.01, ref.size)
    aperture[10:14] = np.nan  # frames without a face are left out
    lag, corr, at_zero = best_lag(aperture, ref, max_lag=5)
    assert lag == shift and corr > 0.95
    assert (at_zero is not None and at_zero < corr - 0.05) if shift else at_zero == corr


def test_best_lag_gives_nothing_for_a_still_mouth():
    assert best_lag(np.full(60, 0.2), speaking(60).open) == (None, None, None)


def test_mouth_aperture_is_gap_over_width():
    xy = np.zeros((468, 2))
    xy[61], xy[291] = (100, 200), (160, 200)  # 60 px wide
    xy[13], xy[14] = (130, 195), (130, 210)  # 15 px gap
    assert mouth_aperture(xy) == pytest.approx(0.25)


def _late_mouth_clip(path, visemes, late: int):
    """A clip whose 'mouth' (a dark bar) opens with the track ``late`` frames late."""
    o = np.asarray(visemes.open)
    with VideoEncoder(path, 64, 64, 30) as enc:
        for t in range(len(o)):
            frame = np.full((64, 64, 3), 200, np.uint8)
            h = 1 + int(round(20 * o[max(0, t - late)]))
            frame[30 : 30 + h, 20:44] = 20
            enc.write(frame)


def _bar_heights(frames):
    return [float((f[:, 32, 0] < 100).sum()) for f in frames]


def test_a_clip_two_frames_late_scores_that_offset(tmp_path):
    visemes = speaking(90, seed=2)
    mp4 = tmp_path / "late.mp4"
    _late_mouth_clip(mp4, visemes, late=2)
    score = lip_sync_score(mp4, visemes, apertures=_bar_heights, extractor="bar")
    assert score.offset_frames == 2 and score.correlation > 0.9 and score.reference == "open"
    assert score.frames == score.frames_measured == 90 and not score.meets_targets
    assert lip_sync_problems(score) == ["audio-video offset +2 frames (|offset| > 1)"]
    on_time = tmp_path / "on_time.mp4"
    _late_mouth_clip(on_time, visemes, late=0)
    good = lip_sync_score(on_time, visemes, apertures=_bar_heights, extractor="bar")
    assert good.offset_frames == 0 and good.meets_targets and lip_sync_problems(good) == []


def test_unmeasurable_clips_say_why(tmp_path):
    mp4 = tmp_path / "c.mp4"
    visemes = speaking(30)
    _late_mouth_clip(mp4, visemes, late=0)
    assert measure_lip_sync(mp4, None) == (None, "a silent clip (rendered without speech): no lips to score")
    flat = track(np.zeros(30), energy=np.zeros(30))
    score, reason = measure_lip_sync(mp4, flat, apertures=_bar_heights)
    assert score is None and "never moves the mouth" in reason
    score, reason = measure_lip_sync(mp4, speaking(31), apertures=_bar_heights)
    assert score is None and "30 video frames for a 31-frame" in reason
    score, reason = measure_lip_sync(mp4, visemes, apertures=lambda frames: [float("nan") for _ in frames])
    assert score is None and "found in 0 of 30 frames" in reason
    assert lip_sync_problems(None, reason) == [f"lip sync not measured: {reason}"]
    with pytest.raises(LipSyncError):
        lip_sync_score(mp4, flat, apertures=_bar_heights)


def test_the_score_travels_in_the_render_telemetry(tmp_path, persona, synth):
    visemes = speaking(12)
    out = tmp_path / "warp.mp4"
    tele = render_clip(synth.make_loop(12), persona, get_backend("warp", threads=1), RenderSpec(128, 224), out, visemes=visemes)
    assert tele.lip_sync is None and "turned off" in tele.lip_sync_reason
    silent = render_clip(synth.make_loop(4), persona, get_backend("warp", threads=1), RenderSpec(128, 224), tmp_path / "s.mp4")
    assert silent.lip_sync is None
    mp4 = tmp_path / "late.mp4"
    visemes = speaking(60, seed=5)
    _late_mouth_clip(mp4, visemes, late=1)
    import dataclasses

    scored = dataclasses.replace(tele, lip_sync=lip_sync_score(mp4, visemes, apertures=_bar_heights, extractor="bar"), lip_sync_reason=None)
    scored.write(tmp_path / "t.json")
    back = RenderTelemetry.read(tmp_path / "t.json")
    assert back == scored and back.lip_sync_offset_frames == 1 and back.row()["lip_sync_correlation"] > 0.9


def test_older_records_read_without_a_score(tmp_path, persona, synth):
    import json

    tele = render_clip(synth.make_loop(4), persona, get_backend("warp", threads=1), RenderSpec(128, 224), tmp_path / "a.mp4")
    data = json.loads(tele.to_json())
    data["schema_version"] = 2
    del data["lip_sync"], data["lip_sync_reason"]
    back = RenderTelemetry.from_json(json.dumps(data))
    assert back.lip_sync is None and back.lip_sync_reason == "recorded by telemetry schema 2, before lip sync was measured"
