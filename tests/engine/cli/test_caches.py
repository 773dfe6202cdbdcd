"""`newsmotion caches`: status of every cache, typed errors for corrupt ones."""

import json

import numpy as np
import pytest

from .conftest import run


def test_caches_json_reports_status(capsys, storage):
    run(capsys, "guidance", "build", "nod")
    (storage.guidance_dir("welcome")).mkdir(parents=True)  # a cache dir without metadata
    code, out, _ = run(capsys, "caches", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert code == 0
    assert rows["nod"]["status"] == "valid" and rows["nod"]["frames"] == 120 and rows["nod"]["bytes"] > 0
    assert rows["welcome"]["status"] == "corrupt" and rows["signoff"]["status"] == "missing"


def test_stale_cache_is_reported_then_rebuilt(capsys, storage):
    run(capsys, "guidance", "build", "nod")
    meta_path = storage.guidance_dir("nod") / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["palette_version"] = "0.0.0-old"
    meta_path.write_text(json.dumps(meta))
    _, out, _ = run(capsys, "caches", "--json")
    assert {r["id"]: r["status"] for r in json.loads(out)}["nod"] == "stale"
    code, out, _ = run(capsys, "guidance", "build", "nod")
    assert code == 0 and "built" in out


def test_corrupt_cache_files_are_typed_errors(capsys, storage):
    from newsmotion_engine.errors import CacheCorruptError
    from newsmotion_engine.guidance.cache import load_guidance

    run(capsys, "guidance", "build", "nod")
    path = storage.guidance_dir("nod") / "keypoints.npy"
    np.save(path, np.zeros((120, 133, 3), np.float64))
    with pytest.raises(CacheCorruptError, match="keypoints.npy"):
        load_guidance(storage, "nod")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CacheCorruptError, match="truncated"):
        load_guidance(storage, "nod")


def test_caches_ignores_stray_folders(capsys, storage):
    (storage.guidance_root / "Not A Slug").mkdir(parents=True)
    code, out, _ = run(capsys, "caches", "--json")
    assert code == 0 and "Not A Slug" not in out
