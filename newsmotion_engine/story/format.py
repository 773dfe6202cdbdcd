"""The story file: one YAML file per story, read and validated here (the only module that knows
its keys).

A story says who presents (``persona``), what they say (``speech``: sentences spoken in order,
each from text through the TTS, from an audio file, or an existing speech id), and which gesture
loops they perform when (``gestures``: a loop per sentence, or at a time in seconds); an idle loop
fills every gap. The story's id is the file's stem.

Example (``storage/stories/evening.yaml``)::

    version: 1
    persona: astronaut
    speech:
      - id: intro                                   # the speech cache id (built from the text when missing)
        text: Good evening, here is the news.
      - text: Tonight, the city council approved the new harbour bridge after a two-year debate.
        voice: en-us                                # optional (default en-us); words_per_minute too
      - audio: clips/weather.wav                    # relative to the story file
    gestures:
      - {loop: welcome, sentence: 1}                # for the whole first sentence
      - {loop: left_gesture, at: 3.2, for: 2.5}     # at 3.2 s, for 2.5 s (default: one play of the loop)
    idle: rest                                      # the gap filler: "rest" (built in) or a loop id
    pause: 0.4                                      # silence between sentences, seconds
    blend: 1.5                                      # the longest transition between two loops, seconds (0: cuts)

A gesture's ``fit`` is ``loop`` (default: the loop repeats, or is cut, to fill its slot) or
``once`` (it plays once and the idle loop takes over for the rest of the slot).

Every problem is one :class:`StoryError` naming the file and the field
(``evening.yaml: gestures[1].sentence: 3 is past the last sentence (the story has 2)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from newsmotion_engine.errors import BadInputError, InvalidIdError
from newsmotion_engine.ids import validate_id

__all__ = [
    "FORMAT_VERSION",
    "IDLE_REST",
    "MAX_STORY_BYTES",
    "STORY_SUFFIXES",
    "GestureCue",
    "Sentence",
    "Story",
    "StoryError",
    "load_story",
    "parse_story",
]

FORMAT_VERSION = 1
# The built-in idle: the rest pose with breathing, a slight head drift and blinks.
IDLE_REST = "rest"
MAX_STORY_BYTES = 1 << 20
STORY_SUFFIXES = (".yaml", ".yml")
DEFAULT_VOICE = "en-us"
DEFAULT_WORDS_PER_MINUTE = 165
DEFAULTS = {"pause": 0.4, "lead_in": 0.3, "tail": 0.6, "blend": 1.5}
FITS = ("loop", "once")

_TOP_KEYS = {"version", "persona", "speech", "gestures", "idle", *DEFAULTS}
_SENTENCE_KEYS = {"id", "text", "voice", "words_per_minute", "audio"}
_CUE_KEYS = {"loop", "sentence", "at", "for", "fit"}


class StoryError(BadInputError):
    """A story file that cannot be used: ``StoryError(path, "field: problem")``."""


@dataclass(frozen=True)
class Sentence:
    """One spoken sentence: exactly one of ``text`` (spoken by the TTS with ``voice`` at
    ``words_per_minute``) or ``audio`` (a file, absolute); ``speech_id`` names its speech cache
    (given, or ``{story}-{n}``). ``source`` is ``"text"``, ``"audio"`` or ``"id"`` (an existing
    speech cache, neither text nor audio given)."""

    speech_id: str
    source: str
    text: str | None = None
    voice: str = DEFAULT_VOICE
    words_per_minute: int = DEFAULT_WORDS_PER_MINUTE
    audio: Path | None = None


@dataclass(frozen=True)
class GestureCue:
    """A loop performed in a slot: during sentence ``sentence`` (1-based), or from ``at`` seconds
    for ``seconds`` (``None``: one play of the loop). ``field`` is where it is in the file
    (``gestures[0]``), for messages."""

    loop_id: str
    field: str
    sentence: int | None = None
    at: float | None = None
    seconds: float | None = None
    fit: str = "loop"


@dataclass(frozen=True)
class Story:
    """A validated story file (see the module docstring)."""

    story_id: str
    path: Path
    persona_id: str
    sentences: tuple[Sentence, ...]
    gestures: tuple[GestureCue, ...]
    idle: str = IDLE_REST
    pause: float = DEFAULTS["pause"]
    lead_in: float = DEFAULTS["lead_in"]
    tail: float = DEFAULTS["tail"]
    blend: float = DEFAULTS["blend"]

    def error(self, field: str, problem: str) -> StoryError:
        """A :class:`StoryError` about ``field`` of this story's file."""
        return StoryError(self.path, f"{field}: {problem}")


