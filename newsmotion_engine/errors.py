"""Typed errors. Every user-facing failure is one of these, with a message that names the file
(or id) and the problem, so the CLI and Dagster can show it as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class NewsmotionError(Exception):
    """Base for errors the user can act on (bad input, bad cache). The CLI prints these as one
    line and exits non-zero; anything else is a bug and keeps its traceback."""


class InvalidIdError(NewsmotionError, ValueError):
    """An id (loop, persona) that is not a safe slug."""


class BadInputError(NewsmotionError):
    """A user-supplied file that cannot be used: ``BadInputError(path, problem)``."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class CacheError(NewsmotionError):
    """Base for cache problems: ``CacheError(cache_dir, problem)``."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class CacheMissingError(CacheError):
    """The cache directory (or a file it lists) does not exist."""


class CacheCorruptError(CacheError):
    """The cache exists but does not match its own metadata (truncated, wrong dtype/shape,
    unparsable metadata, hash mismatch)."""


class CacheStaleError(CacheError):
    """The cache is intact but was built from a different source or with other parameters;
    it must be rebuilt, never reused."""


class CacheNotReadyError(NewsmotionError):
    """A cache a render needs is missing, stale or corrupt. Renders only load caches, so this says
    what to build: ``CacheNotReadyError("guidance cache for loop 'nod'", "missing", detail, remedy)``
    reads "guidance cache for loop 'nod' is missing: materialize guidance_cache[nod] or run
    `newsmotion guidance build nod`"."""

    def __init__(self, what: str, state: str, detail: str, remedy: str):
        self.what = what
        self.state = state
        self.detail = detail
        self.remedy = remedy
        super().__init__(f"{what} is {state}{f' ({detail})' if detail else ''}: {remedy}")


class InfillError(NewsmotionError, ValueError):
    """Bad input to the infill stage of sparse keyframes (shapes, dtypes, ratios, out-of-order
    keyframes)."""


# Attributes an error carries besides its message (see the classes above); they travel with it
# across a process boundary.
_ERROR_FIELDS = ("path", "problem", "what", "state", "detail", "remedy")


def error_record(exc: BaseException) -> dict[str, Any]:
    """A JSON-able record of ``exc`` for another process (the Dagster Pipes entry point sends it
    to the orchestrator): ``{"kind": class name, "bases": its base classes' names, "message": the
    first line, ...its fields}``."""
    text = str(exc).strip()
    record: dict[str, Any] = {
        "kind": type(exc).__name__,
        "bases": [cls.__name__ for cls in type(exc).__mro__[1:]],
        "message": text.splitlines()[0] if text else type(exc).__name__,
    }
    record.update({name: str(getattr(exc, name)) for name in _ERROR_FIELDS if getattr(exc, name, None) is not None})
    return record


def error_from_record(record: dict[str, Any]) -> NewsmotionError | None:
    """The error :func:`error_record` described, rebuilt as the nearest :class:`NewsmotionError`
    class this process knows (the same class when its module is imported here, else a base such as
    :class:`BadInputError`), so ``isinstance`` checks and the message are the same on both sides;
    ``None`` when it was no :class:`NewsmotionError` at all (a bug in the engine: the caller
    reports the process as failed)."""
    known = {cls.__name__: cls for cls in _subclasses(NewsmotionError)} | {"NewsmotionError": NewsmotionError}
    names = [record.get("kind"), *record.get("bases", [])]
    cls = next((known[name] for name in names if name in known), None)
    if cls is None:
        return None
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(record.get("message", "")))  # the subclasses' __init__ only format this message
    for name in _ERROR_FIELDS:
        if name in record:
            setattr(exc, name, Path(record[name]) if name == "path" else record[name])
    return exc


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
