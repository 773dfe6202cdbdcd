"""EchoMimicV3's audio features as its official inference computes them (the "official" recipe).

Read from the release (``antgroup/echomimic_v3``: ``infer_flash.py``'s ``get_audio_embed`` and the
frame windowing after it, ``src/wav2vec2.py``'s ``Wav2Vec2Model`` subclass), for a clip of
``frames`` video frames at ``fps``:

1. the speech loudness-normalised to -23 LUFS over its whole length (``loudness_norm``:
   pyloudnorm's BS.1770 meter; here :mod:`newsmotion_engine.speech.loudness`), then cut to
   ``int(frames / fps * 16000)`` samples;
2. ``Wav2Vec2FeatureExtractor``: zero mean and unit variance over the clip
   (``(x - mean) / sqrt(var + 1e-7)``) **only when the encoder's preprocessor config says
   ``do_normalize``**. The flash models' encoder, ``chinese-wav2vec2-base``, says
   ``do_normalize: false`` (its released ``preprocessor_config.json``, recorded in the backend's
   ``released/`` folder), so it reads the samples at their -23 LUFS level: the gain matters, and the
   loudness step is part of the recipe. (With ``do_normalize`` on, as for ``wav2vec2-base-960h``, a
   constant gain would cancel up to the 1e-7 in the variance.) Because the step measures and sets
   the loudness of the whole speech, whatever gain the speech cache applied (-20 dBFS RMS) cancels;
3. the whole clip through wav2vec2 at once: the conv front end's 50 Hz output interpolated linearly
   to ``frames`` rows (``F.interpolate(mode="linear", align_corners=True)`` on ``[B, C, T]``) *before*
   the feature projection and the transformer (:meth:`AudioEncoder.encode_at_frames`);
4. ``hidden_states[1:]`` (the 12 transformer layers' outputs) stacked: ``[frames, 12, 768]``
   (``layers="all"``; other ``layers`` choices pick or average them);
5. per frame ``i`` the rows ``i-2 .. i+2`` with indices clamped at the ends: ``[frames, 5, 12, 768]``.

What differs from the release: the speech comes from the speech cache (decoded and resampled to
16 kHz by ffmpeg, not librosa), the frame count is the speech's (``frame_count``: the last partial
frame counts; the release floors to whole frames and to 4k+1), and clips shorter than one 400 ms
loudness block are left at their level (the release's meter refuses them).

The transformer attends over the whole clip, so its cost grows with the square of the length; no
part of it can be reused across speeches (the windowed recipe, :class:`~.features.WindowedRecipe`,
is the SimHash-able approximation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from newsmotion_engine.speech.audio import SPEECH_SAMPLE_RATE
from newsmotion_engine.speech.features import AudioEncoder, AudioFeatures, speech_samples, with_context
from newsmotion_engine.speech.loudness import normalize_loudness
from newsmotion_engine.speech.simhash import EncoderCache
from newsmotion_engine.speech.visemes import frame_count

__all__ = ["OFFICIAL_LOUDNESS_LUFS", "OfficialRecipe", "encode_clip_at_video_rate"]

OFFICIAL_LOUDNESS_LUFS = -23.0  # infer_flash.py loudness_norm(..., lufs=-23)
# Bumped when this recipe's computation changes, so the feature caches it made go stale.
RECIPE_VERSION = 1
_VARIANCE_EPS = 1e-7  # Wav2Vec2FeatureExtractor's zero_mean_unit_var_norm


def encode_clip_at_video_rate(speech: Any, frames: int, *, encoder: AudioEncoder, fps: float, context: int = 2,
                              loudness_lufs: float = OFFICIAL_LOUDNESS_LUFS) -> AudioFeatures:  # fmt: skip
    """The official features of ``speech`` (a ``Speech`` or a speech cache, 16 kHz) for ``frames``
    video frames at ``fps``: ``[frames, 2*context+1, hidden]`` float32 (``[..., layers, hidden]``
    with ``layers="all"``), computed as the module docstring lists. ``stats``: the loudness gain
    applied (dB; None when the speech was too short or silent), the samples read and the seconds
    the encoder took.

    Example::

        encoder = AudioEncoder.load("models/chinese-wav2vec2-base", layers="all")
        result = encode_clip_at_video_rate(load_speech("intro.wav"), 81, encoder=encoder, fps=25)
        result.features.shape                                   # (81, 5, 12, 768)
    """
    if frames < 1 or fps <= 0 or context < 0:
        raise ValueError(f"frames must be >= 1, fps positive and context >= 0, got {frames}, {fps}, {context}")
    x, gain_db = normalize_loudness(speech_samples(speech), SPEECH_SAMPLE_RATE, loudness_lufs)
    x = x[: int(frames / fps * SPEECH_SAMPLE_RATE)]
    if encoder.normalize:
        x64 = x.astype(np.float64)
        x = ((x64 - x64.mean()) / np.sqrt(x64.var() + _VARIANCE_EPS)).astype(np.float32)
    start = time.perf_counter()
    rows = encoder.encode_at_frames(x, frames)
    stats = {"recipe": OfficialRecipe.name, "weights": encoder.weights_label, "loudness_gain_db": gain_db,
             "samples": int(x.size), "encoder_s": time.perf_counter() - start}  # fmt: skip
    return AudioFeatures(features=with_context(rows, context), stats=stats)


@dataclass(frozen=True)
class OfficialRecipe:
    """The official recipe as a :class:`~.features.FeatureRecipe`: the clip is the whole speech,
    ``frame_count(duration, fps)`` frames. No encoder cache applies (one pass over the whole clip)."""

    loudness_lufs: float = OFFICIAL_LOUDNESS_LUFS
    name: ClassVar[str] = "official"

    @property
    def params(self) -> dict[str, Any]:
        return {"recipe": self.name, "version": RECIPE_VERSION, "loudness_lufs": self.loudness_lufs,
                "interpolation": "linear, align_corners, before the feature projection"}  # fmt: skip

    def encode(self, speech: Any, fps: float, *, encoder: AudioEncoder, context: int, encoder_cache: EncoderCache | None,
               verify: bool) -> AudioFeatures:  # fmt: skip
        if encoder_cache is not None or verify:
            raise ValueError("the official audio feature recipe encodes the whole clip at once; an encoder cache (and its "
                             "verify) applies to the windowed recipe only")  # fmt: skip
        frames = frame_count(speech_samples(speech).size / SPEECH_SAMPLE_RATE, fps)
        return encode_clip_at_video_rate(speech, frames, encoder=encoder, fps=fps, context=context, loudness_lufs=self.loudness_lufs)
