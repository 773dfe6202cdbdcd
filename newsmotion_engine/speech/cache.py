"""The speech cache format: ``speech/{speech_id}/``, one per speech id.

Built once from a recording or from text spoken by the TTS, validated, memory-mapped by readers:

==================  ===========================  ==============================================
file                content                      notes
==================  ===========================  ==============================================
audio.npy           float32 [N]                  16 kHz mono, loudness-normalised (load_speech)
vad.npy             float32 [S, 2]               voice segments (start_s, end_s), silero VAD
visemes.npy         float32 [T, 4]               open, wide, round, energy per video frame
timings.json        {"phonemes", "words"}        the TTS's timings ([start_s, end_s, symbol or
                                                 word]); empty lists for a recording
metadata.json       see cachedir + extras below
==================  ===========================  ==============================================

metadata.json extras: speech_id, duration_s, sample_rate, fps, frames, source_type ("audio" or
"tts"), source_name (the recording's file name), text / voice / words_per_minute (TTS),
original_sample_rate / original_channels / gain_db (what the loader found and did),
viseme_source ("phonemes": from the TTS's timings, energy measured on the audio; "audio":
estimated from the audio alone), speech_s (voiced seconds per the VAD), versions (engine, VAD,
numpy), build_s. ``source`` is ``{kind: "audio", sha256}`` for a recording (content only) or
``{kind: "tts", text, voice, words_per_minute, engine}`` for text; ``params``
(:func:`speech_params`) holds every setting the output depends on. A different source or
params makes the cache stale; :func:`speech_status` also compares the kept source
(``speech/sources/``) with what the cache was built from.

The write/lock/validate mechanics are :mod:`newsmotion_engine.cachedir`'s (the house Tier-1
pattern): the expensive part (decode, TTS, VAD, visemes) runs before the id's lock is taken, so
bad input raises having written nothing; the cache is written into a temporary sibling and renamed
into place. Audio-encoder features are a sub-cache beside these files, written and read by
:mod:`newsmotion_engine.speech.features`; a rebuild from the same source keeps them.

Functions take ``cache_root``: a :class:`~newsmotion_engine.storage.Storage` or the speech root
folder itself (``storage/speech``).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError, CacheMissingError, CacheStaleError
from newsmotion_engine.speech import sources as sources_mod
from newsmotion_engine.speech.audio import (
    DEFAULT_PEAK_CEILING_DBFS,
    DEFAULT_TARGET_DBFS,
    SPEECH_SAMPLE_RATE,
    Speech,
    SpeechInputError,
    load_speech,
)
from newsmotion_engine.speech.sources import CacheRoot, speech_root
from newsmotion_engine.speech.tts import Phoneme, Synthesis, TextSpeech, Word, engine_version
from newsmotion_engine.speech.visemes import VisemeTrack, audio_energy, frame_count, visemes_from_audio, visemes_from_phonemes
from newsmotion_engine.storage import validate_speech_id

__all__ = [
    "SCHEMA",
    "SPEECH_VERSION",
    "DEFAULT_FPS",
    "SpeechCache",
    "SpeechCacheError",
    "speech_dir",
    "speech_params",
    "source_record",
    "build_speech_cache",
    "ensure_speech_cache",
    "load_speech_cache",
    "speech_problems",
    "speech_status",
]

# Bump when decoding, VAD use or the viseme rules change what a build produces.
SPEECH_VERSION = 1
DEFAULT_FPS = 30

SCHEMA = cachedir.CacheSchema(
    kind="speech",
    version=1,
    arrays={
        "audio.npy": cachedir.ArraySpec("float32", (None,)),
        "vad.npy": cachedir.ArraySpec("float32", (None, 2)),
        "visemes.npy": cachedir.ArraySpec("float32", (None, 4)),
    },
    files=("timings.json",),
)

SpeechSource = str | Path | Synthesis | TextSpeech


class SpeechCacheError(CacheError):
    """A speech cache that cannot be used; ``state`` says why: ``missing``, ``stale``, ``corrupt``
    or ``invalid`` (intact files whose content fails :func:`speech_problems`). The message says
    how to build it."""

    def __init__(self, path: Path | str, problem: str, state: str):
        self.state = state
        super().__init__(path, problem)


@dataclass(frozen=True, eq=False)
class SpeechCache:
    """A loaded speech: ``audio`` memory-mapped float32 [N] at ``sample_rate`` (16 kHz),
    ``vad`` voice segments ``[(start_s, end_s), ...]``, ``visemes`` a
    :class:`~newsmotion_engine.speech.visemes.VisemeTrack` at the cache's fps, ``phonemes`` and
    ``words`` the TTS's timings (empty for a recording), ``meta`` the parsed metadata.json."""

    speech_id: str
    path: Path
    audio: np.ndarray
    sample_rate: int
    duration_s: float
    vad: list[tuple[float, float]]
    visemes: VisemeTrack
    phonemes: tuple[Phoneme, ...]
    words: tuple[Word, ...]
    meta: dict[str, Any]

    @property
    def fps(self) -> float:
        return self.visemes.fps

    @property
    def frames(self) -> int:
        """Video frames the speech lasts (its viseme track's length)."""
        return len(self.visemes)

    @property
    def digest(self) -> str:
        """Stable digest of the cache's content and provenance (:func:`cachedir.cache_digest`)."""
        return cachedir.cache_digest(self.meta)


