import ast
import pathlib

import dagster as dg

from newsmotion_assets.definitions import defs

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "newsmotion_engine"


def test_definitions_load_with_expected_graph():
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "guidance_cache", "backend_guidance_cache", "persona_cache", "backend_persona_cache", "render", "benchmarks",
        "scorecard", "studio", "ab_comparison", "driving_clip", "story", "speech_cache",
    }  # fmt: skip
    parents = lambda name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}  # noqa: E731
    assert parents("driving_clip") == {"guidance_cache"}
    assert parents("backend_guidance_cache") == {"guidance_cache", "driving_clip"}
    assert parents("backend_persona_cache") == {"persona_cache"}
    assert parents("render") == {"guidance_cache", "backend_guidance_cache", "persona_cache", "backend_persona_cache"}
    assert parents("studio") == {"render", "scorecard", "ab_comparison"}
    assert parents("ab_comparison") == {"guidance_cache", "persona_cache"}
    assert parents("story") == {"persona_cache"}
    assert graph.get(dg.AssetKey("ab_comparison")).pools == {"gpu"}
    for name in ("backend_guidance_cache", "backend_persona_cache", "render"):
        node = graph.get(dg.AssetKey(name))
        assert node.pools == {"gpu"} and node.automation_condition.get_label() == "eager_after_valid_upstream"
    assert {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys} == {
        ("guidance_cache", "guidance_cache_valid"), ("persona_cache", "persona_cache_valid"),
        ("render", "render_pose_fidelity"), ("render", "render_lip_sync"), ("speech_cache", "speech_cache_valid"),
        ("story", "story_lip_sync"),
    }  # fmt: skip
    from newsmotion_assets.checks import persona_cache_valid, render_pose_fidelity

    assert [s.blocking for s in render_pose_fidelity.check_specs] == [False]  # warns, never withholds a clip
    assert [s.blocking for s in persona_cache_valid.check_specs] == [True]
    from newsmotion_assets.checks import speech_cache_valid

    assert [s.blocking for s in speech_cache_valid.check_specs] == [True]
    assert {s.name for s in repo.sensor_defs} >= {"loop_sensor", "persona_inbox_sensor", "speech_inbox_sensor", "story_sensor"}
    ours = [s for s in repo.sensor_defs
            if s.name in ("loop_sensor", "persona_inbox_sensor", "speech_inbox_sensor", "render_automation_sensor")]
    assert len(ours) == 4
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in ours)
    schedule = repo.get_schedule_def("nightly_benchmark")
    assert schedule.cron_schedule == "0 2 * * *" and schedule.execution_timezone == "UTC"


def test_engine_never_imports_dagster():
    offenders = []
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            # dagster_pipes (Pipes' external side, no Dagster) is allowed in the engine's entry point
            # only, imported lazily (tests/engine/test_layering.py holds the rule).
            allowed = {"dagster_pipes"} if path == ENGINE / "pipes.py" else set()
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("dagster") and n not in allowed]
    assert not offenders, offenders
