"""Shared fixtures: every test gets its own storage root, so no test touches ./storage."""

import pytest


@pytest.fixture(autouse=True)
def isolated_storage(tmp_path, monkeypatch):
    root = tmp_path / "storage"
    monkeypatch.setenv("NEWSMOTION_STORAGE", str(root))
    return root


@pytest.fixture(scope="session")
def astronaut_png(tmp_path_factory):
    """The bundled sample portrait written as a PNG once per session."""
    from newsmotion_engine.bench.suites import sample_portrait

    return sample_portrait(tmp_path_factory.mktemp("samples"))