def speech_dir(cache_root: CacheRoot, speech_id: str) -> Path:
    """``{speech root}/{speech_id}``; refuses an invalid id (or ``inbox`` / ``sources``)."""
    return speech_root(cache_root) / validate_speech_id(speech_id)


def speech_params(fps: float = DEFAULT_FPS) -> dict[str, Any]:
    """Every setting a speech build depends on, for viseme tracks at ``fps``."""
    from newsmotion_engine.speech.vad import vad_params

    return {
        "version": SPEECH_VERSION,
        "fps": float(fps),
        "sample_rate": SPEECH_SAMPLE_RATE,
        "loudness": {"target_dbfs": DEFAULT_TARGET_DBFS, "peak_ceiling_dbfs": DEFAULT_PEAK_CEILING_DBFS},
        "vad": vad_params(),
    }


def source_record(source: SpeechSource) -> dict[str, Any]:
    """The ``source`` record a cache built from ``source`` carries: content only for a recording
    (the same file arriving via the inbox or the CLI is the same source), the request and the
    engine for text."""
    if isinstance(source, Synthesis):
        return {"kind": "tts", "text": source.text, "voice": source.voice,
                "words_per_minute": source.words_per_minute, "engine": source.engine}
    if isinstance(source, TextSpeech):
        request = source.check()
        return {"kind": "tts", "text": request.text, "voice": request.voice,
                "words_per_minute": request.words_per_minute, "engine": engine_version()}
    path = Path(source)
    if not path.exists():
        raise SpeechInputError(path, "does not exist")
    if not path.is_file():
        raise SpeechInputError(path, "is not a file")
    return {"kind": "audio", "sha256": cachedir.sha256_file(path)}


@dataclass(frozen=True)
class _Built:
    speech: Speech
    vad: np.ndarray
    visemes: VisemeTrack
    phonemes: tuple[Phoneme, ...]
    words: tuple[Word, ...]
    extra: dict[str, Any]


def _speech_of_synthesis(synthesis: Synthesis) -> Speech:
    """TTS output through the same loader as a recording (resampling, checks, normalisation)."""
    import scipy.io.wavfile

    with tempfile.TemporaryDirectory(prefix="newsmotion-tts-") as folder:
        wav = Path(folder) / "speech.wav"
        scipy.io.wavfile.write(wav, synthesis.sample_rate, np.asarray(synthesis.samples, np.float32))
        return load_speech(wav)


