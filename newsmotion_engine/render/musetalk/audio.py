"""MuseTalk's audio tokens per video frame, as the official inference makes them.

whisper-tiny's encoder runs on 30-second log-mel windows of the 16 kHz speech; every hidden state
(the embedding and the 4 layers: 5 x 384 at 50 Hz) is kept. Per video frame ``i`` at ``fps``, the
tokens are the 10 hidden-state frames from ``floor(i * 50 / fps)`` in a copy padded with zeros
(``2 * ceil(50 / fps)`` frames before, three times that after): 10 x 5 = 50 tokens of 384, time
major. That is +-2 video frames of context at 25 fps. The sinusoidal positional table is added
when a batch goes into the UNet (:mod:`.stage`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["audio_tokens", "whisper_hidden_states"]

WINDOW_S = 30  # whisper's log-mel window


def whisper_hidden_states(samples: np.ndarray, components: Any) -> np.ndarray:
    """float32 ``[T_50Hz, L + 1, 384]`` for 16 kHz mono ``samples`` (``T_50Hz = floor(seconds * 50)``)."""
    import torch

    rate = int(components.inference["sample_rate"])
    step = WINDOW_S * rate
    parts = []
    with torch.no_grad():
        for start in range(0, max(1, len(samples)), step):
            window = np.asarray(samples[start : start + step], np.float32)
            mel = components.feature_extractor(window, sampling_rate=rate, return_tensors="pt").input_features
            states = components.whisper(mel.to(components.device, components.dtype), output_hidden_states=True).hidden_states
            parts.append(torch.stack(states, dim=2)[0].float().cpu())
    hidden = torch.cat(parts, dim=0)
    frames = math.floor(len(samples) / rate * components.inference["audio_fps"])
    return hidden[:frames].numpy()


def audio_tokens(hidden: np.ndarray, duration_s: float, fps: int, inference: dict[str, Any], *,
                 frames: int | None = None) -> np.ndarray:  # fmt: skip
    """float32 ``[T_video, 10 * (L + 1), 384]``: one 50-token window per video frame
    (``T_video``: ``frames`` when given, the caller's exact count, else ``floor(duration_s * fps)``)."""
    audio_fps = int(inference["audio_fps"])
    left, right = int(inference["audio_padding_left"]), int(inference["audio_padding_right"])
    per_frame = 2 * (left + right + 1)
    step = audio_fps / int(fps)
    pad = math.ceil(step)
    padded = np.concatenate([np.zeros((pad * left, *hidden.shape[1:]), np.float32), hidden,
                             np.zeros((pad * 3 * right, *hidden.shape[1:]), np.float32)])  # fmt: skip
    frames = math.floor(duration_s * fps) if frames is None else int(frames)
    out = np.empty((frames, per_frame * hidden.shape[1], hidden.shape[2]), np.float32)
    for i in range(frames):
        at = math.floor(i * step)
        window = padded[at : at + per_frame]
        if len(window) < per_frame:  # the speech's last frame rounds past the audio: zeros, as silence
            window = np.concatenate([window, np.zeros((per_frame - len(window), *hidden.shape[1:]), np.float32)])
        out[i] = window.reshape(-1, hidden.shape[2])
    return out
