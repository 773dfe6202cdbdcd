"""`newsmotion loops`."""

from .conftest import run


def test_loops_list(capsys):
    code, out, _ = run(capsys, "loops", "list")
    assert code == 0 and "breaking_alert" in out and "signoff" in out