def _compute(source: SpeechSource, fps: float) -> _Built:
    from newsmotion_engine.speech.vad import vad_params, voice_segments

    synthesis = source.synthesize() if isinstance(source, TextSpeech) else source
    if isinstance(synthesis, Synthesis):
        speech = _speech_of_synthesis(synthesis)
        track = visemes_from_phonemes(synthesis.phonemes, speech.duration_s, fps)
        # The phoneme classes only guess loudness; the audio is at hand, so measure it.
        track = dataclasses.replace(track, energy=audio_energy(speech, fps))
        phonemes, words = synthesis.phonemes, synthesis.words
        extra = {"source_type": "tts", "text": synthesis.text, "voice": synthesis.voice,
                 "words_per_minute": synthesis.words_per_minute, "viseme_source": "phonemes"}
        engine = synthesis.engine
    else:
        path = Path(source)
        sources_mod.check_audio_suffix(path)
        speech = load_speech(path)
        track = visemes_from_audio(speech, fps)
        phonemes, words = (), ()
        extra = {"source_type": "audio", "source_name": path.name, "viseme_source": "audio"}
        engine = None
    segments = voice_segments(speech.samples)
    vad = np.asarray(segments, np.float32).reshape(-1, 2)
    extra.update(
        duration_s=round(speech.duration_s, 6),
        sample_rate=speech.sample_rate,
        fps=float(fps),
        frames=len(track),
        original_sample_rate=speech.original_sample_rate,
        original_channels=speech.original_channels,
        gain_db=round(float(speech.gain_db), 3),
        speech_s=round(float(sum(e - s for s, e in segments)), 3),
        versions={"engine": engine, "vad": f"silero-vad {vad_params()['version']}", "numpy": np.__version__},
    )
    return _Built(speech, vad, track, tuple(phonemes), tuple(words), extra)


def _write_files(folder: Path, built: _Built) -> None:
    np.save(folder / "audio.npy", np.asarray(built.speech.samples, np.float32))
    np.save(folder / "vad.npy", built.vad)
    np.save(folder / "visemes.npy", built.visemes.stacked())
    timings = {"phonemes": [[p.start_s, p.end_s, p.symbol] for p in built.phonemes],
               "words": [[w.start_s, w.end_s, w.text] for w in built.words]}
    (folder / "timings.json").write_text(json.dumps(timings, ensure_ascii=False), encoding="utf-8")


def ensure_speech_cache(
    source: SpeechSource | None,
    cache_root: CacheRoot,
    speech_id: str,
    *,
    fps: float = DEFAULT_FPS,
    force: bool = False,
) -> tuple[SpeechCache, bool]:
    """Make sure ``speech_id``'s cache exists, built from ``source`` at ``fps``; returns
    ``(cache, built)``.

    ``source``: a recording (wav, mp3, m4a, flac, ogg), a :class:`TextSpeech` to speak, a
    :class:`Synthesis` already spoken, or ``None`` for the speech's kept source
    (``speech/sources/``). A valid cache from the same source with the same params is reused;
    a missing, corrupt, stale or invalid one is rebuilt; ``force`` always rebuilds. Bad input
    raises :class:`SpeechInputError` having written nothing.

    Example::

        cache, built = ensure_speech_cache(TextSpeech("Good evening."), Storage.from_env(), "intro")
        cache.visemes.open[:10], cache.vad
    """
    path = speech_dir(cache_root, speech_id)  # refuses an invalid id before anything else
    if source is None:
        kept = sources_mod.find_source(cache_root, speech_id)
        if kept is None:
            raise sources_mod.unknown_speech(cache_root, speech_id)
        source = sources_mod.read_source(kept)
    if isinstance(source, (str, Path)):
        sources_mod.check_audio_suffix(Path(source))
    record = source_record(source)
    params = speech_params(fps)

    def compute() -> tuple[_Built, float]:
        started = time.perf_counter()
        built = _compute(source, fps)
        problems = _array_problems(built.speech.samples, built.vad, built.visemes, built.phonemes,
                                   built.speech.duration_s, fps)
        if problems:  # a bug, not bad input: never publish it
            raise RuntimeError(f"speech cache for {speech_id!r} failed its own checks: {'; '.join(problems)}")
        return built, started

    def build(prepared: tuple[_Built, float]) -> None:
        built, started = prepared

        def finalize(tmp: Path, metadata: dict[str, Any]) -> None:
            metadata["build_s"] = round(time.perf_counter() - started, 4)

        cachedir.write_cache(
            path,
            lambda tmp: _write_files(tmp, built),
            schema=SCHEMA,
            source=record,
            params=params,
            extra={"speech_id": speech_id, **built.extra},
            finalize=finalize,
        )

    return cachedir.ensure(
        path,
        lambda: load_speech_cache(cache_root, speech_id, expected_source=record, expected_params=params, check=True),
        build,
        force=force,
        prepare=compute,
    )


