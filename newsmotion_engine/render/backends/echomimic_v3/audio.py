"""The speech a render performs, as the model reads it: per video frame at the model's 25 fps, the
wav2vec2 hidden states of the ±2 neighbouring frames (``[T, 5, layers, 768]``).

The features come from the speech tier's features sub-cache (``speech/features.py``'s
``ensure_features``) with one of its recipes: ``official`` (default; ``speech/clip_features.py``:
as the release's ``infer_flash.py`` computes them — the whole speech at -23 LUFS, wav2vec2's conv
features interpolated to the video rate before its transformer, windows clamped at the ends) or
``windowed`` (the SimHash-able approximation). This module only shapes them for the model
(:func:`audio_windows`), cuts a segment's frames (:func:`segment_windows`) and stands in zeros for
a silent clip (the official unconditional pass's input). A speech handed to the render as a
:class:`~newsmotion_engine.speech.audio.SpeechTrack` (a story's) gets the same recipe through the
speech tier's feature sub-cache keyed on its audio's digest (:func:`track_speech_audio`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError

if TYPE_CHECKING:
    from newsmotion_engine.speech.audio import SpeechTrack

__all__ = ["EchoMimicAudioError", "SpeechAudio", "audio_encoder", "audio_windows", "load_speech_audio", "segment_windows",
           "silent_audio", "track_speech_audio"]


class EchoMimicAudioError(NewsmotionError, ValueError):
    """Speech features that do not fit the model (another window, layer count or width)."""


@dataclass(frozen=True)
class SpeechAudio:
    """What a render performs: ``features`` float32 ``[T, window, layers, channels]`` at the model
    fps, the speech's ``duration_s`` and a ``digest`` of the features (None for silence)."""

    speech_id: str | None
    features: np.ndarray
    duration_s: float
    digest: str | None


def audio_windows(features: Any, *, window: int, layers: int, channels: int, what: str = "speech features") -> np.ndarray:
    """Features ``[T, window, layers, channels]`` (or ``[T, window, channels]``: one layer) as the
    model's ``[T, window, layers, channels]`` float32; :class:`EchoMimicAudioError` otherwise."""
    a = np.asarray(features, dtype=np.float32)
    if a.ndim == 3:
        a = a[:, :, None]
    expected = (window, layers, channels)
    if a.ndim != 4 or a.shape[1:] != expected:
        raise EchoMimicAudioError(
            f"{what} have shape {list(np.asarray(features).shape)}; this model reads [T, {window}, {layers}, {channels}] "
            f"(per video frame, {window} wav2vec2 frames x {layers} hidden layers x {channels}); the release reads all 12 "
            "hidden layers of wav2vec2-base (hidden_states[1:])"
        )
    return a


def silent_audio(frames: int, *, window: int, layers: int, channels: int) -> SpeechAudio:
    """Zero features for ``frames`` model frames: a silent clip (what the official unconditional
    guidance pass reads)."""
    return SpeechAudio(None, np.zeros((frames, window, layers, channels), np.float32), 0.0, None)


def segment_windows(features: np.ndarray, start: int, frames: int) -> np.ndarray:
    """Frames ``start .. start + frames`` of ``features``; frames past the end are zeros (silence)."""
    out = np.zeros((frames, *features.shape[1:]), np.float32)
    part = features[start : start + frames]
    out[: len(part)] = part
    return out


def load_speech_audio(speech_root: str | Path, speech_id: str, *, fps: int, window: int, layers: int, channels: int,
                      audio_model_path: str | None, recipe: str = "official", build: bool = False) -> SpeechAudio:  # fmt: skip
    """The features of speech ``speech_id`` under ``speech_root`` at ``fps`` made by ``recipe``
    (``"official"`` or ``"windowed"``), with the speech's duration and a digest of the features.
    ``build``: have the speech tier's feature cache build them when missing or stale (what
    ``prepare_guidance`` does); otherwise only read them. The encoder: :func:`audio_encoder`.

    Raises:
        CacheNotReadyError: (without ``build``) the features are missing, stale or damaged; the
            message says how to build them.
    """
    from newsmotion_engine.errors import CacheError, CacheNotReadyError
    from newsmotion_engine.speech.cache import load_speech_cache
    from newsmotion_engine.speech.features import ensure_features, feature_recipe, load_features

    speech = load_speech_cache(speech_root, speech_id)
    how = feature_recipe(recipe)
    encoder = audio_encoder(audio_model_path, layers)
    if build:
        feats = ensure_features(speech_root, speech_id, fps=fps, encoder=encoder, recipe=how)
    else:
        try:
            feats = load_features(speech_root, speech_id, fps=fps, encoder=encoder, recipe=how)
        except CacheError as exc:
            state = type(exc).__name__.removeprefix("Cache").removesuffix("Error").lower() or "not ready"
            raise CacheNotReadyError(f"{recipe} speech features of {speech_id!r} at {fps} fps", state, exc.problem,
                                     "run `newsmotion render ... -o speech=ID` or the backend's prepare_guidance "
                                     "(Dagster: backend_guidance_cache), which build them") from None  # fmt: skip
    a = audio_windows(feats.features, window=window, layers=layers, channels=channels, what=f"speech {speech_id!r} features")
    return SpeechAudio(speech_id, a, float(speech.duration_s), _features_digest(a))


def track_speech_audio(track: SpeechTrack, *, fps: int, window: int, layers: int, channels: int, encoder: Any,
                       recipe: str = "official") -> SpeechAudio:  # fmt: skip
    """The features of a speech track (a story's speech, handed to the render) at ``fps`` made by
    ``recipe`` with ``encoder`` (:func:`audio_encoder`), through the speech tier's feature
    sub-cache keyed on the track's digest (:func:`~newsmotion_engine.speech.features.ensure_clip_features`
    under ``track.cache_root``: built once, then read); a track without a ``cache_root`` is encoded
    and nothing is kept."""
    from newsmotion_engine.speech.features import ensure_clip_features, feature_recipe

    how = feature_recipe(recipe)
    if track.cache_root is not None:
        feats = ensure_clip_features(track.cache_root, track, fps=fps, encoder=encoder, recipe=how)
    else:
        feats = how.encode(track, fps, encoder=encoder, context=2, encoder_cache=None, verify=False)
    a = audio_windows(feats.features, window=window, layers=layers, channels=channels, what=f"speech track {track.label!r} features")
    return SpeechAudio(None, a, track.duration_s, _features_digest(a))


def audio_encoder(audio_model_path: str | None, layers: int) -> Any:
    """The speech features' wav2vec2 (:class:`~newsmotion_engine.speech.features.AudioEncoder`):
    the folder ``audio_model_path``, else the flash models' ``chinese-wav2vec2-base`` as released
    (``released/chinese-wav2vec2-base/``: no variance normalisation) with random weights."""
    from newsmotion_engine.render.backends.echomimic_v3.config import AUDIO_ENCODER_RELEASED
    from newsmotion_engine.speech.features import AudioEncoder

    # The release reads every hidden layer on its own axis; a one-layer model (the tiny preset) their mean.
    return AudioEncoder.load(audio_model_path, layers="all" if layers > 1 else "mean", released=AUDIO_ENCODER_RELEASED)


def _features_digest(features: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(features.tobytes()).hexdigest()[:16]
