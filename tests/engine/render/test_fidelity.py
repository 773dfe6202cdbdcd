"""Pose fidelity: known answers on synthetic cases (a render that follows exactly, a frozen one,
half the amplitude), the frame stride, the normalizer, and no crash without mediapipe."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import fidelity as fid
from newsmotion_engine.render import RenderSpec, get_backend, render_clip
from newsmotion_engine.render.fidelity import FidelityConfig, measure_frames, measure_render, score_pose, torso_normalizer
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.skeleton import BODY

W, H = 180, 320  # frame size; the persona canvas is 9:16 too, so the placement is a plain scale


class ReplayDetector:
    """Reads the frame index written into pixel (0, 0) and returns ``answers[index]`` normalized to
    the frame: an extractor with a known answer."""

    def __init__(self, answers_px: np.ndarray, found: np.ndarray | None = None):
        self.answers = answers_px
        self.found = found
        self.calls = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        self.calls += 1
        i = int(rgb[0, 0, 0]) + 256 * int(rgb[0, 0, 1])
        kp = np.zeros((133, 3), np.float32)
        kp[:, 0] = self.answers[i, :, 0] / rgb.shape[1]
        kp[:, 1] = self.answers[i, :, 1] / rgb.shape[0]
        kp[:, 2] = 0.9 if self.found is None else 0.9 * self.found[i]
        return kp


def frames(n: int):
    for i in range(n):
        img = np.zeros((H, W, 3), np.uint8)
        img[0, 0, 0], img[0, 0, 1] = i % 256, i // 256
        yield img


def intended_loop(synth, frames: int = 24) -> np.ndarray:
    return synth.make_loop(frames, width=W, height=H).keypoints.astype(np.float64)


def px(kp: np.ndarray) -> np.ndarray:
    return kp[..., :2] * (W, H)


def test_a_render_that_follows_exactly_scores_pck_1_and_energy_1(synth):
    want = intended_loop(synth)
    persona = want[0]
    result, reason = measure_frames(frames(24), want, persona, portrait_hw=(H, W), config=FidelityConfig(stride=1),
                                    detector=ReplayDetector(px(want)))  # fmt: skip
    assert reason is None
    assert result.pck == 1.0 and result.pck_body == 1.0 and result.mean_px == 0.0
    assert result.motion_energy_ratio == pytest.approx(1.0, abs=1e-6)
    assert result.per_part["arms"]["pck"] == 1.0 and result.per_part["hands"]["pck"] == 1.0
    assert result.meets_targets and result.frames_compared == 24 and result.frames == 24
    assert result.normalizer["kind"] == "torso"  # the drawn figure shows its hips


def test_a_frozen_render_scores_energy_0(synth):
    want = intended_loop(synth)
    frozen = np.repeat(px(want[:1]), len(want), axis=0)
    result, _ = measure_frames(frames(24), want, want[0], portrait_hw=(H, W), config=FidelityConfig(stride=1),
                               detector=ReplayDetector(frozen))  # fmt: skip
    assert result.motion_energy_ratio == pytest.approx(0.0, abs=1e-9)
    assert result.per_part["arms"]["motion_energy_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert result.pck_body < 1.0 and not result.meets_targets  # the waving wrist is left behind


def test_half_the_amplitude_scores_half_and_jitter_does_not_count_as_motion(synth):
    want = intended_loop(synth)
    p = px(want)
    half = p[:1] + 0.5 * (p - p[:1])
    result, _ = measure_frames(frames(24), want, want[0], portrait_hw=(H, W), config=FidelityConfig(stride=1),
                               detector=ReplayDetector(half))  # fmt: skip
    assert result.motion_energy_ratio == pytest.approx(0.5, abs=1e-6)
    rng = np.random.default_rng(0)
    jittered = p + rng.normal(0.0, 1.0, p.shape)
    result, _ = measure_frames(frames(24), want, want[0], portrait_hw=(H, W), config=FidelityConfig(stride=1),
                               detector=ReplayDetector(jittered))  # fmt: skip
    assert result.motion_energy_ratio == pytest.approx(1.0, abs=0.1)
    assert result.per_part["arms"]["motion_magnitude_ratio"] > result.per_part["arms"]["motion_energy_ratio"] - 0.1


def test_stride_misses_and_invisible_joints(synth):
    want = intended_loop(synth)
    persona = want[0].copy()
    persona[BODY["left_wrist"], 2] = 0.0  # the persona does not show that wrist: never compared
    found = np.ones(want.shape[:2])
    found[:, BODY["right_wrist"]] = 0.0  # the extractor never finds this one: misses
    det = ReplayDetector(px(want), found)
    result, _ = measure_frames(frames(24), want, persona, portrait_hw=(H, W), config=FidelityConfig(stride=5), detector=det)
    assert det.calls == 5 and result.frames_compared == 5 and result.stride == 5
    arms = result.per_part["arms"]
    assert arms["joints"] == 3  # two elbows and the right wrist
    assert arms["pck"] == pytest.approx(2 / 3, abs=1e-4)
    assert result.detected_fraction < 1.0


def test_normalizer_torso_then_shoulders_then_head(synth):
    kp = synth.make_pose(W, H)
    rest = px(kp.astype(np.float64))
    ok = kp[:, 2] >= 0.3
    assert torso_normalizer(rest, ok)["kind"] == "torso"
    ok[[BODY["left_hip"], BODY["right_hip"]]] = False
    norm = torso_normalizer(rest, ok)
    assert norm["kind"] == "shoulder_width"
    assert norm["px"] == pytest.approx(np.linalg.norm(rest[5] - rest[6]), abs=0.01)
    ok[[BODY["left_shoulder"], BODY["right_shoulder"]]] = False
    assert torso_normalizer(rest, ok)["kind"] == "head"  # a headshot
    assert torso_normalizer(rest, np.zeros(133, bool)) is None


def test_score_pose_threshold_is_alpha_times_normalizer():
    want = np.zeros((2, 133, 2))
    want[:, :, 0] = np.arange(133)
    want[1, :, 1] = 5.0
    det = want.copy()
    det[:, BODY["nose"], 0] += 4.9  # inside 0.05 x 100 px
    det[:, BODY["left_eye"], 0] += 5.1  # outside
    compare = np.zeros((2, 133), bool)
    compare[:, [BODY["nose"], BODY["left_eye"]]] = True
    out = score_pose(det, np.ones((2, 133), bool), want, compare, {"kind": "torso", "px": 100.0}, alpha=0.05)
    assert out["threshold_px"] == 5.0 and out["pck"] == 0.5 and out["per_part"]["head"]["pck"] == 0.5
    assert out["per_part"]["torso"]["pck"] is None  # nothing compared there


def test_without_mediapipe_it_records_a_reason_and_never_crashes(monkeypatch, tmp_path, synth):
    monkeypatch.setattr(fid, "mediapipe_available", lambda: False)
    want = intended_loop(synth, 4)
    result, reason = measure_render(tmp_path / "none.mp4", want, want[0], portrait_hw=(H, W))
    assert result is None and "mediapipe is not installed" in reason
    result, reason = measure_render(tmp_path / "none.mp4", want, want[0], portrait_hw=(H, W), config=FidelityConfig(enabled=False))
    assert result is None and reason.startswith("turned off")


def test_broken_extractor_or_unreadable_clip_gives_a_reason(tmp_path, synth):
    want = intended_loop(synth, 4)

    def broken():
        raise RuntimeError("no graph")

    assert "could not start" in measure_render(tmp_path / "x.mp4", want, want[0], portrait_hw=(H, W), detector_factory=broken)[1]
    bad = tmp_path / "x.mp4"
    bad.write_bytes(b"not a video")
    result, reason = measure_render(bad, want, want[0], portrait_hw=(H, W), detector_factory=lambda: ReplayDetector(px(want)))
    assert result is None and "could not be read back" in reason


def test_render_clip_records_pose_fidelity_measured_on_its_own_mp4(monkeypatch, tmp_path, synth):
    """The render path reads the written mp4 back and scores it against the retargeted pose."""
    persona = synth.make_persona(W, H)
    loop = synth.make_loop(8)
    seen: dict = {}

    class Recorder(ReplayDetector):
        def __init__(self):
            self.calls = 0

        def detect(self, rgb):
            self.calls += 1
            seen.setdefault("shape", rgb.shape)
            return np.zeros((133, 3), np.float32)  # finds nobody: every compared joint a miss

    monkeypatch.setattr(fid, "mediapipe_available", lambda: True)
    monkeypatch.setattr(fid, "_holistic_detector", Recorder)
    monkeypatch.setattr(fid, "extractor_name", lambda: "recorder")
    backend = get_backend("warp", threads=1)
    tele = render_clip(loop, persona, backend, RenderSpec(W, H), tmp_path / "c.mp4", fidelity=FidelityConfig(stride=2))
    assert seen["shape"] == (H, W, 3)
    pf = tele.pose_fidelity
    assert pf is not None and pf.frames == 8 and pf.frames_compared == 4 and pf.pck == 0.0 and pf.extractor == "recorder"
    assert pf.motion_energy_ratio is None and tele.pose_fidelity_reason is None
    assert RenderTelemetry.read(tmp_path / "c.json") == tele
    assert tele.row()["pose_pck"] == 0.0
    plain = render_clip(loop, persona, backend, RenderSpec(W, H), tmp_path / "d.mp4")
    assert plain.pose_fidelity is None and plain.pose_fidelity_reason.startswith("not requested")


def test_calibration_removes_the_extractors_bias_at_rest(synth):
    """An extractor that reads every joint 30 px to the right: raw PCK fails, calibrated it is 1."""
    want = intended_loop(synth)
    p = px(want)
    rest_code = len(want)  # the rest frame carries its own index code
    answers = np.concatenate([p, p[:1]]) + np.array([30.0, 0.0])
    rest = next(frames(rest_code + 1 - rest_code))
    rest[0, 0, 0], rest[0, 0, 1] = rest_code % 256, rest_code // 256
    result, _ = measure_frames(frames(24), want, want[0], portrait_hw=(H, W), config=FidelityConfig(stride=1),
                               detector=ReplayDetector(answers), rest_frame=rest)  # fmt: skip
    assert result.pck_body == 1.0 and result.mean_px == pytest.approx(0.0, abs=1e-6)
    assert result.calibration["raw"]["pck_body"] == 0.0 and result.calibration["mean_offset_px"] == pytest.approx(30.0)
    uncalibrated, _ = measure_frames(frames(24), want, want[0], portrait_hw=(H, W), config=FidelityConfig(stride=1),
                                     detector=ReplayDetector(answers))  # fmt: skip
    assert uncalibrated.pck_body == 0.0 and not uncalibrated.calibration["rest_frame"]


def test_rest_frame_is_the_persona_at_the_shared_placement(synth):
    persona = synth.make_persona(W, H)
    frame = fid.rest_frame(persona.portrait, persona.person_mask, W * 2, H * 2, (0, 177, 64))
    assert frame.shape == (H * 2, W * 2, 3)
    solid = persona.person_mask > 250
    y, x = np.argwhere(solid)[len(np.argwhere(solid)) // 2]
    assert np.abs(frame[2 * y, 2 * x].astype(int) - persona.portrait[y, x]).max() < 40
    assert tuple(frame[0, 0]) == (0, 177, 64) or persona.person_mask[0, 0] < 5


def test_a_persona_joint_outside_the_portrait_is_not_visible(synth):
    want = intended_loop(synth)
    persona = want[0].copy()
    # The extractor places a wrist past the photo's edge, fairly confident: not shown, not compared.
    persona[BODY["left_wrist"], :3] = (1.03, persona[BODY["left_wrist"], 1], 0.69)
    assert not fid.persona_visible(persona)[BODY["left_wrist"]]
    assert fid.persona_visible(want[0])[BODY["left_wrist"]]
    frozen = np.repeat(px(want[:1]), len(want), axis=0)
    result, _ = measure_frames(frames(24), want, persona, portrait_hw=(H, W), config=FidelityConfig(stride=1),
                               detector=ReplayDetector(frozen))  # fmt: skip
    assert result.per_part["arms"]["joints"] == 3


@pytest.mark.skipif(not fid.mediapipe_available(), reason="needs mediapipe's holistic extractor")
def test_a_frozen_clip_of_a_real_photo_scores_pck_1_with_the_default_extractor():
    """A clip that is the rest frame over and over is a perfect render of a still loop: the
    measurement must score it 1. mediapipe's video mode (landmarks tracked from frame to frame)
    drifts on such a clip (the cameraman's torso and arms: pck_body 0.69 here), so the default
    extractor reads every frame as a still."""
    import cv2

    from newsmotion_engine.samples import sample_rgb

    frame = np.full((512, 288, 3), (0, 177, 64), np.uint8)
    frame[512 - 288 :] = cv2.resize(sample_rgb("camera"), (288, 288), interpolation=cv2.INTER_AREA)
    with fid._holistic_detector() as det:
        landmarks = det.detect(frame).astype(np.float64)
        want = np.repeat(landmarks[None], 16, axis=0)
        result, reason = measure_frames((frame for _ in range(16)), want, landmarks, portrait_hw=(512, 288),
                                        config=FidelityConfig(stride=1), detector=det, rest_frame=frame)  # fmt: skip
    assert reason is None and result.per_part["arms"]["joints"] >= 2
    assert result.pck_body == 1.0
