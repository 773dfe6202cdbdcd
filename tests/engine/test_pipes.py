"""The engine's own entry point (``python -m newsmotion_engine.pipes``), run by hand: no Dagster,
no Pipes context; the same commands the Dagster launchers start."""

import dataclasses
import json
import subprocess
import sys
from types import SimpleNamespace

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.pipes import main, pose_fidelity_check
from newsmotion_engine.render.telemetry import RenderTelemetry


def test_render_by_hand_writes_the_clip_and_prints_the_telemetry(storage, astronaut_png, capsys):
    ensure_guidance(storage, "nod")
    ensure_persona(storage, "anchor", image=astronaut_png)
    argv = ["render", "--storage", str(storage.root), "--width", "180", "--height", "320", "--launcher", "pipes-k8s", "anchor/nod"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("pipes-k8s: loading backend warp") and "anchor x nod: 120/120 frames" in out
    reported = json.loads(out[-1])["materialization"]
    (record,) = reported["telemetry"]
    tele = RenderTelemetry.read(storage.render_path("anchor", "nod", "warp").with_suffix(".json"))
    assert record == tele.to_dict() and tele.launcher == "pipes-k8s" and reported["launcher"] == "pipes-k8s"


def test_bad_input_is_one_error_line_and_exit_1(storage, capsys):
    assert main(["render", "--storage", str(storage.root), "ghost/nod"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown persona 'ghost'")
    assert not storage.render_path("ghost", "nod", "warp").exists()
    assert main(["render", "--options", "[1]", "ghost/nod"]) == 1
    assert capsys.readouterr().err.strip() == "error: --options must be a JSON object"


def test_entry_point_imports_and_runs_without_dagster_pipes(tmp_path):
    """The engine never needs dagster_pipes unless Pipes started it (sys.modules[...] = None makes
    any import of it fail)."""
    code = (
        "import sys; sys.modules['dagster_pipes'] = None; sys.modules['dagster'] = None\n"
        "from newsmotion_engine.pipes import main\n"
        f"sys.exit(main(['bench', '--out-dir', {str(tmp_path)!r}, 'no-such-suite']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    from newsmotion_engine.bench.suites import SUITES

    assert proc.stderr.strip().splitlines()[-1] == f"error: unknown bench suite 'no-such-suite'; known: {', '.join(SUITES)}"


def test_pose_fidelity_is_a_check_only_when_the_telemetry_has_it():
    assert pose_fidelity_check(SimpleNamespace(persona_id="a", loop_id="nod")) is None
    good = SimpleNamespace(persona_id="a", loop_id="nod", pose_fidelity={"pck": 0.93, "motion_energy_ratio": 0.85, "per_part": {"arms": 0.9}})
    passed, metadata = pose_fidelity_check(good)
    assert passed and metadata["pck"] == 0.93 and metadata["per_part"] == {"raw_value": {"arms": 0.9}, "type": "json"}
    assert metadata["render"] == "a x nod"
    low = SimpleNamespace(persona_id="a", loop_id="nod", pose_fidelity={"pck": 0.4, "motion_energy_ratio": 0.9})
    assert pose_fidelity_check(low)[0] is False
    told = SimpleNamespace(persona_id="a", loop_id="nod", pose_fidelity={"pck": 0.4, "passed": True})
    assert pose_fidelity_check(told)[0] is True

    @dataclasses.dataclass(frozen=True)
    class Fidelity:  # the shape of a telemetry record's pose fidelity: its own verdict wins
        pck: float
        pck_body: float | None
        motion_energy_ratio: float
        meets_targets: bool

    record = SimpleNamespace(persona_id="a", loop_id="nod", pose_fidelity=Fidelity(0.95, None, 0.9, False))
    passed, metadata = pose_fidelity_check(record)
    assert passed is False and "pck_body" not in metadata and metadata["meets_targets"] is False
