"""What the studio shows: every render on disk, with the state of its clip and its telemetry.

A render is a ``{backend}.mp4`` and/or ``{backend}.json`` under
``motion/renders/{persona}/{loop}/``. Nothing here raises on a bad render: a missing, truncated or
unreadable clip and a telemetry file that cannot be read are recorded on the entry
(``clip_state``, ``problems``) so its page can say so and the build goes on.

Example::

    for entry in scan_renders(store):
        entry.key, entry.clip_state, entry.telemetry and entry.telemetry.fps_achieved
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.ids import validate_id
from newsmotion_engine.render.telemetry import RenderTelemetry, TelemetryError
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.encode import probe_video

__all__ = ["CLIP_STATES", "RenderEntry", "scan_renders", "group_by_pair"]

# "ok": decodes and has the frames its telemetry records; "truncated": fewer frames than
# recorded; "unreadable": not a decodable video; "missing": telemetry without its mp4.
CLIP_STATES = ("ok", "truncated", "unreadable", "missing")


@dataclass(frozen=True)
class RenderEntry:
    """One render as found on disk. ``frames_on_disk``: video frames counted in the mp4 (``None``
    when it has none); ``width``/``height``: the video's (else the telemetry's)."""

    persona_id: str
    loop_id: str
    backend: str
    mp4: Path
    telemetry: RenderTelemetry | None
    clip_state: str
    frames_on_disk: int | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        """``persona/loop/backend``: the render's address in the site."""
        return f"{self.persona_id}/{self.loop_id}/{self.backend}"

    @property
    def playable(self) -> bool:
        return self.clip_state == "ok"

    @property
    def frames(self) -> int | None:
        """Frames the clip should have (telemetry), else the ones counted."""
        return self.telemetry.frames if self.telemetry else self.frames_on_disk


def _probe(entry_mp4: Path, tele: RenderTelemetry | None) -> tuple[str, dict, list[str]]:
    if not entry_mp4.is_file():
        return "missing", {}, [f"{entry_mp4.name} is missing (the telemetry is here, the clip is not)"]
    try:
        info = probe_video(entry_mp4)
    except (BadInputError, NewsmotionError) as exc:
        return "unreadable", {}, [f"the clip cannot be read: {exc}"]
    video = {"frames_on_disk": info["frames"] or None, "width": info["width"], "height": info["height"], "fps": info["fps"] or None}
    if not info["frames"]:
        return "unreadable", video, ["the clip holds no video frames"]
    if tele is not None and info["frames"] < tele.frames:
        return "truncated", video, [f"the clip is truncated: {info['frames']} of the {tele.frames} frames its telemetry records"]
    return "ok", video, []


# The clips of an ab_comparison run (storage/motion/ab/{persona}/{loop}/{label}.mp4) appear beside
# the renders under this prefix, so each comparison gets its A/B page like any two renders.
AB_PREFIX = "ab-"


def ab_entry_name(label: str) -> str:
    """The studio's name of an ``ab_comparison`` side (its entries' ``backend``)."""
    return f"{AB_PREFIX}{label}"


def scan_renders(storage: Storage) -> list[RenderEntry]:
    """Every render under ``storage.renders_root`` and every ``ab_comparison`` clip under
    ``storage.ab_root`` (named :func:`ab_entry_name`), sorted by persona, loop, backend.

    Folders or files whose names are not ids are skipped (nothing else writes there)."""
    found: dict[tuple[str, str, str], Path] = {}
    for root, prefix in ((storage.renders_root, ""), (storage.ab_root, AB_PREFIX)):
        _scan_root(root, prefix, found)
    return _entries(found)


def _scan_root(root: Path, prefix: str, found: dict[tuple[str, str, str], Path]) -> None:
    for path in sorted(root.glob("*/*/*")) if root.is_dir() else []:
        if path.suffix not in (".mp4", ".json") or path.name.startswith("."):
            continue
        persona_id, loop_id, backend = path.parent.parent.name, path.parent.name, prefix + path.stem
        if prefix and path.stem == "comparison":  # the ab_comparison record, not a clip
            continue
        try:
            for value, what in ((persona_id, "persona id"), (loop_id, "loop id"), (backend, "backend")):
                validate_id(value, what)
        except NewsmotionError:
            continue
        found[(persona_id, loop_id, backend)] = path.with_suffix(".mp4")


def _entries(found: dict[tuple[str, str, str], Path]) -> list[RenderEntry]:
    entries = []
    for (persona_id, loop_id, backend), mp4 in sorted(found.items()):
        problems: list[str] = []
        tele = None
        json_path = mp4.with_suffix(".json")
        if json_path.is_file():
            try:
                tele = RenderTelemetry.read(json_path)
            except TelemetryError as exc:
                problems.append(f"telemetry cannot be read: {exc}")
        else:
            problems.append(f"no telemetry ({json_path.name} is missing)")
        state, video, clip_problems = _probe(mp4, tele)
        entries.append(
            RenderEntry(persona_id, loop_id, backend, mp4, tele, state, problems=tuple(clip_problems + problems), **video)
        )
    return entries


def group_by_pair(entries: list[RenderEntry]) -> dict[tuple[str, str], list[RenderEntry]]:
    """``{(persona, loop): [entries sorted by backend]}``."""
    groups: dict[tuple[str, str], list[RenderEntry]] = {}
    for entry in entries:
        groups.setdefault((entry.persona_id, entry.loop_id), []).append(entry)
    return groups