def load_story(path: Path | str) -> Story:
    """Read and validate the story file ``path`` (its stem is the story id).

    Raises:
        StoryError: missing or unreadable file, not YAML, or any field that is missing, unknown or
            out of range; the message names the file and the field.
    """
    path = Path(path).absolute()
    if not path.is_file():
        raise StoryError(path, "story file not found")
    if path.suffix.lower() not in STORY_SUFFIXES:
        raise StoryError(path, "a story file is YAML: name it .yaml or .yml")
    if path.stat().st_size > MAX_STORY_BYTES:
        raise StoryError(path, f"larger than {MAX_STORY_BYTES // 1024} KiB: not a story file")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise StoryError(path, "not a text file (UTF-8)") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise StoryError(path, f"not valid YAML{at} ({getattr(exc, 'problem', None) or exc})") from None
    return parse_story(raw, path)


def parse_story(raw: Any, path: Path | str) -> Story:
    """Validate the parsed YAML ``raw`` of the story file ``path`` (see :func:`load_story`)."""
    path = Path(path).absolute()

    def fail(field: str, problem: str) -> StoryError:
        return StoryError(path, f"{field}: {problem}")

    try:
        story_id = validate_id(path.stem, "story id")
    except InvalidIdError as exc:
        raise StoryError(path, f"the file name is the story id: {exc}") from None
    if not isinstance(raw, dict):
        raise StoryError(path, "a story file is a mapping (persona, speech, gestures, ...); this one is "
                               f"{'empty' if raw is None else type(raw).__name__}")  # fmt: skip
    _no_unknown(raw, _TOP_KEYS, "", fail)
    version = raw.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise fail("version", f"{version!r} is not a story format this newsmotion reads (it reads {FORMAT_VERSION})")
    persona_id = _id(raw.get("persona"), "persona", "persona id", fail)
    numbers = {key: _seconds(raw.get(key, default), key, fail, upper=10.0) for key, default in DEFAULTS.items()}
    speech = raw.get("speech")
    if not isinstance(speech, list) or not speech:
        raise fail("speech", "give a list of one or more sentences (each with text, audio or id)")
    sentences = tuple(_sentence(item, i, story_id, path, fail) for i, item in enumerate(speech))
    gestures_raw = raw.get("gestures", [])
    if not isinstance(gestures_raw, list):
        raise fail("gestures", "give a list of gesture cues ({loop, sentence} or {loop, at})")
    gestures = tuple(_cue(item, i, len(sentences), fail) for i, item in enumerate(gestures_raw))
    idle = raw.get("idle", IDLE_REST)
    if idle != IDLE_REST:
        idle = _id(idle, "idle", "loop id", fail)
    return Story(story_id, path, persona_id, sentences, gestures, idle=idle, **numbers)


def _no_unknown(item: dict, known: set[str], prefix: str, fail) -> None:
    unknown = sorted(str(k) for k in item if k not in known)
    if unknown:
        where = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise fail(where, f"unknown key; known: {', '.join(sorted(known))}")


def _id(value: Any, field: str, what: str, fail) -> str:
    if value is None:
        raise fail(field, "missing")
    if not isinstance(value, str):
        raise fail(field, f"{value!r} is not a {what}")
    try:
        return validate_id(value, what)
    except InvalidIdError as exc:
        raise fail(field, str(exc)) from None


