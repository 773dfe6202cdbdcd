"""Fixtures of the persona tests: sample images, and the astronaut persona built once per module
(mediapipe on CPU, ~1 s) and copied into per-test storages where a test needs its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image
from skimage import data

from newsmotion_engine.persona import PersonaCache, load_persona
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.storage import Storage


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("images")
    paths = {"astronaut": folder / "astronaut.png", "coffee": folder / "coffee.jpg", "chelsea": folder / "chelsea.png"}
    Image.fromarray(data.astronaut()).save(paths["astronaut"])
    Image.fromarray(data.coffee()).save(paths["coffee"], quality=90)
    Image.fromarray(data.chelsea()).save(paths["chelsea"])
    return paths


@pytest.fixture(scope="module")
def module_storage(tmp_path_factory, images) -> Storage:
    """A storage holding the astronaut persona, built once for the module (read-only tests)."""
    store = Storage(tmp_path_factory.mktemp("storage"))
    calls = []
    # framing "as-is" (fit, bottom-centre): these tests check the placement arithmetic; the
    # default medium shot is tested in test_framing.py.
    cache, built = ensure_persona(
        store, "astronaut", image=images["astronaut"], framing="as-is", progress=lambda i, n: calls.append((i, n))
    )
    assert built and calls and calls[-1][0] == calls[-1][1]
    return store


@pytest.fixture()
def astronaut(module_storage) -> PersonaCache:
    return load_persona(module_storage, "astronaut")


@pytest.fixture()
def own_storage(storage, module_storage) -> Storage:
    """This test's own storage (tests/conftest.py), holding a copy of the astronaut cache."""
    shutil.copytree(module_storage.persona_dir("astronaut"), storage.persona_dir("astronaut"))
    return storage


@pytest.fixture()
def leftovers():
    """Everything under a storage's persona cache root (temp siblings, lock files, directories)."""

    def under(store: Storage) -> list[str]:
        folder = store.persona_root
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    return under