def build_speech_cache(source: SpeechSource | None, cache_root: CacheRoot, speech_id: str, *,
                       fps: float = DEFAULT_FPS, force: bool = False) -> SpeechCache:
    """:func:`ensure_speech_cache` returning only the cache (built, or reused when current)."""
    return ensure_speech_cache(source, cache_root, speech_id, fps=fps, force=force)[0]


def _remedy(speech_id: str) -> str:
    return (f"run `newsmotion speech add FILE --id {speech_id}` or `newsmotion speech say TEXT --id {speech_id}`, "
            f"or materialize speech_cache[{speech_id}]")


def load_speech_cache(
    cache_root: CacheRoot,
    speech_id: str,
    *,
    verify: bool = False,
    expected_source: dict[str, Any] | None = None,
    expected_params: dict[str, Any] | None = None,
    check: bool = False,
) -> SpeechCache:
    """Memory-map a speech cache after validating it (sizes, npy headers, shapes; every file's
    sha256 too with ``verify``; the content checks of :func:`speech_problems` with ``check``).
    ``expected_source`` / ``expected_params`` make a cache built from something else stale.
    Never builds. Raises :class:`SpeechCacheError` naming what to run.

    Example::

        speech = load_speech_cache(Storage.from_env(), "intro")
        speech.visemes.slice(0, 30)      # the first second's mouth shapes
    """
    path = speech_dir(cache_root, speech_id)
    try:
        loaded = cachedir.read_cache(path, SCHEMA, expected_source=expected_source,
                                     expected_params=expected_params, verify=verify)
        meta = loaded.metadata
        timings = json.loads((path / "timings.json").read_text(encoding="utf-8"))
        arrays = loaded.arrays
        cache = SpeechCache(
            speech_id=speech_id,
            path=path,
            audio=arrays["audio.npy"],
            sample_rate=int(meta["sample_rate"]),
            duration_s=float(meta["duration_s"]),
            vad=[(round(float(s), 4), round(float(e), 4)) for s, e in np.asarray(arrays["vad.npy"])],
            visemes=VisemeTrack.from_stacked(float(meta["fps"]), arrays["visemes.npy"]),
            phonemes=tuple(Phoneme(float(s), float(e), str(sym)) for s, e, sym in timings["phonemes"]),
            words=tuple(Word(float(s), float(e), str(text)) for s, e, text in timings["words"]),
            meta=meta,
        )
    except SpeechCacheError:
        raise
    except CacheError as exc:
        state = "missing" if isinstance(exc, CacheMissingError) else "stale" if isinstance(exc, CacheStaleError) else "corrupt"
        where = f"{exc.path.name}: " if exc.path.parent == path else ""
        raise SpeechCacheError(exc.path, f"speech {speech_id!r} cache is {state} ({where}{exc.problem}): "
                                         f"{_remedy(speech_id)}", state) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpeechCacheError(path, f"speech {speech_id!r} cache is corrupt ({type(exc).__name__}: {exc}): "
                                     f"{_remedy(speech_id)}", "corrupt") from None
    if meta.get("speech_id") != speech_id:
        raise SpeechCacheError(path, f"metadata says speech {meta.get('speech_id')!r}, expected {speech_id!r}", "corrupt")
    if check:
        problems = speech_problems(cache)
        if problems:
            raise SpeechCacheError(path, f"speech {speech_id!r} cache is invalid ({'; '.join(problems)}): "
                                         f"{_remedy(speech_id)}", "invalid")
    return cache


