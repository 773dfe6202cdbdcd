"""Each persona's source portrait, kept in ``personas/sources/{persona_id}{suffix}``.

The persona cache is derived from this file, so it can be rebuilt (e.g. when normalization
changes) without the user re-supplying the image. Written only after the portrait proved usable.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.ids import SLUG_RE, validate_id
from newsmotion_engine.storage import Storage

PORTRAIT_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


def install_source(storage: Storage, image: Path, persona_id: str) -> Path:
    """Copy ``image`` to ``personas/sources/{persona_id}{suffix}`` (temp file + rename, so a
    reader never sees half a file) and drop any older source of that id with another suffix."""
    validate_id(persona_id, "persona id")
    folder = storage.persona_sources
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{persona_id}{image.suffix.lower()}"
    if image.resolve() == target.resolve():
        return target
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{persona_id}.", suffix=".part")
    os.close(fd)
    try:
        shutil.copyfile(image, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for other in folder.glob(f"{persona_id}.*"):
        if other != target and other.stem == persona_id:
            other.unlink()
    return target


def source_persona_ids(storage: Storage) -> list[str]:
    """Ids of the personas with a kept source portrait, sorted."""
    folder = storage.persona_sources
    if not folder.is_dir():
        return []
    return sorted(
        {p.stem for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PORTRAIT_SUFFIXES and SLUG_RE.match(p.stem)}
    )


def add_persona(storage: Storage, image: Path, persona_id: str, *, force: bool = False, progress=None):
    """``newsmotion persona add``: build the cache from ``image`` (:func:`ensure_persona`) and keep
    the image as the persona's source. Refuses to replace a persona built from a different portrait
    unless ``force``. Bad input raises before anything is written. Returns ``(cache, built)``."""
    from newsmotion_engine.persona.cache import ensure_persona, image_source

    validate_id(persona_id, "persona id")
    image = Path(image)
    if image.suffix.lower() not in PORTRAIT_SUFFIXES:
        raise BadInputError(image, f"unsupported file type {image.suffix or '(none)'}; use {', '.join(PORTRAIT_SUFFIXES)}")
    existing = storage.find_persona_source(persona_id)
    if existing is not None and not force and image_source(existing) != image_source(image):
        raise NewsmotionError(
            f"persona {persona_id!r} already exists from another portrait ({existing}); pass --force to replace it"
        )
    cache, built = ensure_persona(storage, persona_id, image=image, force=force, progress=progress)
    install_source(storage, image, persona_id)
    return cache, built
