"""The bench suites run in a private Storage of a temporary folder and leave the environment alone."""

import os

from newsmotion_engine.bench.suites import private_storage
from newsmotion_engine.storage import Storage


def test_private_storage_is_an_object_not_an_environment_change(storage):
    before = dict(os.environ)
    with private_storage() as store:
        assert isinstance(store, Storage) and store.root.is_dir() and store.root != storage.root
        store.guidance_root.mkdir(parents=True)
        assert dict(os.environ) == before
    assert not store.root.exists() and dict(os.environ) == before
