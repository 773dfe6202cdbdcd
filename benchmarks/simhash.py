"""The SimHash audio-encoder bypass on the sample speeches: hit rate, ms saved per hit and the
error of reused encoder outputs, swept over Hamming thresholds.

    python -m benchmarks.simhash [--device cpu|cuda] [--thresholds 0,2,4,...] [--json PATH] [--chart PNG]
    python -m benchmarks.simhash --chart docs/speech_simhash.png --from benchmarks/results/simhash_cpu.json
    python -m benchmarks.simhash --device cuda --speech-root storage/speech --json simhash_h100.json

The speeches are the sample speeches (``speech/samples.py``: six TTS voices and rates, the
``headlines`` and ``sport`` speeches ending with the same sign-off), built into a temporary
speech root, or ``--wav`` files. Each threshold starts from an empty encoder cache and runs
:func:`~newsmotion_engine.speech.features.encode_for_video` on the speeches in order, the cache
shared between them (a hit may come from an earlier speech or from earlier in the same one), with
``verify=True``: each reused output is compared with a freshly computed one (cosine distance).

Timing: a first pass without the cache encodes every window and measures the encoder's time per
window on this device. The threshold passes then replay those outputs (the encoder is
deterministic, so a window's output is the same on every pass) instead of recomputing them, so a
threshold costs only its hashing and lookups, which are timed for real. ms saved per hit = the
encoder's time per window minus the hashing and lookup time of all windows spread over the hits.

With random weights (no wav2vec2 download here) the cosine distance measures whether the hash
finds windows the encoder maps to the same output, not lip quality. For scale, the result also
gives the distance between the outputs of unrelated windows. The threshold chosen
(:func:`choose_threshold`) is the largest whose near-duplicate reuses keep nearly all of exact
hashing's advantage over reusing an unrelated window: its mean reuse distance may exceed exact
hashing's by at most :data:`TOLERANCE` of the gap between exact hashing's and the unrelated one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lab_record import running_command

__all__ = ["ReplayEncoder", "choose_threshold", "error_limit", "sweep_rows", "main"]

THRESHOLDS = (0, 2, 4, 6, 8, 10, 12, 16)
# The share of exact hashing's advantage over an unrelated window that near-duplicates may give up.
TOLERANCE = 0.1


class ReplayEncoder:
    """An :class:`~newsmotion_engine.speech.features.AudioEncoder` that remembers each window's
    output (keyed by the window's samples) and returns it again instead of recomputing it;
    ``encoder_s`` and ``computed`` count only real encoder calls."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.outputs: dict[bytes, np.ndarray] = {}
        self.windows: dict[bytes, np.ndarray] = {}
        self.encoder_s = 0.0
        self.encoder_cpu_s = 0.0  # CPU time of this process while encoding: less swayed by other work
        self.computed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def encode(self, window: np.ndarray) -> np.ndarray:
        key = hashlib.sha1(np.ascontiguousarray(window, dtype=np.float32).tobytes()).digest()
        if key not in self.outputs:
            t0, c0 = time.perf_counter(), time.process_time()
            self.outputs[key] = self.encoder.encode(window)
            self.windows[key] = np.array(window, dtype=np.float32)
            self.encoder_s += time.perf_counter() - t0
            self.encoder_cpu_s += time.process_time() - c0
            self.computed += 1
        return self.outputs[key]


def unrelated_distance(outputs: list[np.ndarray], core: slice, pairs: int = 400, seed: int = 0) -> float:
    """Mean cosine distance between the kept rows of two different windows picked at random."""
    from newsmotion_engine.speech.features import cosine_distance

    rng = np.random.default_rng(seed)
    values = []
    for _ in range(pairs):
        i, j = rng.choice(len(outputs), size=2, replace=False)
        values.append(float(np.mean(cosine_distance(outputs[i][core], outputs[j][core]))))
    return float(np.mean(values))


def one_sample_shift_distance(replay: ReplayEncoder, core: slice, count: int = 12) -> float:
    """Mean cosine distance between the kept rows of a window and of the same audio one sample
    later (``count`` windows spread over the speeches): how sensitive the encoder itself is to a
    shift far below what the hash can see."""
    from newsmotion_engine.speech.features import cosine_distance

    keys = list(replay.windows)
    picks = [keys[i] for i in np.linspace(0, len(keys) - 1, min(count, len(keys))).astype(int)]
    values = []
    for key in picks:
        window = replay.windows[key]
        shifted = np.concatenate([window[1:], window[-1:]])
        values.append(float(np.mean(cosine_distance(replay.outputs[key][core], replay.encoder.encode(shifted)[core]))))
    return float(np.mean(values))


def sweep_rows(per_speech: dict[int, list[dict[str, Any]]], encoder_ms_per_window: float) -> list[dict[str, Any]]:
    """One row per threshold from the per-speech stats of its pass: windows, hits, hit rate, ms
    saved per hit (net of hashing and looking up every window) and the reuse distance."""
    rows = []
    for threshold, speeches in per_speech.items():
        windows = sum(s["windows"] for s in speeches)
        hits = sum(s["hits"] for s in speeches)
        overhead_ms = 1000.0 * sum(s["hash_s"] + s["lookup_s"] for s in speeches)
        measured = [(s["reuse_cosine_distance"]["mean"], s["reuse_cosine_distance"]["windows"]) for s in speeches
                    if s["reuse_cosine_distance"]]  # fmt: skip
        distance = sum(m * n for m, n in measured) / sum(n for _, n in measured) if measured else None
        rows.append({
            "max_distance": threshold,
            "windows": windows,
            "hits": hits,
            "exact_hits": sum(s["exact_hits"] for s in speeches),
            "hit_rate": round(hits / windows, 4) if windows else 0.0,
            "overhead_ms_per_window": round(overhead_ms / windows, 3) if windows else None,
            "ms_saved_per_hit": round(encoder_ms_per_window - overhead_ms / hits, 2) if hits else None,
            "seconds_saved": round((hits * encoder_ms_per_window - overhead_ms) / 1000.0, 3),
            "reuse_cosine_distance": round(distance, 4) if distance is not None else None,
            "reuse_cosine_distance_max": round(max(s["reuse_cosine_distance"]["max"] for s in speeches if s["reuse_cosine_distance"]), 4)
            if measured else None,
        })  # fmt: skip
    return rows


def error_limit(rows: list[dict[str, Any]], unrelated: float, tolerance: float = TOLERANCE) -> float:
    """The most mean reuse distance a threshold may have: exact hashing's (threshold 0; taken as 0
    when it had no hits) plus ``tolerance`` of the gap from it to the unrelated windows' distance."""
    exact = next((r["reuse_cosine_distance"] for r in rows if r["max_distance"] == 0), None) or 0.0
    return exact + tolerance * (unrelated - exact)


def choose_threshold(rows: list[dict[str, Any]], unrelated: float, tolerance: float = TOLERANCE) -> int:
    """The largest threshold whose mean reuse distance is within :func:`error_limit` (one without
    hits reuses nothing and qualifies); 0, exact hashing, when no larger one does."""
    limit = error_limit(rows, unrelated, tolerance)
    ok = [r["max_distance"] for r in rows if r["reuse_cosine_distance"] is None or r["reuse_cosine_distance"] <= limit]
    return max(ok, default=0)


def _speeches(args: argparse.Namespace, root: Path) -> list[tuple[str, Any]]:
    """The speeches in order: ``--wav`` files, else the sample speeches' caches in
    ``--speech-root`` (read as they are when all are there: a GPU machine without the TTS can
    run on caches built elsewhere), built into ``root`` or that folder otherwise."""
    if args.wav:
        from newsmotion_engine.speech.audio import load_speech

        return [(Path(w).stem, load_speech(w)) for w in args.wav]
    from newsmotion_engine.speech.cache import SpeechCacheError, load_speech_cache
    from newsmotion_engine.speech.samples import SAMPLE_SPEECHES, ensure_sample_speeches

    root = Path(args.speech_root) if args.speech_root else root
    try:
        return [(sid, load_speech_cache(root, sid)) for sid in SAMPLE_SPEECHES]
    except SpeechCacheError:
        return [(sid, load_speech_cache(root, sid)) for sid in ensure_sample_speeches(root)]


def measure(args: argparse.Namespace, log=print) -> dict[str, Any]:  # noqa: ANN001
    from newsmotion_engine.bench.common import cpu_device, machine_info
    from newsmotion_engine.speech.features import DEFAULT_WINDOW, AudioEncoder, cosine_distance, encode_for_video, open_encoder_cache

    root = Path(tempfile.mkdtemp(prefix="newsmotion-simhash-"))
    try:
        speeches = _speeches(args, root / "speech")
        encoder = AudioEncoder.load(args.model, device=args.device)
        device = cpu_device() if args.device == "cpu" else _gpu_name(args.device)
        window = DEFAULT_WINDOW
        encoder.encode(np.zeros(window.samples, np.float32))  # first call's set-up is not an encoder cost
        replay = ReplayEncoder(encoder)
        fresh: dict[str, np.ndarray] = {}
        for name, speech in speeches:
            fresh[name] = encode_for_video(speech, args.fps, encoder=replay).features
            log(f"{name}: {len(fresh[name]) / args.fps:.2f} s, {replay.computed} windows encoded so far")
        encoder_ms = 1000.0 * replay.encoder_s / replay.computed
        core = slice(window.margin_frames, window.margin_frames + window.core_frames)
        unrelated = unrelated_distance(list(replay.outputs.values()), core)
        shift = one_sample_shift_distance(replay, core)
        log(f"encoder {encoder_ms:.1f} ms per window ({replay.computed} windows); unrelated windows' distance {unrelated:.3f}; "
            f"one-sample shift {shift:.3f}")  # fmt: skip
        per_speech: dict[int, list[dict[str, Any]]] = {}
        speech_rows = []
        for threshold in args.thresholds:
            folder = root / f"encoder-cache-{threshold}"
            cache = open_encoder_cache(folder, replay, max_distance=threshold, window=window)
            per_speech[threshold] = []
            for name, speech in speeches:
                result = encode_for_video(speech, args.fps, encoder=replay, cache=cache, window=window, verify=True)
                stats = result.stats
                per_speech[threshold].append(stats)
                centre = result.features.shape[1] // 2
                video = cosine_distance(result.features[:, centre], fresh[name][:, centre])
                speech_rows.append({"max_distance": threshold, "speech": name, "windows": stats["windows"], "hits": stats["hits"],
                                    "exact_hits": stats["exact_hits"], "hit_rate": round(stats["hit_rate"], 4),
                                    "reuse_cosine_distance": stats["reuse_cosine_distance"],
                                    "video_rows_cosine_distance_mean": round(float(np.mean(video)), 4)})  # fmt: skip
            shutil.rmtree(folder, ignore_errors=True)
            row = sweep_rows({threshold: per_speech[threshold]}, encoder_ms)[0]
            log(f"max_distance {threshold}: hit rate {row['hit_rate']:.3f} ({row['hits']}/{row['windows']}, exact {row['exact_hits']}), "
                f"ms saved per hit {row['ms_saved_per_hit']}, reuse distance {row['reuse_cosine_distance']}")  # fmt: skip
        rows = sweep_rows(per_speech, encoder_ms)
        chosen = choose_threshold(rows, unrelated)
        return {
            "benchmark": "simhash-encoder-bypass",
            "device": device,
            "weights": encoder.weights_label,
            "speeches": [name for name, _ in speeches],
            "fps": args.fps,
            "window": window.params,
            "encoder_ms_per_window": round(encoder_ms, 2),
            "encoder_cpu_ms_per_window": round(1000.0 * replay.encoder_cpu_s / replay.computed, 2),
            "windows_encoded": replay.computed,
            "unrelated_window_cosine_distance": round(unrelated, 4),
            "one_sample_shift_cosine_distance": round(shift, 4),
            "tolerance": TOLERANCE,
            "error_limit": round(error_limit(rows, unrelated), 4),
            "chosen_max_distance": chosen,
            "sweep": rows,
            "per_speech": speech_rows,
            "machine": machine_info(),
            # Other work on the machine slows the encoder and so inflates the ms saved per hit.
            "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            "note": "random weights: the cosine distance measures how well the hash picks windows the encoder maps to the same "
                    "output, not lip quality" if encoder.weights_label == "random weights" else None,
        }  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def write_result(path: str | Path, data: dict[str, Any]) -> Path:
    from newsmotion_engine.bench.record import BenchResult
    from newsmotion_engine.bench.record import write_result as write_record

    chosen = next(r for r in data["sweep"] if r["max_distance"] == data["chosen_max_distance"])
    headline = {
        "chosen Hamming threshold (bits)": data["chosen_max_distance"],
        "hit rate at it": chosen["hit_rate"],
        "ms saved per hit": chosen["ms_saved_per_hit"] if chosen["ms_saved_per_hit"] is not None else "no hits",
        "reuse cosine distance": chosen["reuse_cosine_distance"] if chosen["reuse_cosine_distance"] is not None else "no hits",
        "encoder ms per window": data["encoder_ms_per_window"],
    }
    result = BenchResult.now(Path(path).stem, device=data["device"], command=running_command(), data=data, weights=data["weights"],
                             title=f"SimHash encoder bypass on {len(data['speeches'])} speeches: hit rate, ms saved per hit and "
                                   "reuse error per Hamming threshold (wav2vec2-base windows)",
                             headline=headline)  # fmt: skip
    return write_record(Path(path), result)


def draw_chart(data: dict[str, Any], png: str | Path) -> Path:
    """Hit rate and reuse distance per threshold, the chosen one marked; a small PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = data["sweep"]
    x = [r["max_distance"] for r in rows]
    fig = Figure(figsize=(6.0, 3.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(x, [100 * r["hit_rate"] for r in rows], "o-", color="#1f77b4", label="hit rate (% of windows)")
    ax.set_xlabel("Hamming threshold (bits of 64)")
    ax.set_ylabel("hit rate, %", color="#1f77b4")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    dist = [r["reuse_cosine_distance"] if r["reuse_cosine_distance"] is not None else np.nan for r in rows]
    ax2.plot(x, dist, "s-", color="#d62728", label="reuse cosine distance")
    unrelated = data["unrelated_window_cosine_distance"]
    levels = ((unrelated, "unrelated windows", "gray"), (error_limit(rows, unrelated, data["tolerance"]), "error limit", "#d62728"),
              (data["one_sample_shift_cosine_distance"], "same audio, 1 sample later", "#7f7f7f"))
    for level, label, color in levels:
        ax2.axhline(level, color=color, ls=":", lw=1)
        ax2.text(x[-1], level, label, color=color, fontsize=7, ha="right", va="bottom")
    ax2.set_ylabel("cosine distance, reused vs fresh", color="#d62728")
    ax2.set_ylim(0, max(unrelated, np.nanmax(dist) if np.isfinite(np.nanmax(dist)) else unrelated) * 1.05)
    ax.axvline(data["chosen_max_distance"], color="gray", ls="--", lw=1)
    ax.set_title(f"SimHash bypass, {len(data['speeches'])} sample speeches ({data['weights']}, {data['device']})", fontsize=9)
    fig.tight_layout()
    png = Path(png)
    fig.savefig(png)
    return png


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--model", default=None, help="a local wav2vec2 folder (default: wav2vec2-base with random weights)")
    p.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)), help="Hamming thresholds to sweep, comma-separated")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--wav", nargs="*", help="speech files to use instead of the sample speeches")
    p.add_argument("--speech-root", help="a speech root holding (or to hold) the sample speeches' caches (default: a temporary one)")
    p.add_argument("--json", help="write the result record here")
    p.add_argument("--chart", help="draw the sweep as a PNG here")
    p.add_argument("--from", dest="from_json", metavar="JSON", help="draw --chart from an existing result (no measuring)")
    a = p.parse_args(argv)
    try:
        a.thresholds = sorted({int(t) for t in a.thresholds.split(",") if t.strip()})
    except ValueError:
        p.error(f"--thresholds {a.thresholds!r}: give comma-separated integers")
    if a.from_json:
        from newsmotion_engine.bench.record import read_result

        data = read_result(Path(a.from_json)).data
    else:
        data = measure(a)
        if a.json:
            write_result(a.json, data)
    if a.chart:
        draw_chart(data, a.chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
