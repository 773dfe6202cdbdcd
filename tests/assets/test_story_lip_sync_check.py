"""The non-blocking ``story_lip_sync`` check: it reads each story clip's lip-sync score from its
story record, judges it as ``render_lip_sync`` judges a render's (warn, never block), and passes
unscored a backend that does not move lips or a story rendered with the measurement off."""

import dataclasses

import dagster as dg

from newsmotion_assets.checks import story_lip_sync, story_lip_sync_check_result
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.render.lipsync import OFF_REASON
from newsmotion_engine.story.telemetry import StoryTelemetry

from tests.assets.test_lip_sync_check import SCORE

KEY = dg.MultiPartitionKey({"persona": "anchor", "story": "evening"})


def _record(storage, backend: str, *, moves_lips: bool = True, **fields) -> None:
    """A story clip and its record on disk, as a story render writes them."""
    mp4 = storage.story_render_path("anchor", "evening", backend)
    mp4.parent.mkdir(parents=True, exist_ok=True)
    mp4.write_bytes(b"clip")
    tele = StoryTelemetry(
        story_id="evening", persona_id="anchor", backend=backend, backend_info={"weights": "none"}, moves_lips=moves_lips,
        frames=90, fps=30, width=360, height=640, duration_s=3.0, parts=[], joins={}, speech=[], av_sync={"in_sync": True},
        encoder="libx264", wall_s=1.5, render_ms=1.0, plan_ms=1.0, encode_wait_ms=0.0, mux_ms=1.0, realtime_factor=0.5,
        input_digest="d" * 16, output=str(mp4), created_at="2026-01-01T00:00:00+00:00", **fields,
    )  # fmt: skip
    tele.write(mp4.with_suffix(".json"))


def _evaluate() -> dg.AssetCheckResult:
    result = story_lip_sync_check_result(StorageResource(), KEY)
    assert result.severity == dg.AssetCheckSeverity.WARN  # warns, never withholds a story
    return result


def test_a_speaking_story_is_judged_by_its_score(storage):
    _record(storage, "warp", lip_sync=dataclasses.asdict(SCORE))
    evaluation = _evaluate()
    assert evaluation.passed and evaluation.metadata["warp_lip_sync_correlation"].value == 0.85
    assert evaluation.metadata["clips_scored"].value == 1
    _record(storage, "warp", lip_sync=dataclasses.asdict(dataclasses.replace(SCORE, correlation=0.4, offset_frames=-2)))
    evaluation = _evaluate()
    problems = evaluation.metadata["problems"].value
    assert not evaluation.passed and "warp: lip-sync correlation 0.400 < 0.6" in problems and "offset -2 frames" in problems


def test_unscored_stories_pass_when_nothing_moves_the_lips_or_the_measurement_is_off(storage):
    _record(storage, "wan-animate", moves_lips=False, lip_sync_reason="the face mesh found no face")
    _record(storage, "warp", lip_sync_reason=OFF_REASON)
    evaluation = _evaluate()
    assert evaluation.passed and evaluation.metadata["clips_scored"].value == 0
    not_scored = evaluation.metadata["not_scored"].value
    assert "wan-animate: the backend does not move lips" in not_scored and f"warp: {OFF_REASON}" in not_scored


def test_a_lip_moving_story_that_was_not_scored_warns_with_its_reason(storage):
    _record(storage, "warp", lip_sync_reason="mediapipe is not installed here: the lip-sync score needs its face mesh")
    evaluation = _evaluate()
    assert not evaluation.passed and "warp: lip sync not measured: mediapipe is not installed" in evaluation.metadata["problems"].value


def test_an_unreadable_record_or_no_story_warns(storage):
    evaluation = _evaluate()
    assert not evaluation.passed and "no rendered story" in evaluation.metadata["problems"].value
    _record(storage, "warp", lip_sync=dataclasses.asdict(SCORE))
    storage.story_render_path("anchor", "evening", "warp").with_suffix(".json").write_text("{")
    evaluation = _evaluate()
    assert not evaluation.passed and "cannot read the story record" in evaluation.metadata["problems"].value


def test_the_check_is_registered_non_blocking_on_the_story_asset():
    assert [(spec.asset_key.to_user_string(), spec.blocking) for spec in story_lip_sync.check_specs] == [("story", False)]
