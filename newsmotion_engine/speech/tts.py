"""Offline text-to-speech with eSpeak NG, keeping the phoneme and word timings it reports.

The library and its voice data come from the ``espeakng-loader`` wheel (pinned in
requirements-nodeps.lock), so nothing is fetched at run time; :mod:`newsmotion_engine.speech.espeak`
drives it through ``ctypes`` (synchronous mode, a synth callback collecting the samples and the
WORD / PHONEME events with their audio positions), one utterance per fresh process so the same
request always gives the same samples. This module validates requests and turns the events into
:class:`Phoneme` and :class:`Word` timings.

Example::

    speech = synthesize("Good evening, here is the news.", voice="en-us", words_per_minute=165)
    speech.sample_rate, speech.duration_s          # 22050, ~1.8
    [p.symbol for p in speech.phonemes][:3]         # ['g', "'U", 'd']  (eSpeak's phoneme mnemonics)

Phoneme symbols are eSpeak's ASCII mnemonics (``'`` and ``,`` mark primary and secondary stress,
``_`` a pause); :mod:`newsmotion_engine.speech.visemes` maps them to mouth shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.speech import espeak
from newsmotion_engine.speech.audio import SpeechInputError

__all__ = [
    "VOICES",
    "DEFAULT_VOICE",
    "DEFAULT_WORDS_PER_MINUTE",
    "MIN_WORDS_PER_MINUTE",
    "MAX_WORDS_PER_MINUTE",
    "MAX_TEXT_CHARS",
    "Phoneme",
    "Word",
    "Synthesis",
    "TextSpeech",
    "synthesize",
    "engine_version",
]

# The voices the tests synthesize with (eSpeak NG 1.52 names; ``+f3`` is a voice variant). Other
# eSpeak voices exist, but the viseme mapping knows English phonemes only, and eSpeak silently
# ignores an unknown variant, so only these are accepted.
VOICES: tuple[str, ...] = ("en-us", "en-us+f3", "en", "en-gb-x-rp", "en-gb-scotland", "en-029")
DEFAULT_VOICE = "en-us"
DEFAULT_WORDS_PER_MINUTE = 165
# eSpeak's own range for espeakRATE.
MIN_WORDS_PER_MINUTE = 80
MAX_WORDS_PER_MINUTE = 450
# About six minutes at 165 wpm: under the speech loader's ten-minute limit at the slowest rate.
MAX_TEXT_CHARS = 5000

_TEXT_LABEL = "speech text"


@dataclass(frozen=True)
class Phoneme:
    """One phoneme as eSpeak spoke it: ``symbol`` (eSpeak mnemonic, stress mark kept) from
    ``start_s`` to ``end_s`` in the synthesized audio."""

    start_s: float
    end_s: float
    symbol: str


@dataclass(frozen=True)
class Word:
    """One word of the text and when it is spoken (pauses after it excluded)."""

    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True, eq=False)
class Synthesis:
    """Synthesized speech: ``samples`` float32 mono in [-1, 1] at ``sample_rate`` (eSpeak's
    22050 Hz), with the phoneme and word timings eSpeak reported and the ``voice`` used.
    ``text`` and ``words_per_minute`` are what was asked for; ``engine`` names the synthesizer."""

    samples: np.ndarray
    sample_rate: int
    phonemes: tuple[Phoneme, ...]
    words: tuple[Word, ...]
    voice: str
    text: str = ""
    words_per_minute: int = DEFAULT_WORDS_PER_MINUTE
    engine: str = ""

    @property
    def duration_s(self) -> float:
        return self.samples.size / self.sample_rate


@dataclass(frozen=True)
class TextSpeech:
    """Text to speak and how: what ``newsmotion speech say`` keeps as a speech's source and what a
    sample speech is. ``synthesize()`` speaks it."""

    text: str
    voice: str = DEFAULT_VOICE
    words_per_minute: int = DEFAULT_WORDS_PER_MINUTE

    def check(self) -> TextSpeech:
        """This request with its text stripped, or :class:`SpeechInputError` (see :func:`synthesize`)."""
        return TextSpeech(check_request(self.text, self.voice, self.words_per_minute), self.voice, self.words_per_minute)

    def synthesize(self) -> Synthesis:
        return synthesize(self.text, voice=self.voice, words_per_minute=self.words_per_minute)


@functools.cache
def engine_version() -> str:
    """``"espeak-ng 1.52.0"``: part of a speech cache's source, so a new eSpeak rebuilds it."""
    return _speak(".", DEFAULT_VOICE, DEFAULT_WORDS_PER_MINUTE).version


