"""The card badges come from RenderTelemetry's BADGES columns: what each says for a CPU render, a
GPU render with random weights, and a record carrying a pose-fidelity measurement."""

import dataclasses

from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.studio.catalog import RenderEntry
from newsmotion_engine.studio.site import badges

from .conftest import make_render


def _texts(tele, state="ok"):
    entry = RenderEntry(tele.persona_id, tele.loop_id, tele.backend, tele.output, tele, state, problems=("x",) if state != "ok" else ())
    return [b["text"] for b in badges(entry)]


def test_badges(storage):
    warp = make_render(storage, "anna", "nod", "warp")
    assert _texts(warp) == ["warp", "no weights", "90 fps", "VRAM -", "cache hit"]
    gpu = make_render(storage, "anna", "nod", "wan-animate", weights="random weights",
                      extra_info={"last_render": {"peak_vram_gib": 23.497}})  # fmt: skip
    assert _texts(gpu) == ["wan-animate", "random weights", "30.0 s", "VRAM 23.5 GiB", "cache hit"]
    assert _texts(warp, "truncated")[:2] == ["warp", "clip truncated"]
    assert set(RenderTelemetry.BADGES) >= {"backend", "weights", "peak_vram_gib", "pose_fidelity_pck"}


def test_pose_fidelity_when_the_record_has_one(storage):
    from newsmotion_engine.render.telemetry import PoseFidelity

    warp = make_render(storage, "anna", "nod", "warp")
    assert warp.pose_fidelity_pck is None
    fidelity = PoseFidelity(
        version=1, pck=0.95, pck_body=0.93, per_part={"head": {"pck": 1.0, "mean_px": 2.0, "joints": 5}},
        mean_px=3.2, motion_energy_ratio=0.85, normalizer={"kind": "shoulder_width", "px": 300.0}, alpha=0.05,
        threshold_px=15.0, frames=120, frames_compared=30, stride=4, joints=77, detected_fraction=0.99,
        extractor="mediapipe-holistic 0.10.21", calibration={"rest_frame": True, "raw": {}},
        targets={"pck_body": 0.9, "motion_energy_ratio": 0.8}, meets_targets=True, seconds=2.0,
    )  # fmt: skip
    measured = dataclasses.replace(warp, pose_fidelity=fidelity)
    assert measured.pose_fidelity_pck == 0.93  # the badge shows the target figure: head, torso, arms
    assert _texts(measured)[-1] == "PCK 0.93"


def test_lip_sync_badge_for_a_render_with_speech(storage):
    from newsmotion_engine.render.lipsync import SILENT_REASON
    from newsmotion_engine.render.telemetry import LipSync

    warp = make_render(storage, "anna", "nod", "warp")
    score = LipSync(
        version=1, correlation=0.82, offset_frames=-1, correlation_at_zero=0.8, reference="open", max_lag=5, frames=90,
        frames_measured=90, aperture={"min": 0.1, "median": 0.2, "max": 0.4}, extractor="mediapipe-face-mesh",
        targets={"correlation": 0.6, "offset_frames": 1}, meets_targets=True, seconds=1.0,
    )  # fmt: skip
    assert _texts(dataclasses.replace(warp, lip_sync=score))[-1] == "lips r 0.82 · -1 f"
    assert _texts(dataclasses.replace(warp, lip_sync_reason=SILENT_REASON)) == _texts(warp)
    unscored = dataclasses.replace(warp, lip_sync_reason="mediapipe is not installed here")
    assert _texts(unscored)[-1] == "lips -"
