"""The non-blocking ``render_lip_sync`` check: it reads each clip's lip-sync score from its
telemetry, passes silent clips (nothing to score), and warns (never blocks) when a clip rendered
with speech misses the targets or was not scored."""

import dataclasses

import dagster as dg
import numpy as np

from newsmotion_assets.checks import lip_sync_check_result, render_lip_sync
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.render.lipsync import SILENT_REASON
from newsmotion_engine.render.telemetry import LipSync, RenderTelemetry

KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
SCORE = LipSync(
    version=1, correlation=0.85, offset_frames=0, correlation_at_zero=0.85, reference="open", max_lag=5, frames=90,
    frames_measured=90, aperture={"min": 0.1, "median": 0.2, "max": 0.4}, extractor="test", targets={}, meets_targets=True,
    seconds=1.0,
)  # fmt: skip


def _record(storage, backend: str, **fields) -> None:
    """A clip and its telemetry on disk, as a render writes them."""
    mp4 = storage.render_path("anchor", "nod", backend)
    mp4.parent.mkdir(parents=True, exist_ok=True)
    mp4.write_bytes(b"clip")
    tele = RenderTelemetry(
        persona_id="anchor", loop_id="nod", backend=backend, backend_info={"weights": "none"}, encoder="libx264",
        frames=90, fps=30, width=360, height=640, background="#00B140", seed=0, fps_achieved=60.0, render_ms=1.0,
        retarget_ms=1.0, mux_ms=1.0, encode_wait_ms=0.0, wall_s=1.5, peak_rss_mb=100.0, output=str(mp4),
        created_at="2026-01-01T00:00:00+00:00", **fields,
    )  # fmt: skip
    tele.write(mp4.with_suffix(".json"))


def _evaluate(storage) -> dg.AssetCheckResult:
    result = lip_sync_check_result(StorageResource(), KEY)
    assert result.severity == dg.AssetCheckSeverity.WARN  # warns, never withholds a clip
    return result


def test_silent_clips_pass_with_nothing_to_score(storage):
    _record(storage, "warp", lip_sync_reason=SILENT_REASON)
    evaluation = _evaluate(storage)
    assert evaluation.passed and evaluation.metadata["clips_with_speech"].value == 0


def test_a_speaking_clip_is_judged_by_its_score(storage):
    _record(storage, "warp", lip_sync=SCORE)
    evaluation = _evaluate(storage)
    assert evaluation.passed and evaluation.metadata["warp_lip_sync_correlation"].value == 0.85
    _record(storage, "warp", lip_sync=dataclasses.replace(SCORE, correlation=0.4, offset_frames=3))
    evaluation = _evaluate(storage)
    assert not evaluation.passed
    problems = evaluation.metadata["problems"].value
    assert "warp: lip-sync correlation 0.400 < 0.6" in problems and "offset +3 frames" in problems
    assert np.isclose(evaluation.metadata["warp_audio_video_offset_frames"].value, 3.0)


def test_an_unscored_speaking_clip_warns_with_its_reason(storage):
    _record(storage, "warp", lip_sync_reason="mediapipe is not installed here: the lip-sync score needs its face mesh")
    evaluation = _evaluate(storage)
    assert not evaluation.passed and "lip sync not measured: mediapipe is not installed" in evaluation.metadata["problems"].value


def test_the_check_is_registered_non_blocking():
    assert [spec.blocking for spec in render_lip_sync.check_specs] == [False]


def test_no_clip_warns(storage):
    evaluation = _evaluate(storage)
    assert not evaluation.passed and "no rendered clip" in evaluation.metadata["problems"].value
