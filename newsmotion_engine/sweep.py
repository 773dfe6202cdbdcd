"""Leftover temporary files under the storage root: finding them and removing the stale ones.

Every writer writes under a temporary name beside its target and renames into place, and removes
its temporary file itself when it fails or is interrupted. A process killed outright (SIGKILL, an
out-of-memory kill, a power cut) cannot: its half-written mp4 or cache folder stays, hidden (the
names start with a dot). The writing modules define their temporary names
(``video/encode.py``, ``render/telemetry.py``, ``cachedir.py``); this module only finds them.

A temporary entry is stale, and removed, when

- its writer works under a lock (a cache build under the cache id's lock, a render under its
  clip's lock, :func:`newsmotion_engine.render.job.render_lock`) and that lock is free: nobody
  is writing that target, so nothing will ever rename the entry into place; or
- it has not changed for ``min_age_s`` (default 5 minutes): the copies of source portraits and
  rejected files, and writability probes, take no lock and last well under a second.

A live render's temporary mp4 is never touched: its clip's lock is held for as long as it writes.

Example::

    report = sweep_stale_temp(Storage.from_env().root)
    for entry in report.removed:
        print(f"removed stale temporary {entry.kind} {entry.path} ({entry.why})")
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from newsmotion_engine import cachedir
from newsmotion_engine.render.telemetry import TEMP_NAME as TELEMETRY_TEMP
from newsmotion_engine.video.encode import TEMP_NAME as VIDEO_TEMP
from newsmotion_engine.video.encode import TEMP_PROBE

__all__ = ["DEFAULT_MIN_AGE_S", "SweepReport", "SweptEntry", "sweep_stale_temp", "temp_kind"]

DEFAULT_MIN_AGE_S = 300.0


@dataclass(frozen=True)
class _TempKind:
    """One kind of temporary name: its pattern, and the target whose lock its writer holds
    (``None``: a writer without a lock, judged by age only)."""

    kind: str
    pattern: re.Pattern[str]
    locked_target: Callable[[re.Match[str]], str] | None


_KINDS = (
    _TempKind("video", VIDEO_TEMP, lambda m: f"{m['stem']}.mp4"),
    # The telemetry JSON is written by the render holding its clip's lock ({stem}.mp4).
    _TempKind("telemetry", TELEMETRY_TEMP, lambda m: f"{Path(m['name']).stem}.mp4"),
    _TempKind("cache build", cachedir.TEMP_BUILD_DIR, lambda m: m["name"]),
    _TempKind("replaced cache", cachedir.TEMP_OLD_DIR, lambda m: m["name"]),
    _TempKind("copy", cachedir.TEMP_COPY, None),
    _TempKind("probe", TEMP_PROBE, None),
)


@dataclass(frozen=True)
class SweptEntry:
    path: Path
    kind: str
    bytes: int
    why: str  # "its lock is free" / "unchanged for 412 s"


@dataclass
class SweepReport:
    removed: list[SweptEntry] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # temporary entries of live writers (or too young)

    @property
    def removed_bytes(self) -> int:
        return sum(e.bytes for e in self.removed)


def temp_kind(name: str) -> str | None:
    """Which kind of temporary entry a file or folder name is ("video", "cache build", ...), or
    None for a name no newsmotion writer uses as a temporary."""
    for kind in _KINDS:
        if kind.pattern.match(name):
            return kind.kind
    return None


def sweep_stale_temp(root: Path | str, *, min_age_s: float = DEFAULT_MIN_AGE_S, now: float | None = None) -> SweepReport:
    """Remove the stale temporary files and folders under ``root`` (see the module docstring).

    Args:
        root: a storage root (or any folder under one).
        min_age_s: age after which a temporary entry whose writer takes no lock counts as stale.
        now: the clock, for tests (default ``time.time()``).

    Returns:
        What was removed and which temporary entries were kept (their writer is alive).
    """
    root = Path(root)
    now = time.time() if now is None else now
    report = SweepReport()
    if not root.is_dir():
        return report
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        for name in list(dirs) + files:
            match, kind = _match(name)
            if match is None:
                continue
            path = here / name
            if name in dirs:
                dirs.remove(name)  # never descend into a temporary folder
            why = _stale(path, match, kind, now, min_age_s)
            if why is None:
                report.kept.append(path)
                continue
            size = _size(path)
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except FileNotFoundError:
                continue  # its writer finished or cleaned up in the meantime
            report.removed.append(SweptEntry(path, kind.kind, size, why))
    return report


def _match(name: str) -> tuple[re.Match[str] | None, _TempKind | None]:
    if not name.startswith("."):
        return None, None
    for kind in _KINDS:
        m = kind.pattern.match(name)
        if m:
            return m, kind
    return None, None


def _stale(path: Path, match: re.Match[str], kind: _TempKind, now: float, min_age_s: float) -> str | None:
    if kind.locked_target is not None:
        lock = cachedir.lock_path(path.parent / kind.locked_target(match))
        if not lock.exists():
            return "no writer holds its lock"
        try:
            # Taking it at once means no process is writing the target (a killed writer's lock is
            # released by the kernel with its file descriptor).
            with FileLock(str(lock), timeout=0):
                return "its lock is free"
        except Timeout:
            return None
    age = now - _newest_mtime(path)
    return f"unchanged for {age:.0f} s" if age >= min_age_s else None


def _newest_mtime(path: Path) -> float:
    try:
        newest = path.lstat().st_mtime
        if path.is_dir():
            for sub in path.rglob("*"):
                newest = max(newest, sub.lstat().st_mtime)
        return newest
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())
        return path.lstat().st_size
    except OSError:
        return 0
