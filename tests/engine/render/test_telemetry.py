"""RenderTelemetry: one versioned record, round-trips, and refuses bad or old files by name."""

import dataclasses
import json

import pytest

from newsmotion_engine.render.telemetry import SCHEMA_VERSION, RenderProvenance, RenderTelemetry, TelemetryError, cell_text


def _record(**changes) -> RenderTelemetry:
    base = RenderTelemetry(
        persona_id="anna", loop_id="nod", backend="warp", backend_info={"weights": "none", "threads": 2},
        encoder="libx264", frames=120, fps=30, width=720, height=1280, background="#00B140", seed=0,
        fps_achieved=95.5, render_ms=900.0, retarget_ms=2.5, mux_ms=10.0, encode_wait_ms=3.0, wall_s=1.26,
        peak_rss_mb=410.2, output="/x/anna/nod/warp.mp4", created_at="2025-01-01T00:00:00+00:00",
        provenance=RenderProvenance("a" * 64, "b" * 64, "c" * 64, "hit", "built"),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_round_trip_and_columns(tmp_path):
    tele = _record()
    path = tmp_path / "warp.json"
    tele.write(path)
    assert RenderTelemetry.read(path) == tele
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    row = tele.row()
    assert tuple(row) == RenderTelemetry.COLUMNS
    assert row["weights"] == "none" and row["guidance_cache"] == "hit" and row["persona_cache"] == "built"
    assert row["input_digest"] == "a" * 64
    assert set(RenderTelemetry.SUMMARY) <= set(RenderTelemetry.COLUMNS)
    kinds = RenderTelemetry.column_kinds()
    assert kinds["frames"] == "int" and kinds["wall_s"] == "float" and kinds["weights"] == "string"
    bench = _record(provenance=None, persona_id=None)
    assert RenderTelemetry.from_json(bench.to_json()) == bench and bench.row()["input_digest"] is None


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda d: d.pop("schema_version"), "no schema_version (written by an older newsmotion); re-render"),
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "upgrade newsmotion"),
        (lambda d: d.pop("frames"), "lacks the field 'frames'"),
        (lambda d: d.update(frames="120"), "'frames' is str, expected int"),
        (lambda d: d.update(frames=True), "'frames' is bool, expected int"),
        (lambda d: d.update(backend=None), "'backend' is null"),
        (lambda d: d["provenance"].pop("input_digest"), "lacks the field 'provenance.input_digest'"),
        (lambda d: d["provenance"].update(guidance_cache="rebuilt"), "guidance_cache 'rebuilt' is not one of"),
        (lambda d: d.update(outcome="maybe"), "outcome 'maybe' is not one of"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path, edit, problem):
    data = _record().to_dict()
    edit(data)
    path = tmp_path / "warp.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TelemetryError) as info:
        RenderTelemetry.read(path)
    assert str(info.value).startswith(f"{path}: ") and problem in str(info.value)


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "warp.json"
    path.write_text("{nope")
    with pytest.raises(TelemetryError, match="not valid JSON"):
        RenderTelemetry.read(path)
    with pytest.raises(TelemetryError, match="cannot read"):
        RenderTelemetry.read(tmp_path / "absent.json")
    with pytest.raises(TelemetryError, match="not a JSON object"):
        RenderTelemetry.from_json("[1, 2]", path)


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "warp.json"
    _record().write(path)
    _record(frames=60).write(path)
    assert RenderTelemetry.read(path).frames == 60 and [p.name for p in tmp_path.iterdir()] == ["warp.json"]


def test_cell_text():
    assert [cell_text(v) for v in (None, float("nan"), 1.234, 3, "x")] == ["-", "-", "1.23", "3", "x"]


def test_launcher_field_is_compatible_and_checked(tmp_path):
    """``launcher`` joined schema 1 with a default: records written before it read as in-process
    (the only launcher there was); an unknown launcher is refused by name."""
    data = json.loads(_record().to_json())
    del data["launcher"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    assert RenderTelemetry.read(older).launcher == "in-process"
    tele = _record(launcher="pipes-k8s")
    assert RenderTelemetry.from_json(tele.to_json()).launcher == "pipes-k8s" and tele.row()["launcher"] == "pipes-k8s"
    data["launcher"] = "cloud"
    older.write_text(json.dumps(data))
    with pytest.raises(TelemetryError, match="launcher 'cloud' is not one of"):
        RenderTelemetry.read(older)


def _fidelity(**changes):
    from newsmotion_engine.render.telemetry import PoseFidelity

    base = PoseFidelity(
        version=1, pck=0.93, pck_body=0.91, per_part={"head": {"pck": 1.0, "mean_px": 2.0, "joints": 5}},
        mean_px=3.2, motion_energy_ratio=0.85, normalizer={"kind": "shoulder_width", "px": 300.0}, alpha=0.05,
        threshold_px=15.0, frames=120, frames_compared=30, stride=4, joints=77, detected_fraction=0.99,
        extractor="mediapipe-holistic 0.10.21", calibration={"rest_frame": True, "raw": {}},
        targets={"pck_body": 0.9, "motion_energy_ratio": 0.8},
        meets_targets=True, seconds=2.0,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_pose_fidelity_round_trip_columns_and_null_with_reason(tmp_path):
    tele = _record(pose_fidelity=_fidelity())
    path = tmp_path / "warp.json"
    tele.write(path)
    back = RenderTelemetry.read(path)
    assert back == tele and back.pose_fidelity.per_part["head"]["pck"] == 1.0
    row = back.row()
    assert row["pose_pck"] == 0.93 and row["pose_pck_body"] == 0.91 and row["motion_energy_ratio"] == 0.85
    kinds = RenderTelemetry.column_kinds()
    assert kinds["pose_pck_body"] == "float" and kinds["motion_energy_ratio"] == "float"
    unmeasured = _record(pose_fidelity=None, pose_fidelity_reason="mediapipe is not installed here")
    assert RenderTelemetry.from_json(unmeasured.to_json()) == unmeasured and unmeasured.row()["pose_pck"] is None
    data = json.loads(tele.to_json())
    data["pose_fidelity"]["meets_targets"] = "yes"
    with pytest.raises(TelemetryError, match="'pose_fidelity.meets_targets' is str, expected bool"):
        RenderTelemetry.from_json(json.dumps(data), path)


def test_version_1_records_are_still_read_and_say_why_they_have_no_fidelity(tmp_path):
    data = _record().to_dict()
    for key in ("pose_fidelity", "pose_fidelity_reason"):
        data.pop(key)
    data["schema_version"] = 1
    old = RenderTelemetry.from_json(json.dumps(data))
    assert old.schema_version == 1 and old.pose_fidelity is None and "schema 1" in old.pose_fidelity_reason
    data["schema_version"] = 0
    with pytest.raises(TelemetryError, match="re-render the clip"):
        RenderTelemetry.from_json(json.dumps(data))
