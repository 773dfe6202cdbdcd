"""The console every command prints through."""

import json


def test_tables_are_complete_when_piped(astronaut_png):
    """CliRunner's stdout is not a terminal: no cell may be cut short ("astron…")."""
    from typer.testing import CliRunner

    from newsmotion_engine.cli.app import app
    from newsmotion_engine.guidance.catalogue import canonical_loops

    runner = CliRunner()
    long_id = "astronaut_anchor_with_a_rather_long_name"
    assert runner.invoke(app, ["persona", "add", str(astronaut_png), "--id", long_id]).exit_code == 0
    result = runner.invoke(app, ["render", "--persona", long_id, "--loop", "nod", "--width", "180", "--height", "320"])
    assert result.exit_code == 0, result.output
    outputs = {}
    for args in (["scorecard"], ["caches"], ["persona", "list"], ["loops", "list"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        outputs[" ".join(args)] = result.output
        assert "…" not in result.output, args
    assert long_id in outputs["scorecard"] and long_id in outputs["caches"] and long_id in outputs["persona list"]
    created = json.loads(runner.invoke(app, ["caches", "--json"]).output)
    assert all(r["created"] in outputs["caches"] for r in created if r["created"])
    for spec in canonical_loops().values():
        assert spec.description in outputs["loops list"]
