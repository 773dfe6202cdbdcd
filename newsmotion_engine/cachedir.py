"""One cache mechanism for every cache directory (guidance, persona, backend artifacts).

A cache is a directory holding some files plus ``metadata.json``. This module owns the parts all
caches share; each cache kind only declares a :class:`CacheSchema` (which arrays, which shapes):

- **Atomic writes.** :func:`write_cache` builds into a temporary sibling (``.{name}.tmp-*``) and
  renames it into place, so a reader sees the old cache or the new one, never a torn one; a failed
  build leaves nothing behind.
- **One writer per id.** A file lock (``.{name}.lock`` beside the directory) serializes builders.
- **Self-describing files.** ``metadata.json["files"]`` lists every file with bytes + sha256 (and
  shape + dtype for ``.npy``), so :func:`read_cache` can validate cheaply (sizes, npy headers) and,
  with ``verify=True``, fully (hashes).
- **Staleness.** ``metadata.json`` records the ``source`` (kind + sha256) and ``params`` it was
  built from; a reader passing the expected ones gets :class:`CacheStaleError` on any difference.

Nested caches (e.g. ``{persona}/wan-animate/720x1280/``) use the same functions: adding a backend's
artifacts is a new sub-cache, never a migration of the parent.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from filelock import FileLock

from newsmotion_engine.errors import CacheCorruptError, CacheError, CacheMissingError, CacheStaleError

T = TypeVar("T")

METADATA_NAME = "metadata.json"

# Temporary names this module writes beside a target (group ``name``: the target's name). A build's
# folder and a replaced cache moved aside are written under the target's lock; a copy's file is not.
TEMP_BUILD_DIR = re.compile(r"^\.(?P<name>.+)\.tmp-[A-Za-z0-9_]{8}$")
TEMP_OLD_DIR = re.compile(r"^\.(?P<name>.+)\.old-\d+-[0-9a-f]{8}$")
TEMP_COPY = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.part$")

# Shape entries: an int is an exact size, None matches any size.
ShapeSpec = tuple[int | None, ...]


@dataclass(frozen=True)
class ArraySpec:
    """An ``.npy`` array a cache must hold: dtype and shape pattern (``None`` = any size)."""

    dtype: str
    shape: ShapeSpec


@dataclass(frozen=True)
class CacheSchema:
    """What one kind of cache holds. ``arrays`` are memory-mapped on load; ``files`` are other
    required files (checked for size, and hash when verifying)."""

    kind: str
    version: int
    arrays: Mapping[str, ArraySpec]
    files: tuple[str, ...] = ()


@dataclass
class LoadedCache:
    """A validated cache: its directory, parsed metadata and memory-mapped arrays."""

    path: Path
    metadata: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(value: Any) -> str:
    """Stable hash of a JSON-able value (keys sorted), for parameter and source digests."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def lock_path(cache_dir: Path) -> Path:
    return cache_dir.parent / f".{cache_dir.name}.lock"


@contextlib.contextmanager
def cache_lock(cache_dir: Path, timeout: float = 600.0) -> Iterator[None]:
    """Serialize writers of one cache id (other processes and threads)."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path(cache_dir)), timeout=timeout):
        yield


def _npy_header(path: Path) -> tuple[tuple[int, ...], str, int]:
    """(shape, dtype, data offset) from an .npy header without reading the data."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        # The public per-version readers (numpy 2 dropped the private _read_array_header).
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fh)
        if fortran:
            raise ValueError("Fortran-ordered arrays are not used by newsmotion caches")
        return tuple(shape), dtype.str, fh.tell()


def describe_files(directory: Path) -> dict[str, dict[str, Any]]:
    """The ``files`` table for every regular file under ``directory`` (metadata.json and nested
    sub-caches excluded): bytes + sha256, plus shape + dtype for .npy."""
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.iterdir()):
        if path.name == METADATA_NAME or not path.is_file():
            continue
        entry: dict[str, Any] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
        if path.suffix == ".npy":
            shape, dtype, _ = _npy_header(path)
            entry.update(shape=list(shape), dtype=np.dtype(dtype).name)
        table[path.name] = entry
    return table