def _array_problems(audio, vad, visemes: VisemeTrack, phonemes, duration_s: float, fps: float) -> list[str]:
    problems = []
    audio = np.asarray(audio)
    if audio.size == 0:
        problems.append("audio is empty")
    elif not np.isfinite(audio).all() or float(np.abs(audio).max()) > 1.0:
        problems.append("audio has NaN/inf or samples beyond full scale")
    if abs(audio.size / SPEECH_SAMPLE_RATE - duration_s) > 1.0 / SPEECH_SAMPLE_RATE:
        problems.append(f"audio lasts {audio.size / SPEECH_SAMPLE_RATE:.3f} s, metadata says {duration_s:.3f} s")
    vad = np.asarray(vad)
    if vad.size:
        if not np.isfinite(vad).all() or (vad[:, 1] <= vad[:, 0]).any() or (vad[1:, 0] < vad[:-1, 1]).any():
            problems.append("vad segments are not ordered, non-empty and non-overlapping")
        elif vad.min() < 0 or vad.max() > duration_s + 0.05:
            problems.append(f"vad segments reach outside the audio (0..{duration_s:.3f} s)")
    if len(visemes) != frame_count(duration_s, fps):
        problems.append(f"viseme track has {len(visemes)} frames, {frame_count(duration_s, fps)} expected at {fps:g} fps")
    if any(p.start_s < 0 or p.end_s > duration_s + 0.05 or p.end_s <= p.start_s for p in phonemes):
        problems.append("phoneme timings reach outside the audio")
    return problems


def speech_problems(cache: SpeechCache) -> list[str]:
    """Content checks of a loaded speech (the loader already checked files, shapes, dtypes): audio
    finite and within full scale, of the recorded duration; VAD segments ordered inside the audio;
    one viseme frame per video frame of the duration, values in [0, 1]; phonemes inside the
    audio. ``[]`` when sound. The one validation the build, :func:`speech_status` and Dagster's
    blocking ``speech_cache_valid`` check share."""
    return _array_problems(cache.audio, np.asarray(cache.vad, np.float32).reshape(-1, 2), cache.visemes,
                           cache.phonemes, cache.duration_s, cache.fps)


def speech_status(cache_root: CacheRoot, speech_id: str) -> tuple[str, SpeechCache | None, str]:
    """``(status, cache, detail)``: ``valid``, ``missing``, ``corrupt``, ``invalid`` (content
    problems) or ``stale`` (older params, or the kept source in ``speech/sources/`` differs from
    what the cache was built from, re-hashed here)."""
    try:
        cache = load_speech_cache(cache_root, speech_id, check=True)
    except SpeechCacheError as exc:
        return exc.state, None, exc.problem
    if cache.meta.get("params") != speech_params(cache.fps):
        return "stale", cache, f"built with other parameters (speech version {cache.meta['params'].get('version')}, " \
                               f"now {SPEECH_VERSION}); rebuild"
    kept = sources_mod.find_source(cache_root, speech_id)
    if kept is not None:
        try:
            expected = source_record(sources_mod.read_source(kept))
        except (SpeechInputError, OSError) as exc:
            return "stale", cache, f"its source {kept} cannot be read ({exc})"
        if expected != cache.meta.get("source"):
            return "stale", cache, f"source {kept.name} changed since the cache was built; rebuild"
    return "valid", cache, ""
