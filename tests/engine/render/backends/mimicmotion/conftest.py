"""The mimicmotion tests run torch on one thread: on a loaded 2-core machine, torch's two OpenMP
threads in the main thread spin against other processes (a tiny denoise took ~25 s there, 1.4 s on
one thread); renders through render_clip run the backend on a worker thread and are not affected."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
