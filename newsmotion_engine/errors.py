"""Typed errors. Every user-facing failure is one of these, with a message that names the file
(or id) and the problem, so the CLI and Dagster can show it as one line."""

from __future__ import annotations

from pathlib import Path


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
