"""Watching a drop folder without trusting what lands in it.

Pure logic (no Dagster), so sensors stay thin and it is testable on its own. One scan compares the
folder with the cursor state and sorts every file into: ready (complete, new or changed since it was
last handled), waiting (size or mtime still changing: probably still being copied), or skipped (a
reason: wrong type, too large, a name that cannot become an id). Skipped files are remembered by
(size, mtime) so each is reported once, not on every tick, and re-examined only if it changes.
``settled`` lists every usable file present and unchanged since it was ready (this scan or an
earlier one), so a sensor can reconcile what is on disk with what it registered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FileEntry:
    path: Path
    size: int
    mtime_ns: int

    @property
    def signature(self) -> list[int]:
        return [self.size, self.mtime_ns]


@dataclass
class ScanResult:
    ready: list[FileEntry] = field(default_factory=list)
    waiting: list[FileEntry] = field(default_factory=list)
    skipped: list[tuple[FileEntry, str]] = field(default_factory=list)
    settled: list[FileEntry] = field(default_factory=list)
    cursor: str = "{}"


def scan_folder(
    folder: Path,
    cursor: str | None,
    *,
    suffixes: tuple[str, ...],
    max_bytes: int,
    name_ok: Callable[[Path], str | None] = lambda p: None,
    stable_scans: int = 1,
) -> ScanResult:
    """Scan ``folder`` against the JSON ``cursor`` of a previous scan.

    ``name_ok(path)`` returns a problem string for a name that cannot be used, else None. A file is
    ready once its (size, mtime) stayed the same over ``stable_scans`` scans after the one that
    first saw it (1: two consecutive scans agree). A file still being copied changes between them;
    a copy that pauses longer than one interval (a slow network share) is caught by asking for 2.
    """
    try:
        state = json.loads(cursor) if cursor else {}
    except ValueError:
        state = {}
    seen: dict[str, list[int]] = state.get("seen", {})  # handled (ready or skipped) signatures
    # Unsettled files: [size, mtime_ns, scans it has been unchanged for] (older cursors: no count).
    pending: dict[str, list[int]] = state.get("pending", {})
    # Names in ``seen`` that were skipped; a cursor without this key predates it, so its seen files
    # are examined once more to tell the usable ones apart.
    bad: set[str] | None = set(state["bad"]) if "bad" in state else None
    result = ScanResult()
    new_pending: dict[str, list[int]] = {}
    present: set[str] = set()
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue  # hidden temp files of atomic copies; sub-folders
            try:
                stat = path.stat()
            except OSError:
                continue  # vanished between listing and stat
            entry = FileEntry(path, stat.st_size, stat.st_mtime_ns)
            present.add(path.name)
            if seen.get(path.name) == entry.signature:
                if bad is None:
                    usable = _problem(entry, suffixes, max_bytes, name_ok) is None
                else:
                    usable = path.name not in bad
                if usable:
                    result.settled.append(entry)
                continue
            problem = _problem(entry, suffixes, max_bytes, name_ok)
            if problem:
                result.skipped.append((entry, problem))
                seen[path.name] = entry.signature
            elif (before := pending.get(path.name)) is not None and before[:2] == entry.signature:
                unchanged = (before[2] if len(before) > 2 else 0) + 1
                if unchanged >= stable_scans:
                    result.ready.append(entry)
                    result.settled.append(entry)
                    seen[path.name] = entry.signature
                else:
                    result.waiting.append(entry)
                    new_pending[path.name] = [*entry.signature, unchanged]
            else:
                result.waiting.append(entry)
                new_pending[path.name] = [*entry.signature, 0]
    # Forget files that were removed, so a file dropped again later is handled again.
    seen = {name: sig for name, sig in seen.items() if name in present}
    usable = {e.path.name for e in result.settled}
    state = {"seen": seen, "pending": new_pending, "bad": sorted(name for name in seen if name not in usable)}
    result.cursor = json.dumps(state, sort_keys=True)
    return result


def _problem(entry: FileEntry, suffixes: tuple[str, ...], max_bytes: int, name_ok: Callable[[Path], str | None]) -> str | None:
    if entry.path.suffix.lower() not in suffixes:
        return f"not a supported file type ({entry.path.suffix or 'no extension'}; expected {', '.join(suffixes)})"
    if entry.size == 0:
        return "empty file"
    if entry.size > max_bytes:
        return f"too large ({entry.size / 2**20:.0f} MiB > {max_bytes / 2**20:.0f} MiB limit)"
    return name_ok(entry.path)
