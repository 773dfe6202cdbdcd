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


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a test module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``):
    on a loaded 2-core machine torch's OpenMP threads in the main thread spin against other
    processes and a tiny denoise crawls; renders through render_clip run on a worker thread anyway."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def storage(isolated_storage) -> Storage:
    """The test's storage root as the object the engine takes."""
    return Storage(isolated_storage)


@pytest.fixture(scope="session")
def astronaut_png(tmp_path_factory):
    """The bundled sample portrait written as a PNG once per session."""
    from newsmotion_engine.bench.suites import sample_portrait

    return sample_portrait(tmp_path_factory.mktemp("samples"))
