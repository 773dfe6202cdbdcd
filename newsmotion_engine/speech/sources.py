"""Each speech's source, kept in ``speech/sources/{speech_id}{suffix}``.

A recording keeps its own suffix (:data:`AUDIO_SUFFIXES`); text to speak is a ``.tts`` file, JSON
``{"text", "voice", "words_per_minute"}`` (:class:`~newsmotion_engine.speech.tts.TextSpeech`). The
speech cache is derived from this file, so it can be rebuilt (a new eSpeak, new viseme rules)
without the user supplying it again, and the Dagster sensor makes every source a ``speech``
partition, whichever way it arrived (the inbox, ``newsmotion speech add`` or ``say``). A source is
written only after its cache was built from it, so bad input leaves nothing here.

Functions take ``cache_root``: a :class:`~newsmotion_engine.storage.Storage` or the speech root
folder itself (``storage/speech``).
"""

from __future__ import annotations

import json
from pathlib import Path

from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.ids import SLUG_RE
from newsmotion_engine.speech.tts import TextSpeech
from newsmotion_engine.storage import SPEECH_FOLDERS, SPEECH_SOURCES, Storage, validate_speech_id

__all__ = [
    "AUDIO_SUFFIXES",
    "TTS_SUFFIX",
    "speech_root",
    "find_source",
    "read_source",
    "install_source",
    "source_speech_ids",
    "list_speech_ids",
    "add_speech",
]

AUDIO_SUFFIXES = (".wav", ".mp3", ".m4a", ".flac", ".ogg")
TTS_SUFFIX = ".tts"

CacheRoot = Storage | str | Path


def speech_root(cache_root: CacheRoot) -> Path:
    """The folder holding ``{speech_id}/`` caches and ``sources/``."""
    return cache_root.speech_root if isinstance(cache_root, Storage) else Path(cache_root)


def _sources(cache_root: CacheRoot) -> Path:
    return speech_root(cache_root) / SPEECH_SOURCES


def find_source(cache_root: CacheRoot, speech_id: str) -> Path | None:
    """The kept source of ``speech_id``, or None."""
    validate_speech_id(speech_id)
    folder = _sources(cache_root)
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob(f"{speech_id}.*")):
        if path.is_file() and path.stem == speech_id:
            return path
    return None


def check_audio_suffix(path: Path) -> None:
    if path.suffix.lower() not in AUDIO_SUFFIXES:
        raise BadInputError(path, f"unsupported file type {path.suffix or '(none)'}; use {', '.join(AUDIO_SUFFIXES)}")


def read_source(path: Path) -> Path | TextSpeech:
    """What a kept source file says to build from: the recording's path, or the text to speak."""
    if path.suffix != TTS_SUFFIX:
        return path
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return TextSpeech(str(record["text"]), str(record["voice"]), int(record["words_per_minute"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInputError(path, f"is not a speech text file ({exc})") from None


def install_source(cache_root: CacheRoot, source: Path | TextSpeech, speech_id: str) -> Path:
    """Keep ``source`` as ``sources/{speech_id}{suffix}`` (written under a temporary name and
    renamed, so a reader never sees half a file) and drop any older source of that id with
    another suffix. Returns the kept file."""
    validate_speech_id(speech_id)
    folder = _sources(cache_root)
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(source, TextSpeech):
        target = folder / f"{speech_id}{TTS_SUFFIX}"
        record = {"text": source.text, "voice": source.voice, "words_per_minute": source.words_per_minute}
        with cachedir.replacing(target) as tmp:
            tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        target = folder / f"{speech_id}{Path(source).suffix.lower()}"
        if Path(source).resolve() != target.resolve():
            cachedir.copy_into_place(Path(source), target)
    for other in folder.glob(f"{speech_id}.*"):
        if other != target and other.stem == speech_id:
            other.unlink()
    return target


def source_speech_ids(cache_root: CacheRoot) -> list[str]:
    """Ids of the speeches with a kept source, sorted."""
    folder = _sources(cache_root)
    if not folder.is_dir():
        return []
    suffixes = (*AUDIO_SUFFIXES, TTS_SUFFIX)
    return sorted({p.stem for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in suffixes and SLUG_RE.match(p.stem) and p.stem not in SPEECH_FOLDERS})


def list_speech_ids(cache_root: CacheRoot) -> list[str]:
    """Ids of the speech cache folders present (valid or not) and of kept sources, sorted."""
    root = speech_root(cache_root)
    cached = {p.name for p in root.iterdir() if p.is_dir() and SLUG_RE.match(p.name) and p.name not in SPEECH_FOLDERS} \
        if root.is_dir() else set()
    return sorted(cached | set(source_speech_ids(cache_root)))


def unknown_speech(cache_root: CacheRoot, speech_id: str) -> NewsmotionError:
    """The error for a speech id with neither a cache nor a source."""
    return NewsmotionError(
        f"unknown speech {speech_id!r}: no source in {_sources(cache_root)} (run `newsmotion speech add FILE "
        f"--id {speech_id}` or `newsmotion speech say TEXT --id {speech_id}`)"
    )


def add_speech(cache_root: CacheRoot, source: Path | TextSpeech, speech_id: str, *, force: bool = False,
               fps: float | None = None):
    """``newsmotion speech add`` / ``say``: build the cache from ``source`` (a recording or a
    :class:`TextSpeech`) and keep the source. Refuses to replace a speech made from another source
    unless ``force`` (which also rebuilds a current cache). Bad input raises before anything is
    written. Returns ``(cache, built)``."""
    from newsmotion_engine.speech.cache import DEFAULT_FPS, ensure_speech_cache, source_record

    validate_speech_id(speech_id)
    if not isinstance(source, TextSpeech):
        source = Path(source)
        check_audio_suffix(source)
    existing = find_source(cache_root, speech_id)
    if existing is not None and not force:
        try:
            same = source_record(read_source(existing)) == source_record(source)
        except BadInputError:
            same = False  # an unreadable kept source is replaced only on request, like any other
        if not same:
            raise NewsmotionError(
                f"speech {speech_id!r} already exists from another source ({existing}); pass --force to replace it"
            )
    cache, built = ensure_speech_cache(source, cache_root, speech_id, fps=DEFAULT_FPS if fps is None else fps, force=force)
    install_source(cache_root, source, speech_id)
    return cache, built
