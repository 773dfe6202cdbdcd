"""A story's speech: each sentence's speech cache (loaded, or built from the story's text or audio
file), laid end to end on the video's frame grid with pauses, as one audio track and one viseme
track.

Layout: ``lead_in`` seconds of silence, the sentences separated by ``pause`` seconds, ``tail``
seconds after the last. Every sentence starts on a frame boundary (its audio at sample
``round(start_frame / fps * rate)``), and the audio is padded to exactly ``frames / fps`` seconds,
so the audio and the video have the same length and a sentence's lips start on its first frame.

Sentences given as text or audio become speeches under their id like any other (``newsmotion
speech say`` / ``speech add``: cached, their source kept); an id that already holds speech from
another source is an error naming the sentence. A sentence given by id only must exist already.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from newsmotion_engine.errors import BadInputError, CacheNotReadyError, NewsmotionError
from newsmotion_engine.story.format import Story

if TYPE_CHECKING:
    from newsmotion_engine.speech.sources import CacheRoot
    from newsmotion_engine.speech.visemes import VisemeTrack

__all__ = ["SentenceAudio", "StorySpeech", "assemble_speech", "load_sentence", "story_speech"]


@dataclass(frozen=True)
class SentenceAudio:
    """One sentence's samples (float32 mono), their rate, its viseme track at the story's fps,
    and how it was got (``"hit"``: cache loaded; ``"built"``: built now)."""

    speech_id: str
    samples: np.ndarray
    sample_rate: int
    visemes: VisemeTrack
    state: str = "hit"

    @property
    def duration_s(self) -> float:
        return self.samples.shape[0] / self.sample_rate


@dataclass(frozen=True)
class StorySpeech:
    """The story's sound: ``audio`` float32 mono at ``sample_rate``, exactly ``frames / fps``
    seconds; ``spans`` each sentence's frames ``[start, stop)``; ``visemes`` one frame per video
    frame (closed mouth in the pauses); ``sentences`` what each sentence was."""

    audio: np.ndarray
    sample_rate: int
    fps: int
    frames: int
    spans: tuple[tuple[int, int], ...]
    visemes: VisemeTrack
    sentences: tuple[dict[str, Any], ...]

    @property
    def duration_s(self) -> float:
        return self.frames / self.fps


def assemble_speech(story: Story, clips: list[SentenceAudio], fps: int) -> StorySpeech:
    """Lay ``clips`` (one per sentence, in order) out as described in the module docstring."""
    if len(clips) != len(story.sentences):
        raise NewsmotionError(f"{len(clips)} sentence clips for a story of {len(story.sentences)} sentences")
    rates = {c.sample_rate for c in clips}
    if len(rates) != 1:
        raise NewsmotionError(f"sentences at different sample rates {sorted(rates)}")
    rate = rates.pop()
    spans = []
    start = round(story.lead_in * fps)
    for clip in clips:
        n = max(1, math.ceil(clip.duration_s * fps - 1e-9))
        spans.append((start, start + n))
        start += n + round(story.pause * fps)
    frames = spans[-1][1] + round(story.tail * fps)
    audio = np.zeros(round(frames * rate / fps), np.float32)
    curves = {name: np.zeros(frames, np.float32) for name in ("open", "wide", "round", "energy")}
    for clip, (a, b) in zip(clips, spans):
        at = round(a * rate / fps)
        audio[at : at + clip.samples.shape[0]] = clip.samples
        n = min(b - a, len(clip.visemes))
        for name, curve in curves.items():
            curve[a : a + n] = np.asarray(getattr(clip.visemes, name), np.float32)[:n]
    track = replace(clips[0].visemes, fps=float(fps), **curves)
    return StorySpeech(
        audio=audio, sample_rate=rate, fps=fps, frames=frames, spans=tuple(spans), visemes=track,
        sentences=tuple({"speech_id": c.speech_id, "source": s.source, "state": c.state, "duration_s": round(c.duration_s, 3),
                         "start_s": round(a / fps, 3), "stop_s": round(b / fps, 3)}
                        for c, s, (a, b) in zip(clips, story.sentences, spans)),
    )  # fmt: skip


def load_sentence(story: Story, index: int, cache_root: CacheRoot, fps: int, *, build: bool = True,
                  on_build: Callable[[str], None] | None = None) -> SentenceAudio:  # fmt: skip
    """Sentence ``index``'s speech cache under ``cache_root`` (a Storage or the speech folder).

    A sentence given as text or audio is added like ``newsmotion speech say`` / ``speech add``
    (:func:`~newsmotion_engine.speech.sources.add_speech`: built when missing or stale, its source
    kept); one given by id only is loaded, or rebuilt from its kept source when ``build`` is on.

    Raises:
        StoryError: the id already holds speech from another source, or the text or audio is bad.
        CacheNotReadyError: an id-only sentence whose cache is not usable (and ``build`` off, or
            no kept source to build it from).
    """
    from newsmotion_engine.speech.cache import SpeechCacheError, ensure_speech_cache, load_speech_cache
    from newsmotion_engine.speech.sources import add_speech, find_source
    from newsmotion_engine.speech.tts import TextSpeech

    sentence = story.sentences[index]
    field = f"speech[{index}]"
    announce = (lambda: on_build(sentence.speech_id)) if on_build is not None else (lambda: None)
    if sentence.source == "id":
        try:
            cache, built = load_speech_cache(cache_root, sentence.speech_id), False
        except SpeechCacheError as exc:
            if not build or find_source(cache_root, sentence.speech_id) is None:
                raise CacheNotReadyError(
                    f"speech cache {sentence.speech_id!r} ({story.path.name}: {field}.id)", exc.state, "",
                    f"materialize speech_cache[{sentence.speech_id}], run `newsmotion speech say TEXT --id "
                    f"{sentence.speech_id}`, or give the sentence its text",
                ) from None
            announce()
            cache, built = ensure_speech_cache(None, cache_root, sentence.speech_id, fps=fps)
    else:
        source = TextSpeech(sentence.text, sentence.voice, sentence.words_per_minute) if sentence.source == "text" else sentence.audio
        try:
            cache, built = add_speech(cache_root, source, sentence.speech_id, fps=fps)
        except BadInputError as exc:
            raise story.error(f"{field}.{sentence.source}", exc.problem) from None
        except NewsmotionError as exc:
            raise story.error(f"{field}.id", f"{exc}; give this sentence another id") from None
    samples = np.asarray(cache.audio, np.float32)
    return SentenceAudio(sentence.speech_id, samples, int(cache.sample_rate), _visemes_at(cache, samples, fps),
                         "built" if built else "hit")  # fmt: skip


def _visemes_at(cache: Any, samples: np.ndarray, fps: int) -> VisemeTrack:
    """The cache's viseme track when it is at ``fps``, else one made at ``fps`` (from the TTS
    phonemes when the cache has them, otherwise from the audio)."""
    track = cache.visemes
    if track is not None and round(float(track.fps)) == fps:
        return track
    from newsmotion_engine.speech import visemes

    if getattr(cache, "phonemes", None):
        return visemes.visemes_from_phonemes(cache.phonemes, float(cache.duration_s), fps)
    from newsmotion_engine.speech.audio import Speech

    speech = Speech(samples=samples, source=Path(str(cache.meta.get("source", "speech"))), duration_s=float(cache.duration_s),
                    sample_rate=int(cache.sample_rate))  # fmt: skip
    return visemes.visemes_from_audio(speech, fps)


def story_speech(story: Story, cache_root: CacheRoot, fps: int, *, build: bool = True,
                 on_build: Callable[[str], None] | None = None) -> StorySpeech:  # fmt: skip
    """Every sentence (:func:`load_sentence`), laid out (:func:`assemble_speech`)."""
    clips = [load_sentence(story, i, cache_root, fps, build=build, on_build=on_build) for i in range(len(story.sentences))]
    return assemble_speech(story, clips, fps)