def _seconds(value: Any, field: str, fail, *, upper: float, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise fail(field, f"{value!r} is not a number of seconds")
    if value < 0 or (positive and value == 0) or value > upper:
        raise fail(field, f"{value} is out of range: use {'more than' if positive else 'at least'} 0 and at most {upper:g} seconds")
    return float(value)


def _sentence(item: Any, i: int, story_id: str, path: Path, fail) -> Sentence:
    field = f"speech[{i}]"
    if isinstance(item, str):  # a bare string is the text
        item = {"text": item}
    if not isinstance(item, dict):
        raise fail(field, "a sentence is a mapping with text, audio or id")
    _no_unknown(item, _SENTENCE_KEYS, field, fail)
    given = [key for key in ("text", "audio") if key in item]
    if len(given) > 1:
        raise fail(field, "give text or audio, not both")
    speech_id = _id(item["id"], f"{field}.id", "speech id", fail) if "id" in item else f"{story_id}-{i + 1}"
    if not given:
        if "id" not in item:
            raise fail(field, "give text, audio or the id of an existing speech")
        for key in ("voice", "words_per_minute"):
            if key in item:
                raise fail(f"{field}.{key}", "only for a sentence given as text")
        return Sentence(speech_id, "id")
    if given == ["audio"]:
        audio = item["audio"]
        if not isinstance(audio, str) or not audio.strip():
            raise fail(f"{field}.audio", f"{audio!r} is not a file path")
        audio_path = (path.parent / audio).absolute()
        if not audio_path.is_file():
            raise fail(f"{field}.audio", f"{audio_path} not found")
        for key in ("voice", "words_per_minute"):
            if key in item:
                raise fail(f"{field}.{key}", "only for a sentence given as text")
        return Sentence(speech_id, "audio", audio=audio_path)
    text = item["text"]
    if not isinstance(text, str) or not text.strip():
        raise fail(f"{field}.text", "empty: give the words to speak")
    voice = item.get("voice", DEFAULT_VOICE)
    if not isinstance(voice, str) or not voice.strip():
        raise fail(f"{field}.voice", f"{voice!r} is not a voice name")
    wpm = item.get("words_per_minute", DEFAULT_WORDS_PER_MINUTE)
    if isinstance(wpm, bool) or not isinstance(wpm, int) or not 80 <= wpm <= 450:
        raise fail(f"{field}.words_per_minute", f"{wpm!r} is out of range: use an integer 80..450")
    return Sentence(speech_id, "text", text=" ".join(text.split()), voice=voice, words_per_minute=wpm)


def _cue(item: Any, i: int, sentence_count: int, fail) -> GestureCue:
    field = f"gestures[{i}]"
    if not isinstance(item, dict):
        raise fail(field, "a gesture cue is a mapping: {loop, sentence} or {loop, at}")
    _no_unknown(item, _CUE_KEYS, field, fail)
    loop_id = _id(item.get("loop"), f"{field}.loop", "loop id", fail)
    fit = item.get("fit", "loop")
    if fit not in FITS:
        raise fail(f"{field}.fit", f"{fit!r} is not one of {', '.join(FITS)}")
    if ("sentence" in item) == ("at" in item):
        raise fail(field, "give sentence (1-based) or at (seconds), one of them")
    if "sentence" in item:
        n = item["sentence"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise fail(f"{field}.sentence", f"{n!r} is not a sentence number (1, 2, ...)")
        if n > sentence_count:
            raise fail(f"{field}.sentence", f"{n} is past the last sentence (the story has {sentence_count})")
        if "for" in item:
            raise fail(f"{field}.for", "a sentence cue lasts its sentence; use at and for for a timed cue")
        return GestureCue(loop_id, field, sentence=n, fit=fit)
    at = _seconds(item["at"], f"{field}.at", fail, upper=3600.0)
    seconds = _seconds(item["for"], f"{field}.for", fail, upper=600.0, positive=True) if "for" in item else None
    return GestureCue(loop_id, field, at=at, seconds=seconds, fit=fit)
