"""Shared fixtures: every test gets its own storage root, so no test touches ./storage.

``NEWSMOTION_STORAGE`` points at it (the CLI and the Dagster ``storage`` resource read it: they are
the edges that decide the root); engine tests take the ``storage`` fixture, a
:class:`~newsmotion_engine.storage.Storage` of the same root, and pass it explicitly."""

import pytest

from newsmotion_engine.storage import Storage


@pytest.fixture(autouse=True)
def isolated_storage(tmp_path, monkeypatch):
    root = tmp_path / "storage"
    monkeypatch.setenv("NEWSMOTION_STORAGE", str(root))
    return root


@pytest.fixture()
def storage(isolated_storage) -> Storage:
    """The test's storage root as the object the engine takes."""
    return Storage(isolated_storage)


@pytest.fixture(scope="session")
def astronaut_png(tmp_path_factory):
    """The bundled sample portrait written as a PNG once per session."""
    from newsmotion_engine.bench.suites import sample_portrait

    return sample_portrait(tmp_path_factory.mktemp("samples"))
