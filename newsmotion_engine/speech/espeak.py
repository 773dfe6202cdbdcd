"""eSpeak NG through ``ctypes``: one utterance, its 16-bit samples and its WORD / PHONEME events.

The library and its voice data come from the ``espeakng-loader`` wheel (pinned in
requirements-nodeps.lock). It runs in synchronous mode: ``espeak_Synth`` returns once the whole
text is spoken, and a synth callback collects the samples and the events (each with its position
in the audio, in ms). Phoneme events are only sent when the library is initialised with
``espeakINITIALIZE_PHONEME_EVENTS``. The library is global state (one voice, one callback), so a
call holds :data:`_LOCK`.

eSpeak also keeps state between utterances that no API resets: the pitch "flutter" index in its
wave generator is a function-level static that only ever advances, so the same text spoken twice
in one process comes out slightly different (a millisecond here and there). :func:`speak_isolated`
therefore speaks each utterance in a fresh Python process running this module
(``python -m newsmotion_engine.speech.espeak``, which imports nothing but the standard library),
so a request always gives the same samples. :mod:`newsmotion_engine.speech.tts` is the public API.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

# speak_lib.h constants.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_DONT_EXIT = 0x8000
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
EVENT_WORD = 1
EVENT_PHONEME = 7
_EVENT_LIST_TERMINATED = 0
_PARAM_RATE = 1
_EE_OK = 0
_RAND_SEED = 0

# Exit statuses of the worker process that are not crashes.
EXIT_NOT_INSTALLED = 3
EXIT_NO_VOICE = 4

INSTALL_HINT = "pip install --no-deps espeakng-loader==0.2.4 (see requirements-nodeps.lock)"


class EspeakMissingError(RuntimeError):
    """The espeakng-loader wheel (library + data) is not installed, or its data is unusable."""


class EspeakVoiceError(RuntimeError):
    """The installed voice data lacks the voice asked for."""


@dataclass(frozen=True)
class Utterance:
    """What eSpeak produced: ``pcm`` little-endian int16 mono at ``sample_rate``; ``events`` are
    ``(kind, audio_ms, text_position, length, name)`` for WORD (text position 1-based, in
    characters) and PHONEME (``name``: the phoneme mnemonic) events, in order."""

    pcm: bytes
    sample_rate: int
    events: tuple[tuple[int, int, int, int, str], ...]
    version: str


class _Event(ctypes.Structure):
    # espeak_EVENT; ``id`` is a union whose 8-byte ``string`` member holds a phoneme's name.
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


class _Library:
    """The loaded and initialised library, and what the callback collects during one call."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError:
            raise EspeakMissingError(f"eSpeak NG is not installed: {INSTALL_HINT}") from None
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        signatures = {
            "espeak_Initialize": ([ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
            "espeak_SetSynthCallback": ([_SynthCallback], None),
            "espeak_SetVoiceByName": ([ctypes.c_char_p], ctypes.c_int),
            "espeak_SetParameter": ([ctypes.c_int, ctypes.c_int, ctypes.c_int], ctypes.c_int),
            "espeak_Synth": ([ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                              ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
            "espeak_Synchronize": ([], ctypes.c_int),
            "espeak_ng_SetRandSeed": ([ctypes.c_long], None),
            "espeak_Info": ([ctypes.c_void_p], ctypes.c_char_p),
        }
        for name, (argtypes, restype) in signatures.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = restype
        # The path is the folder that holds espeak-ng-data/.
        data_parent = str(Path(espeakng_loader.get_data_path()).parent).encode()
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_parent,
                                     _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise EspeakMissingError(f"eSpeak NG found no usable voice data in {data_parent.decode()}: {INSTALL_HINT}")
        self.lib = lib
        self.sample_rate = int(rate)
        self.version = f"espeak-ng {lib.espeak_Info(None).decode()}"
        self.chunks: list[bytes] = []
        self.events: list[tuple[int, int, int, int, str]] = []
        # Kept on the instance: ctypes would free a callback nobody references.
        self.callback = _SynthCallback(self._collect)
        lib.espeak_SetSynthCallback(self.callback)

    def _collect(self, wav, count, events) -> int:
        if count > 0:
            self.chunks.append(ctypes.string_at(wav, count * 2))
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            ev = events[i]
            if ev.type in (EVENT_WORD, EVENT_PHONEME):
                name = bytes(ev.id).split(b"\0", 1)[0].decode("utf-8", "replace") if ev.type == EVENT_PHONEME else ""
                self.events.append((ev.type, ev.audio_position, ev.text_position, ev.length, name))
            i += 1
        return 0  # 0 = carry on synthesizing


_LOCK = threading.Lock()
_library: _Library | None = None


def _get_library() -> _Library:
    global _library
    if _library is None:
        _library = _Library()
    return _library


def speak(text: str, voice: str, words_per_minute: int) -> Utterance:
    """Speak ``text`` in this process (see the module docstring for why :func:`speak_isolated` is
    what callers use). Raises :class:`EspeakMissingError`, :class:`EspeakVoiceError`."""
    encoded = text.encode("utf-8")
    with _LOCK:
        engine = _get_library()
        lib = engine.lib
        if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
            raise EspeakVoiceError(f"voice {voice!r} is missing from the installed eSpeak NG data")
        lib.espeak_SetParameter(_PARAM_RATE, words_per_minute, 0)
        lib.espeak_ng_SetRandSeed(_RAND_SEED)  # its noise sources draw from rand()
        engine.chunks, engine.events = [], []
        try:
            status = lib.espeak_Synth(encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
            if status == _EE_OK:
                status = lib.espeak_Synchronize()
            if status != _EE_OK:
                raise RuntimeError(f"espeak_Synth failed with status {status}")
            return Utterance(b"".join(engine.chunks), engine.sample_rate, tuple(engine.events), engine.version)
        finally:
            engine.chunks, engine.events = [], []


def speak_isolated(text: str, voice: str, words_per_minute: int) -> Utterance:
    """:func:`speak` in a fresh process (same arguments, same result, same errors)."""
    request = json.dumps({"text": text, "voice": voice, "words_per_minute": words_per_minute}).encode()
    # The child imports this module by name: make sure it finds the same package this process runs.
    package_parent = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", __name__], input=request, capture_output=True, env=env)
    problem = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode == EXIT_NOT_INSTALLED:
        raise EspeakMissingError(problem)
    if proc.returncode == EXIT_NO_VOICE:
        raise EspeakVoiceError(problem)
    if proc.returncode != 0:
        raise RuntimeError(f"the eSpeak NG process failed (exit {proc.returncode}): {problem[-500:]}")
    header, _, pcm = proc.stdout.partition(b"\n")
    meta = json.loads(header)
    return Utterance(pcm, int(meta["sample_rate"]), tuple(tuple(e) for e in meta["events"]), meta["version"])


def _main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    try:
        said = speak(request["text"], request["voice"], int(request["words_per_minute"]))
    except EspeakMissingError as exc:
        print(exc, file=sys.stderr)
        return EXIT_NOT_INSTALLED
    except EspeakVoiceError as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_VOICE
    header = {"sample_rate": said.sample_rate, "events": said.events, "version": said.version}
    sys.stdout.buffer.write(json.dumps(header).encode() + b"\n" + said.pcm)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
