"""The shared cache mechanism: atomic writes, validation, typed errors, staleness."""

import json
import os
import stat
import threading

import numpy as np
import pytest

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheCorruptError, CacheMissingError, CacheStaleError

SCHEMA = cachedir.CacheSchema(
    kind="demo", version=3, arrays={"a.npy": cachedir.ArraySpec("float32", (None, 4))}, files=("note.txt",)
)
SOURCE = {"kind": "test", "sha256": "abc"}
PARAMS = {"p": 1}


def _write(path, rows=5, fail=False):
    def build(tmp):
        np.save(tmp / "a.npy", np.arange(rows * 4, dtype=np.float32).reshape(rows, 4))
        (tmp / "note.txt").write_text("hello")
        if fail:
            raise RuntimeError("boom")

    with cachedir.cache_lock(path):
        return cachedir.write_cache(path, build, schema=SCHEMA, source=SOURCE, params=PARAMS, extra={"x": 1})


def test_roundtrip_memory_maps_and_records_files(tmp_path):
    path = _write(tmp_path / "one")
    loaded = cachedir.read_cache(path, SCHEMA, expected_source=SOURCE, expected_params=PARAMS, verify=True)
    assert isinstance(loaded.arrays["a.npy"], np.memmap)
    assert loaded.arrays["a.npy"].shape == (5, 4)
    files = loaded.metadata["files"]
    assert files["a.npy"]["shape"] == [5, 4] and files["a.npy"]["dtype"] == "float32"
    assert files["note.txt"]["bytes"] == 5 and len(files["note.txt"]["sha256"]) == 64
    assert loaded.metadata["x"] == 1 and loaded.metadata["schema_version"] == 3


def test_failed_build_leaves_nothing_and_keeps_old_cache(tmp_path):
    path = _write(tmp_path / "one", rows=5)
    with pytest.raises(RuntimeError):
        _write(path, rows=7, fail=True)
    assert cachedir.read_cache(path, SCHEMA).arrays["a.npy"].shape == (5, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".one.lock", "one"]


def test_missing(tmp_path):
    with pytest.raises(CacheMissingError):
        cachedir.read_cache(tmp_path / "nope", SCHEMA)


def test_truncated_file(tmp_path):
    path = _write(tmp_path / "one")
    data = (path / "a.npy").read_bytes()
    (path / "a.npy").write_bytes(data[:-8])
    with pytest.raises(CacheCorruptError, match="truncated"):
        cachedir.read_cache(path, SCHEMA)


