"""Where things live on disk. The root is ``storage/`` in the working directory, or
``$NEWSMOTION_STORAGE``. Every path the engine reads or writes is built here."""

from __future__ import annotations

import os
from pathlib import Path

from newsmotion_engine.ids import validate_id


def storage_root() -> Path:
    return Path(os.environ.get("NEWSMOTION_STORAGE", "storage")).resolve()


def motion_dir() -> Path:
    return storage_root() / "motion"


def driving_dir() -> Path:
    """Drop ``{loop_id}.mp4`` (or .mov/.webm/.mkv/.avi) here to add a custom loop."""
    return motion_dir() / "driving"


def guidance_root() -> Path:
    return motion_dir() / "preprocessed"


def guidance_dir(loop_id: str) -> Path:
    return guidance_root() / validate_id(loop_id, "loop id")


def persona_root() -> Path:
    return motion_dir() / "persona_caches"


def persona_dir(persona_id: str) -> Path:
    return persona_root() / validate_id(persona_id, "persona id")


def renders_root() -> Path:
    return motion_dir() / "renders"


def render_path(persona_id: str, loop_id: str, backend: str) -> Path:
    return (
        renders_root()
        / validate_id(persona_id, "persona id")
        / validate_id(loop_id, "loop id")
        / f"{validate_id(backend, 'backend')}.mp4"
    )


def scorecards_dir() -> Path:
    return motion_dir() / "scorecards"


def persona_inbox() -> Path:
    """Drop a portrait here; the Dagster sensor ingests it."""
    return storage_root() / "personas" / "inbox"


def persona_samples() -> Path:
    return storage_root() / "personas" / "samples"


def persona_sources() -> Path:
    """Each persona's source portrait, ``{persona_id}{suffix}``: what its cache is built from (kept
    so a persona can be rebuilt when newsmotion's normalization changes)."""
    return storage_root() / "personas" / "sources"


def find_persona_source(persona_id: str) -> Path | None:
    folder = persona_sources()
    validate_id(persona_id, "persona id")
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob(f"{persona_id}.*")):
        if path.is_file() and path.stem == persona_id:
            return path
    return None
