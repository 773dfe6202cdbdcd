"""Each persona's source portrait, kept in ``personas/sources/{persona_id}{suffix}``.

The persona cache is derived from this file, so it can be rebuilt (e.g. when normalization
changes) without the user re-supplying the image. Written only after the portrait proved usable
(``newsmotion persona add``); a portrait that reached ``sources/`` another way (the inbox sensor)
and then failed processing is moved to ``personas/rejected/`` with the reason beside it
(:func:`reject_source`).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from newsmotion_engine import cachedir
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
    cachedir.copy_into_place(image, target)
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


def add_persona(storage: Storage, image: Path, persona_id: str, *, force: bool = False, progress=None, framing: str | None = None):
    """``newsmotion persona add``: build the cache from ``image`` (:func:`ensure_persona`) and keep
    the image as the persona's source. Refuses to replace a persona built from a different portrait
    unless ``force``. Bad input raises before anything is written. Returns ``(cache, built)``."""
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.persona.cache import image_source

    validate_id(persona_id, "persona id")
    image = Path(image)
    if image.suffix.lower() not in PORTRAIT_SUFFIXES:
        raise BadInputError(image, f"unsupported file type {image.suffix or '(none)'}; use {', '.join(PORTRAIT_SUFFIXES)}")
    existing = storage.find_persona_source(persona_id)
    if existing is not None and not force and image_source(existing) != image_source(image):
        raise NewsmotionError(
            f"persona {persona_id!r} already exists from another portrait ({existing}); pass --force to replace it"
        )
    cache, built = ensure_persona(storage, persona_id, image=image, force=force, progress=progress, framing=framing)
    install_source(storage, image, persona_id)
    return cache, built


REASON_SUFFIX = ".reason.txt"


def _claim_copy(src: Path, folder: Path) -> Path:
    """Put a copy of ``src`` into ``folder`` under its own name, or ``{stem}-2{suffix}``, ``-3``,
    ... when that name (or its reason file) is taken. A hard link claims the name atomically and
    never replaces an existing file (a filesystem without hard links gets an exclusive create +
    copy, the same no-clobber rule). ``src`` stays where it is."""
    for n in range(1, 10_000):
        name = src.name if n == 1 else f"{src.stem}-{n}{src.suffix}"
        target = folder / name
        if (folder / f"{name}{REASON_SUFFIX}").exists():
            continue
        try:
            os.link(src, target)
            return target
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EMLINK):
                raise
        try:
            with open(target, "xb") as out, open(src, "rb") as inp:
                shutil.copyfileobj(inp, out)
        except FileExistsError:
            continue
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        shutil.copymode(src, target)
        return target
    raise NewsmotionError(f"{folder}: no free name for {src.name} (9999 rejected copies already)")


def file_away(path: Path, folder: Path, reason: str | None = None) -> Path:
    """Move ``path`` into ``folder`` without overwriting anything there (a taken name gets
    ``-2``, ``-3``, ...), with ``{name}.reason.txt`` beside it when ``reason`` is given; returns
    the moved file's path. Each step is atomic and ``path`` goes last, so an interruption leaves it
    in place (at worst also in ``folder``), never lost, and a reason file never stands beside the
    wrong (or no) file."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp: str | None = None
    if reason is not None:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".part")
    target: Path | None = None
    try:
        if tmp is not None:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                os.fchmod(fh.fileno(), cachedir.file_mode())
                fh.write(reason.rstrip() + "\n")
        target = _claim_copy(path, folder)
        if tmp is not None:
            os.replace(tmp, folder / f"{target.name}{REASON_SUFFIX}")
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if target is not None:
            target.unlink(missing_ok=True)
        raise
    path.unlink()
    return target


def reject_source(storage: Storage, persona_id: str, reason: str) -> Path:
    """Move persona ``persona_id``'s source portrait (``personas/sources/{id}.*``) to
    ``personas/rejected/`` with ``{file name}.reason.txt`` beside it (:func:`file_away`); returns
    the moved file's path. An earlier rejected file of the same name is never overwritten: the new
    one is suffixed (``anna-2.jpg``).

    Raises :class:`NewsmotionError` when the persona has no source portrait.

    Example::

        reject_source(Storage.from_env(), "anna", "no person detected")  # storage/personas/rejected/anna.jpg
    """
    source = storage.find_persona_source(persona_id)  # refuses an invalid id
    if source is None:
        raise NewsmotionError(f"persona {persona_id!r} has no source portrait in {storage.persona_sources} to reject")
    text = f"{reason.rstrip()}\n\npersona {persona_id}, rejected {cachedir.utc_now()}, was {source}"
    return file_away(source, storage.persona_rejected, text)


def rejection_reason(rejected: Path) -> str:
    """The one-line reason :func:`reject_source` wrote beside a rejected portrait ("" if none)."""
    try:
        lines = rejected.with_name(f"{rejected.name}{REASON_SUFFIX}").read_text(encoding="utf-8").strip().splitlines()
    except OSError:
        return ""
    return lines[0].strip() if lines else ""