def test_wrong_dtype_and_shape(tmp_path):
    path = _write(tmp_path / "one")
    np.save(path / "a.npy", np.zeros((5, 2), dtype=np.float64))  # metadata size fixed below
    meta = json.loads((path / "metadata.json").read_text())
    meta["files"]["a.npy"]["bytes"] = (path / "a.npy").stat().st_size
    (path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(CacheCorruptError, match="dtype float64"):
        cachedir.read_cache(path, SCHEMA)
    np.save(path / "a.npy", np.zeros((5, 3), dtype=np.float32))
    meta["files"]["a.npy"]["bytes"] = (path / "a.npy").stat().st_size
    (path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(CacheCorruptError, match="shape"):
        cachedir.read_cache(path, SCHEMA)


def test_unparsable_and_missing_metadata(tmp_path):
    path = _write(tmp_path / "one")
    (path / "metadata.json").write_text("{not json")
    with pytest.raises(CacheCorruptError, match="not valid JSON"):
        cachedir.read_cache(path, SCHEMA)
    (path / "metadata.json").unlink()
    with pytest.raises(CacheCorruptError, match="missing"):
        cachedir.read_cache(path, SCHEMA)


def test_hash_mismatch_only_found_when_verifying(tmp_path):
    path = _write(tmp_path / "one")
    (path / "note.txt").write_text("HELLO")  # same size, other bytes
    cachedir.read_cache(path, SCHEMA)
    with pytest.raises(CacheCorruptError, match="sha256"):
        cachedir.read_cache(path, SCHEMA, verify=True)


def test_stale_source_params_and_schema(tmp_path):
    path = _write(tmp_path / "one")
    with pytest.raises(CacheStaleError, match="different source"):
        cachedir.read_cache(path, SCHEMA, expected_source={"kind": "test", "sha256": "other"})
    with pytest.raises(CacheStaleError, match="different parameters"):
        cachedir.read_cache(path, SCHEMA, expected_params={"p": 2})
    newer = cachedir.CacheSchema(kind="demo", version=4, arrays=SCHEMA.arrays, files=SCHEMA.files)
    with pytest.raises(CacheStaleError, match="schema version"):
        cachedir.read_cache(path, newer)


def test_rebuild_keeps_subcaches_of_same_source(tmp_path):
    path = _write(tmp_path / "one")
    (path / "backend").mkdir()
    (path / "backend" / "x.bin").write_bytes(b"1")
    _write(path)
    assert (path / "backend" / "x.bin").exists()


def test_concurrent_writers_are_serialized(tmp_path):
    path = tmp_path / "one"
    errors = []

    def worker(rows):
        try:
            _write(path, rows=rows)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(r,)) for r in (3, 4, 5, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cachedir.read_cache(path, SCHEMA, verify=True).arrays["a.npy"].shape[0] in (3, 4, 5, 6)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def _read(path):
    return cachedir.read_cache(path, SCHEMA, expected_source=SOURCE, expected_params=PARAMS)


def _build_into(path, calls):
    def build(*prepared):
        calls.append(("build", prepared))
        cachedir.write_cache(
            path, lambda tmp: (np.save(tmp / "a.npy", np.zeros((2, 4), np.float32)), (tmp / "note.txt").write_text("x")),
            schema=SCHEMA, source=SOURCE, params=PARAMS,
        )  # fmt: skip

    return build


def test_ensure_builds_once_then_reads_and_force_rebuilds(tmp_path):
    path, calls = tmp_path / "c", []
    cache, built = cachedir.ensure(path, lambda: _read(path), _build_into(path, calls))
    assert built and cache.arrays["a.npy"].shape == (2, 4) and len(calls) == 1
    assert cachedir.ensure(path, lambda: _read(path), _build_into(path, calls))[1] is False and len(calls) == 1
    assert cachedir.ensure(path, lambda: _read(path), _build_into(path, calls), force=True)[1] and len(calls) == 2


def test_ensure_rechecks_under_the_lock(tmp_path):
    """A builder that waited for the lock reuses what the other one built instead of building again."""
    path, calls, reads = tmp_path / "c", [], []

    def read():
        reads.append(1)
        if len(reads) == 1:  # the unlocked read misses; another process builds meanwhile
            _build_into(path, [])()
            raise CacheMissingError(path, "not yet")
        return _read(path)

    cache, built = cachedir.ensure(path, read, _build_into(path, calls))
    assert not built and not calls and len(reads) == 2


def test_ensure_prepare_runs_before_the_lock_and_feeds_build(tmp_path):
    path, calls = tmp_path / "c", []
    cache, built = cachedir.ensure(path, lambda: _read(path), _build_into(path, calls), prepare=lambda: "computed")
    assert built and calls == [("build", ("computed",))]

    def bad_input():
        raise ValueError("not a portrait")

    other = tmp_path / "d"
    with pytest.raises(ValueError, match="not a portrait"):
        cachedir.ensure(other, lambda: _read(other), _build_into(other, calls), prepare=bad_input)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.lock", "c"]  # no lock file, no folder for d


def test_cache_digest_is_content_not_time(tmp_path):
    path = tmp_path / "c"
    _write(path)
    first = _read(path)
    digest = cachedir.cache_digest(first.metadata)
    assert digest == cachedir.cache_digest({**first.metadata, "created_at": "another time"})
    _write(path)  # same bytes again: same digest
    assert cachedir.cache_digest(_read(path).metadata) == digest
    _write(path, rows=6)
    assert cachedir.cache_digest(_read(path).metadata) != digest
    assert cachedir.cache_digest({**first.metadata, "params": {"p": 2}}) != digest


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_cache_folders_and_files_follow_the_umask(tmp_path, umask_022):
    """A Dagster webserver or daemon running as another user must be able to read every cache:
    0755 folders and 0644 files under umask 022 (mkdtemp alone would give 0700)."""
    path = _write(tmp_path / "caches" / "one")
    assert _mode(path) == 0o755 and _mode(path.parent) == 0o755
    assert {p.name: _mode(p) for p in path.iterdir()} == {"a.npy": 0o644, "note.txt": 0o644, "metadata.json": 0o644}
    # A rebuild replaces the folder and keeps the modes.
    _write(path, rows=2)
    assert _mode(path) == 0o755 and _mode(path / "a.npy") == 0o644


def test_copy_into_place_is_atomic_and_follows_the_umask(tmp_path, umask_022):
    src = tmp_path / "take.mp4"
    src.write_bytes(b"video bytes")
    target = cachedir.copy_into_place(src, tmp_path / "driving" / "nod.mp4")
    assert target.read_bytes() == b"video bytes" and _mode(target) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["nod.mp4"]  # no temp file left
    with pytest.raises(FileNotFoundError):
        cachedir.copy_into_place(tmp_path / "missing.mp4", tmp_path / "driving" / "x.mp4")
    assert sorted(p.name for p in target.parent.iterdir()) == ["nod.mp4"]
