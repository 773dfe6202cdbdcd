"""How far the speech cache's estimates agree with what the TTS knows, on the sample speeches.

For each sample speech (``newsmotion_engine.speech.samples``) the cache is built in a private
storage, then:

- **visemes from audio vs from phonemes**: Pearson correlation, per channel, of the track
  :func:`visemes_from_audio` estimates from the cached 16 kHz audio alone (what a recording gets)
  with the cache's track from eSpeak's phoneme timings (what TTS speech gets);
- **VAD vs the spoken words**: per 10 ms, whether silero VAD calls it speech against whether it lies
  inside a word the TTS reported (gaps between words shorter than the VAD's minimum silence count as
  speech): recall (word time found) and precision (VAD time that is words).

Writes ``benchmarks/results/speech_visemes.json`` (a BenchResult) and ``docs/speech_visemes.png``
(one speech's tracks, phoneme-derived solid, audio-estimated dashed):

    PYTHONPATH=. .venv/bin/python docs/speech_visemes.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from newsmotion_engine.bench.record import RESULTS_DIR, BenchResult, write_result
from newsmotion_engine.speech.cache import load_speech_cache
from newsmotion_engine.speech.preview import viseme_plot_png
from newsmotion_engine.speech.samples import SAMPLE_SPEECHES, ensure_sample_speeches
from newsmotion_engine.speech.vad import VAD_PARAMS
from newsmotion_engine.speech.visemes import CHANNELS, visemes_from_audio
from newsmotion_engine.storage import Storage

PLOTTED = "weather"
STEP_S = 0.01


def _vad_agreement(cache) -> dict[str, float]:
    steps = int(np.ceil(cache.duration_s / STEP_S))
    times = (np.arange(steps) + 0.5) * STEP_S
    spoken = np.zeros(steps, bool)
    bridge = VAD_PARAMS["min_silence_duration_ms"] / 1000.0
    spans = [(w.start_s, w.end_s) for w in cache.words]
    merged = []
    for start, end in spans:
        if merged and start - merged[-1][1] < bridge:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    for start, end in merged:
        spoken |= (times >= start) & (times < end)
    voiced = np.zeros(steps, bool)
    for start, end in cache.vad:
        voiced |= (times >= start) & (times < end)
    both = float((spoken & voiced).sum())
    return {"recall": both / max(1.0, float(spoken.sum())), "precision": both / max(1.0, float(voiced.sum()))}


def main(out_png: Path, out_json: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="newsmotion-speech-") as folder:
        store = Storage(folder)
        started = time.perf_counter()
        ids = ensure_sample_speeches(store)
        build_s = time.perf_counter() - started
        per_speech = {}
        for speech_id in ids:
            cache = load_speech_cache(store, speech_id)
            estimate = visemes_from_audio(SimpleNamespace(samples=cache.audio, sample_rate=cache.sample_rate), cache.fps)
            correlation = {name: float(np.corrcoef(getattr(estimate, name), getattr(cache.visemes, name))[0, 1])
                           for name in CHANNELS if name != "energy"}
            request = SAMPLE_SPEECHES[speech_id]
            per_speech[speech_id] = {
                "voice": request.voice, "words_per_minute": request.words_per_minute,
                "duration_s": round(cache.duration_s, 3), "frames": cache.frames, "vad_segments": len(cache.vad),
                "correlation_audio_vs_phonemes": {k: round(v, 4) for k, v in correlation.items()},
                "vad": {k: round(v, 4) for k, v in _vad_agreement(cache).items()},
            }
            if speech_id == PLOTTED:
                out_png.write_bytes(viseme_plot_png(
                    cache.visemes, audio=cache.audio, vad=cache.vad, phonemes=cache.phonemes, compare=estimate,
                    title=f"sample speech '{speech_id}' ({request.voice}, {request.words_per_minute} wpm): "
                          "visemes from eSpeak's phonemes (solid) and estimated from the audio alone (dashed)"))
    mean = {name: float(np.mean([s["correlation_audio_vs_phonemes"][name] for s in per_speech.values()]))
            for name in ("open", "wide", "round")}
    recall = float(np.mean([s["vad"]["recall"] for s in per_speech.values()]))
    precision = float(np.mean([s["vad"]["precision"] for s in per_speech.values()]))
    audio_s = sum(s["duration_s"] for s in per_speech.values())
    result = BenchResult.now(
        "speech_visemes",
        title=f"speech cache on the {len(per_speech)} sample speeches ({audio_s:.1f} s of eSpeak NG speech, 30 fps): "
              "audio-estimated visemes vs phoneme-derived, silero VAD vs the TTS's word timings",
        device=f"cpu ({os.cpu_count()} cores)",
        command="PYTHONPATH=. .venv/bin/python docs/speech_visemes.py",
        headline={
            "open r (audio vs phonemes)": round(mean["open"], 3),
            "wide r": round(mean["wide"], 3),
            "round r": round(mean["round"], 3),
            "VAD recall of word time": round(recall, 3),
            "VAD precision": round(precision, 3),
            "cache build s per audio s": round(build_s / audio_s, 3),
        },
        data={"speeches": per_speech, "build_s": round(build_s, 3), "audio_s": round(audio_s, 3),
              "vad_params": VAD_PARAMS, "step_s": STEP_S},
    )
    write_result(out_json, result)
    print(result.to_json())


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else here / "speech_visemes.png",
         Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS_DIR / "speech_visemes.json")