def write_cache(
    cache_dir: Path,
    build: Callable[[Path], None],
    *,
    schema: CacheSchema,
    source: Mapping[str, Any],
    params: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    keep_subdirs: bool = True,
    finalize: Callable[[Path, dict[str, Any]], None] | None = None,
) -> Path:
    """Build a cache atomically: ``build(tmp_dir)`` writes the files, this adds ``metadata.json``
    (schema, source, params, files table, created_at + ``extra``) and renames into place.
    ``finalize(tmp_dir, metadata)`` may fill metadata fields that depend on what was written.

    Call inside :func:`cache_lock`. Nested sub-caches of an existing cache are carried over when
    ``keep_subdirs`` and the source is unchanged (they were derived from the same input); a new
    source drops them.
    """
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.tmp-", dir=cache_dir.parent))
    # mkdtemp makes 0700 folders; a cache must be readable by a Dagster webserver or daemon running
    # as another user, so the published folder gets what the umask allows (0755 under umask 022).
    os.chmod(tmp, 0o777 & ~current_umask())
    try:
        build(tmp)
        _check_schema_files(tmp, schema)
        metadata = {
            "schema_version": schema.version,
            "kind": schema.kind,
            **(dict(extra) if extra else {}),
            "source": dict(source),
            "params": dict(params),
            "created_at": utc_now(),
            "files": describe_files(tmp),
        }
        if finalize is not None:
            finalize(tmp, metadata)
        (tmp / METADATA_NAME).write_text(json.dumps(metadata, indent=2, sort_keys=False))
        if keep_subdirs and cache_dir.is_dir():
            old_source = _try_read_json(cache_dir / METADATA_NAME).get("source")
            if old_source == metadata["source"]:
                for sub in cache_dir.iterdir():
                    if sub.is_dir() and not (tmp / sub.name).exists():
                        shutil.copytree(sub, tmp / sub.name)
        _swap_into_place(tmp, cache_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return cache_dir


def _check_schema_files(tmp: Path, schema: CacheSchema) -> None:
    missing = [n for n in (*schema.arrays, *schema.files) if not (tmp / n).is_file()]
    if missing:  # a builder bug, not user input: fail loudly before anything is published
        raise RuntimeError(f"cache build for {schema.kind} did not write {missing}")


def _swap_into_place(tmp: Path, cache_dir: Path) -> None:
    # rename() cannot replace a non-empty directory: move the old one aside first, then drop it.
    # A reader racing the two renames sees "missing" for a moment, never a torn cache.
    old = None
    if cache_dir.exists():
        old = cache_dir.parent / f".{cache_dir.name}.old-{os.getpid()}-{os.urandom(4).hex()}"
        os.rename(cache_dir, old)
    os.rename(tmp, cache_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def current_umask() -> int:
    """The process umask. Linux reports it in /proc (thread-safe); elsewhere it is read by setting
    and restoring it, since POSIX offers no getter."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain ``open()`` gives a new file under the process umask (0644 under 022)."""
    return 0o666 & ~current_umask()


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """A temporary sibling of ``target`` to write, renamed over ``target`` when the block ends, so a
    watching sensor or a reader never sees half a file; removed when the block fails. It gets
    :func:`file_mode` (a temporary file is created 0600, which would hide a kept portrait or driving
    video from a Dagster daemon running as another user)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        os.fchmod(fd, file_mode())
        os.close(fd)
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_into_place(src: Path, target: Path) -> Path:
    """Copy ``src`` to ``target`` atomically (:func:`replacing`); a failed copy leaves nothing behind."""
    with replacing(target) as tmp:
        shutil.copyfile(src, tmp)
    return target


def ensure(
    cache_dir: Path,
    read: Callable[[], T],
    build: Callable[..., object],
    *,
    force: bool = False,
    prepare: Callable[[], Any] | None = None,
) -> tuple[T, bool]:
    """Read-or-build, the one way every cache is made current: ``(cache, built)``.

    ``read()`` loads and validates the cache and raises :class:`CacheError` when it is missing,
    corrupt or stale; ``build()`` writes it (with :func:`write_cache`). Double-checked under the
    cache's lock: a fast unlocked read first, then, holding the lock, a second read (another
    process may have finished the same build while we waited) before building. ``force`` always
    builds. The value returned is read back after the build, so callers get exactly what readers
    will see.

    ``prepare()``, when given, is the expensive part of a build that can fail on bad input: it runs
    after the unlocked read missed and before the lock is taken, and ``build(prepared)`` receives
    its result. Bad input then leaves nothing behind, not even the lock file.
    """
    if not force:
        try:
            return read(), False
        except CacheError:
            pass  # missing, corrupt or stale: build below
    if prepare is not None:
        prepared = prepare()
        write = lambda: build(prepared)  # noqa: E731
    else:
        write = build
    with cache_lock(cache_dir):
        if not force:
            try:
                return read(), False
            except CacheError:
                pass
        write()
    return read(), True


def cache_digest(metadata: Mapping[str, Any]) -> str:
    """A stable digest of what a cache holds: kind, schema version, source, params and every
    file's sha256 from its ``files`` table (not ``created_at``: a rebuild that writes the same bytes
    has the same digest). Cheap: it reads only the parsed ``metadata.json``.

    Renders fold the digests of their caches into their own input digest, and the Dagster cache
    assets report it as their data version.
    """
    files = metadata.get("files") or {}
    return sha256_json(
        {
            "kind": metadata.get("kind"),
            "schema_version": metadata.get("schema_version"),
            "source": metadata.get("source"),
            "params": metadata.get("params"),
            "files": {name: entry.get("sha256") for name, entry in sorted(files.items())},
        }
    )


def remove_cache(cache_dir: Path) -> None:
    """Delete a cache directory (under its lock)."""
    with cache_lock(cache_dir):
        if cache_dir.exists():
            shutil.rmtree(cache_dir)


def _try_read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_metadata(cache_dir: Path, schema: CacheSchema) -> dict[str, Any]:
    """Parse and sanity-check ``metadata.json`` (exists, JSON object, kind + schema version)."""
    meta_path = cache_dir / METADATA_NAME
    if not cache_dir.is_dir():
        raise CacheMissingError(cache_dir, f"no {schema.kind} cache here (build it first)")
    try:
        raw = meta_path.read_bytes()
    except FileNotFoundError:
        raise CacheCorruptError(meta_path, "metadata.json is missing") from None
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        raise CacheCorruptError(meta_path, f"metadata.json is not valid JSON ({exc})") from None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("files"), dict):
        raise CacheCorruptError(meta_path, "metadata.json lacks a 'files' table")
    if metadata.get("kind") != schema.kind:
        raise CacheCorruptError(meta_path, f"kind is {metadata.get('kind')!r}, expected {schema.kind!r}")
    if metadata.get("schema_version") != schema.version:
        raise CacheStaleError(
            cache_dir,
            f"schema version {metadata.get('schema_version')!r}, this newsmotion writes {schema.version}; rebuild",
        )
    return metadata


def _shape_matches(shape: tuple[int, ...], pattern: ShapeSpec) -> bool:
    return len(shape) == len(pattern) and all(p is None or p == s for s, p in zip(shape, pattern))


def read_cache(
    cache_dir: Path,
    schema: CacheSchema,
    *,
    expected_source: Mapping[str, Any] | None = None,
    expected_params: Mapping[str, Any] | None = None,
    verify: bool = False,
) -> LoadedCache:
    """Validate a cache and memory-map its arrays.

    Cheap checks always: metadata parses, schema kind/version, every listed file exists with the
    recorded byte size, each array's npy header matches the metadata and the schema. ``verify=True``
    also hashes every file. Raises :class:`CacheMissingError`, :class:`CacheCorruptError` or
    :class:`CacheStaleError` (source or params differ from the expected ones).
    """
    metadata = read_metadata(cache_dir, schema)
    if expected_source is not None and metadata.get("source") != dict(expected_source):
        raise CacheStaleError(cache_dir, "built from a different source; rebuild")
    if expected_params is not None and metadata.get("params") != dict(expected_params):
        raise CacheStaleError(cache_dir, "built with different parameters; rebuild")
    files = metadata["files"]
    for name in (*schema.arrays, *schema.files):
        if name not in files:
            raise CacheCorruptError(cache_dir / METADATA_NAME, f"files table does not list {name}")
    loaded = LoadedCache(path=cache_dir, metadata=metadata)
    for name, entry in files.items():
        path = cache_dir / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise CacheCorruptError(path, "listed in metadata.json but missing") from None
        if size != entry.get("bytes"):
            raise CacheCorruptError(path, f"{size} bytes, metadata.json says {entry.get('bytes')} (truncated?)")
        if verify and sha256_file(path) != entry.get("sha256"):
            raise CacheCorruptError(path, "sha256 does not match metadata.json (file changed or damaged)")
    for name, spec in schema.arrays.items():
        loaded.arrays[name] = _map_array(cache_dir / name, files[name], spec)
    return loaded


def _map_array(path: Path, entry: Mapping[str, Any], spec: ArraySpec) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CacheCorruptError(path, f"not a readable .npy file ({exc})") from None
    shape, dtype = tuple(array.shape), array.dtype.name
    if dtype != spec.dtype:
        raise CacheCorruptError(path, f"dtype {dtype}, expected {spec.dtype}")
    if not _shape_matches(shape, spec.shape):
        raise CacheCorruptError(path, f"shape {list(shape)}, expected {_fmt_shape(spec.shape)}")
    if list(shape) != entry.get("shape") or dtype != entry.get("dtype"):
        raise CacheCorruptError(path, f"shape/dtype {list(shape)} {dtype} differ from metadata.json")
    return array


def _fmt_shape(pattern: ShapeSpec) -> str:
    return "[" + ", ".join("*" if p is None else str(p) for p in pattern) + "]"


def load_status(load: Callable[[], T]) -> tuple[str, T | None, str]:
    """Run a cache loader and classify the outcome for status listings:
    ``("valid", cache, "")`` or ``("missing" | "stale" | "corrupt", None, problem)``."""
    try:
        return "valid", load(), ""
    except CacheMissingError:
        return "missing", None, ""
    except CacheStaleError as exc:
        return "stale", None, exc.problem
    except CacheError as exc:
        return "corrupt", None, exc.problem


def cache_bytes(cache_dir: Path) -> int:
    """Total bytes of a cache directory, sub-caches included."""
    return sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())
