"""Voice activity: where in a speech someone is talking, as ``[(start_s, end_s), ...]``.

Silero VAD (the ``silero-vad`` wheel, pinned in requirements-nodeps.lock) ships its weights inside
the wheel and runs on the project's CPU torch alone; it is installed with ``--no-deps`` because its
declared extras would pull torchaudio / onnxruntime. Its TorchScript model scores each 32 ms window
of 16 kHz audio; :func:`voice_segments` turns the scores into segments with silero's own
``get_speech_timestamps`` and the settings in :data:`VAD_PARAMS` (recorded in the speech cache, so
changing them rebuilds it).

Two things the library does that this module undoes or guards: importing it sets torch's thread
count to 1 for the whole process (restored here, so a wav2vec2 or diffusion model in the same
process keeps its threads), and its model carries recurrent state between calls (one call at a
time, under :data:`_LOCK`; ``get_speech_timestamps`` resets the state itself). It runs on one
thread (see :func:`voice_segments`).
"""

from __future__ import annotations

import threading
from importlib import metadata

import numpy as np

from newsmotion_engine.errors import NewsmotionError

__all__ = ["VAD_PARAMS", "vad_params", "voice_segments"]

SAMPLE_RATE = 16000
# silero's defaults, except a longer minimum silence: a breath between words is not a pause.
VAD_PARAMS = {
    "threshold": 0.5,
    "min_speech_duration_ms": 250,
    "min_silence_duration_ms": 200,
    "speech_pad_ms": 30,
}

_LOCK = threading.Lock()
_model = None


def vad_params() -> dict:
    """What a VAD result depends on: the model (name and version) and :data:`VAD_PARAMS`."""
    return {"model": "silero-vad", "version": _silero_version(), **VAD_PARAMS}


def _silero_version() -> str:
    try:
        return metadata.version("silero-vad")
    except metadata.PackageNotFoundError:
        raise NewsmotionError(
            "silero-vad is not installed: pip install --no-deps silero-vad==6.2.3 (see requirements-nodeps.lock)"
        ) from None


def _load():
    global _model
    if _model is None:
        _silero_version()
        import torch

        threads = torch.get_num_threads()
        try:
            import silero_vad
        finally:
            torch.set_num_threads(threads)  # silero_vad.model sets 1 at import
        _model = silero_vad.load_silero_vad()
    return _model


def voice_segments(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> list[tuple[float, float]]:
    """Speech segments of 16 kHz mono ``samples`` as ``(start_s, end_s)`` pairs, in order and
    non-overlapping; ``[]`` when nobody speaks.

    Example::

        voice_segments(load_speech("take.wav").samples)   # [(0.42, 2.91), (3.35, 6.02)]
    """
    if sample_rate != SAMPLE_RATE:
        raise ValueError(f"voice_segments expects {SAMPLE_RATE} Hz audio, got {sample_rate} Hz")
    import torch

    audio = torch.from_numpy(np.array(samples, dtype=np.float32))  # a writable copy (cache audio is read-only)
    with _LOCK:
        model = _load()
        from silero_vad import get_speech_timestamps  # imported by _load, threads restored

        # The model is tiny: one 512-sample window at a time gains nothing from intra-op threads, and
        # on a busy machine their spin-waits made it an order of magnitude slower.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.inference_mode():
                found = get_speech_timestamps(audio, model, sampling_rate=SAMPLE_RATE, **VAD_PARAMS)
        finally:
            torch.set_num_threads(threads)
    return [(round(s["start"] / SAMPLE_RATE, 4), round(s["end"] / SAMPLE_RATE, 4)) for s in found]
