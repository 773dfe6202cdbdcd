"""`newsmotion studio build` and `serve`: a site from the renders on disk; serve refuses a port
that is not one, and a missing site with what to run."""

import pytest

from newsmotion_engine.cli import main
from newsmotion_engine.storage import Storage

from .conftest import make_render


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_build_then_serve_errors(capsys, isolated_storage, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    code, _, err = run(capsys, "studio", "serve")
    assert code == 1 and "no studio site here; run `newsmotion studio build` first" in err
    storage = Storage(isolated_storage)
    make_render(storage, "anna", "nod", "warp")
    make_render(storage, "anna", "nod", "other", shift=5)
    make_render(storage, "anna", "wave", "gone")
    storage.render_path("anna", "wave", "gone").unlink()
    code, out, _ = run(capsys, "studio", "build", "--no-pose")
    assert code == 0 and "3 renders, 1 A/B comparisons (0 reused)" in out
    assert "warning: anna/wave/gone: gone.mp4 is missing" in out
    assert (storage.studio_dir / "index.html").is_file()
    code, _, err = run(capsys, "studio", "serve", "--port", "70000")
    assert code == 1 and "port 70000 is not a TCP port" in err