def check_request(text: str, voice: str, words_per_minute: int) -> str:
    """Validate a synthesis request; returns the text stripped. Raises :class:`SpeechInputError`."""
    if not isinstance(text, str) or not text.strip():
        raise SpeechInputError(_TEXT_LABEL, "is empty; give the words to speak")
    text = text.strip()
    if len(text) > MAX_TEXT_CHARS:
        raise SpeechInputError(_TEXT_LABEL, f"is {len(text)} characters long; the limit is {MAX_TEXT_CHARS} "
                                            "(split it into several speeches)")
    if voice not in VOICES:
        raise SpeechInputError(f"voice {voice!r}", f"is not a known voice; use one of {', '.join(VOICES)}")
    whole = isinstance(words_per_minute, int) and not isinstance(words_per_minute, bool)
    if not whole or not MIN_WORDS_PER_MINUTE <= words_per_minute <= MAX_WORDS_PER_MINUTE:
        raise SpeechInputError(f"rate {words_per_minute!r} words per minute",
                               f"is outside eSpeak's {MIN_WORDS_PER_MINUTE}..{MAX_WORDS_PER_MINUTE}")
    return text


def synthesize(text: str, *, voice: str = DEFAULT_VOICE, words_per_minute: int = DEFAULT_WORDS_PER_MINUTE) -> Synthesis:
    """Speak ``text`` with eSpeak NG ``voice`` (one of :data:`VOICES`) at ``words_per_minute``.

    Returns a :class:`Synthesis` (float32 samples at 22050 Hz, phoneme and word timings). Raises
    :class:`SpeechInputError` for empty or too long text, an unknown voice, a rate outside
    80..450, or text that produces no sound (punctuation only). Deterministic: the same request
    gives the same samples. Thread-safe: each call speaks in a process of its own.
    """
    text = check_request(text, voice, words_per_minute)
    said = _speak(text, voice, words_per_minute)
    rate, version, events = said.sample_rate, said.version, said.events
    samples = np.frombuffer(said.pcm, dtype="<i2").astype(np.float32) / 32768.0
    if samples.size == 0 or float(np.max(np.abs(samples))) < 1e-4:
        raise SpeechInputError(_TEXT_LABEL, f"{text[:40]!r} produced no speech (only punctuation or symbols?)")
    samples.flags.writeable = False
    duration = samples.size / rate
    phonemes = _phonemes(events, duration)
    words = _words(events, text, phonemes, duration)
    return Synthesis(samples=samples, sample_rate=rate, phonemes=phonemes, words=words, voice=voice,
                     text=text, words_per_minute=words_per_minute, engine=version)


def _speak(text: str, voice: str, words_per_minute: int) -> espeak.Utterance:
    try:
        return espeak.speak_isolated(text, voice, words_per_minute)
    except espeak.EspeakMissingError as exc:
        raise NewsmotionError(str(exc)) from None
    except espeak.EspeakVoiceError:
        raise SpeechInputError(f"voice {voice!r}", "is missing from the installed eSpeak NG data") from None


def _phonemes(events, duration: float) -> tuple[Phoneme, ...]:
    """Each phoneme lasts until the next one starts (the last until the audio ends); zero-length
    ones (the closing pause marker) are dropped."""
    starts = [(pos / 1000.0, name) for kind, pos, _, _, name in events if kind == espeak.EVENT_PHONEME]
    out = []
    for i, (start, symbol) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else duration
        # rounded first: a closing marker a few microseconds before the end rounds to zero length
        start, end = round(start, 4), round(min(end, duration), 4)
        if symbol and end > start:
            out.append(Phoneme(start_s=start, end_s=end, symbol=symbol))
    return tuple(out)


def _words(events, text: str, phonemes: tuple[Phoneme, ...], duration: float) -> tuple[Word, ...]:
    """Words from WORD events (1-based character position and length in the text); a word ends
    where the first pause after it starts, else where the next word starts."""
    found = [(pos / 1000.0, text[max(0, tpos - 1): max(0, tpos - 1) + length])
             for kind, pos, tpos, length, _ in events if kind == espeak.EVENT_WORD]
    pauses = [p.start_s for p in phonemes if p.symbol.startswith("_")]
    words = []
    for i, (start, word) in enumerate(found):
        limit = found[i + 1][0] if i + 1 < len(found) else duration
        end = next((s for s in pauses if start < s < limit), limit)
        if word.strip() and end > start:
            words.append(Word(start_s=round(start, 4), end_s=round(min(end, duration), 4), text=word))
    return tuple(words)
