"""Lip sync on the sample personas speaking a sample speech: the warp backend's own lips
(``--arm warp``), MuseTalk 1.5's drawn over warp's silent render (``--arm musetalk``) or the
audio-driven echomimic-v3 backend performing the speech (``--arm echomimic-v3``).

For every sample portrait, the persona performs the idle loop (breathing, head drift; cycled to the
speech's length) while speaking the sample speech ``weather`` (eSpeak NG through
:func:`newsmotion_engine.speech.tts.synthesize`, its phoneme timings turned into a viseme track
by :func:`~newsmotion_engine.speech.visemes.visemes_from_phonemes` at 30 fps). The clip is
rendered at 720x1280 through the product's ``render_clip`` with ``visemes=`` and scored with the
product's :func:`~newsmotion_engine.render.lipsync.lip_sync_score` (mediapipe face mesh on the
written mp4). A control renders the same clip silent and scores it against the same track: a
score is only meaningful if the silent clip scores far lower.

Targets (the issue's): correlation >= 0.6 and |offset| <= 1 frame on the sample portraits. The
``camera`` portrait is a profile: its mouth is seen from the side and reads narrow.

The ``musetalk`` arm renders the same clip silent with warp and passes it through the MuseTalk
stage as ``newsmotion lips`` does (:func:`~newsmotion_engine.render.musetalk.pipeline.lip_sync_render`,
the released architecture with random weights, on the CPU), then scores its output with the same
:func:`~newsmotion_engine.render.lipsync.lip_sync_score`; the silent render is the control.
Random weights redraw the lower face as noise, so the score is noise: the arm measures that the
stage's output is scored end to end, not lip-sync quality. The stage runs well under 1 fps on
this CPU at 720x1280 (plus the avatar's VAE encoding of every frame), so the arm takes one
persona (``astronaut``) and the shortest sample speech, ``intro``, cut to its first
``--seconds`` (1.0 s, "Good evening": 30 frames), a few minutes in all.

The ``echomimic-v3`` arm has the backend perform the same speech (``intro`` up to its first
``--seconds``, 2.0 s by default: the whole of it, 1.8 s, 55 frames at 30 fps) through the product's
``render_clip`` at 720x1280 and scores the written clip with the same
:func:`~newsmotion_engine.render.lipsync.lip_sync_score`. The speech reaches the backend as a story
hands it to an audio-driven backend (``hears_speech``): a
:class:`~newsmotion_engine.speech.audio.SpeechTrack` of the cut's samples, its features made by the
backend's own recipe (official by default, cached by the audio's digest); ``render_clip`` takes no
speech track, so the features are given to the backend (``use_speech_audio``) and the clip has the
speech's length. The model takes no pose and draws the whole frame, so there is no silent control.
It runs the ``tiny`` preset on the CPU by default (``--preset flash-pro``: the released
architecture, on a GPU when there is one), in both cases with **random weights** (no model folder):
every frame is noise, the face mesh finds no face in it, and the record says so (faces found N of
M, the reason there is no score). The arm measures the plumbing (speech -> backend -> clip ->
score), not lip-sync quality (with a model folder in ``$NEWSMOTION_MODEL_DIR_ECHOMIMIC`` the same
run would score real weights; none is here). About two minutes on 2 cores.

Run from the repository root (CPU, about a minute per persona on 2 cores for the warp arm)::

    python -m benchmarks.lipsync                         # writes benchmarks/results/lipsync_warp.json
    python -m benchmarks.lipsync --json /tmp/l.json --personas astronaut
    python -m benchmarks.lipsync --arm musetalk          # writes benchmarks/results/lipsync_musetalk_cpu.json
    python -m benchmarks.lipsync --arm echomimic-v3      # writes benchmarks/results/lipsync_echomimic_v3_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.bench.common import cpu_device, machine_info
from newsmotion_engine.bench.record import RESULTS_DIR, BenchResult, write_result
from newsmotion_engine.guidance.choreography import author_idle
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.render import RenderSpec, get_backend, render_clip
from newsmotion_engine.render.lipsync import (
    TARGET_CORRELATION,
    TARGET_OFFSET_FRAMES,
    LipSyncError,
    lip_sync_problems,
    lip_sync_score,
)
from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait
from newsmotion_engine.speech.samples import SAMPLE_SPEECHES
from newsmotion_engine.speech.visemes import visemes_from_phonemes
from newsmotion_engine.storage import Storage

SPEECH = "weather"
COMMAND = "python -m benchmarks.lipsync"
MUSETALK_SPEECH = "intro"
MUSETALK_SECONDS = 1.0
MUSETALK_PERSONAS = ["astronaut"]
NOISE_NOTE = "random weights: the score is noise; this measures that the stage's output is scored end to end"
ECHOMIMIC_PRESET = "tiny"
ECHOMIMIC_SECONDS = 2.0
ECHOMIMIC_NOTE = ("random weights: the whole frame is noise (the face mesh is not expected to find a face), so any "
                  "score is noise; this measures the plumbing: speech -> echomimic-v3 -> render_clip -> lip-sync scoring")


@dataclass
class _Idle:
    """The idle loop as a render's guidance, ``frames`` long (one idle cycle repeated)."""

    loop_id: str
    keypoints: np.ndarray
    fps: int
    width: int = 720
    height: int = 1280

    @property
    def frames(self) -> int:
        return int(self.keypoints.shape[0])


def idle_guidance(frames: int, fps: int) -> _Idle:
    cycle = author_idle(fps)
    reps = -(-frames // cycle.shape[0])
    return _Idle("idle", np.ascontiguousarray(np.concatenate([cycle] * reps)[:frames]), fps)


def bench_lipsync(storage: Storage, personas: list[str], *, speech_id: str = SPEECH, fps: int = 30,
                  log=print) -> dict[str, Any]:  # fmt: skip
    request = SAMPLE_SPEECHES[speech_id]
    synthesis = request.synthesize()
    visemes = visemes_from_phonemes(synthesis.phonemes, synthesis.duration_s, fps)
    guidance = idle_guidance(len(visemes), fps)
    spec = RenderSpec(fps=fps)
    warp = get_backend("warp")
    warp.load()
    rows = []
    with tempfile.TemporaryDirectory(prefix="newsmotion-lipsync-") as tmp:
        for name in personas:
            persona, _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))
            out = Path(tmp) / f"{name}.mp4"
            tele = render_clip(guidance, persona, warp, spec, out, visemes=visemes)
            face = warp.describe().get("last_render", {}).get("face", {})
            score = lip_sync_score(out, visemes)
            silent_out = Path(tmp) / f"{name}-silent.mp4"
            render_clip(guidance, persona, warp, spec, silent_out)
            started = time.perf_counter()
            control = lip_sync_score(silent_out, visemes)
            row = {
                "persona": name,
                "kind": SAMPLE_PORTRAITS[name].kind,
                "lips_moved": bool(face.get("moved")),
                "mouth_width_px": face.get("mouth_width_px"),
                "blinks": face.get("blinks"),
                "nod_px_max": face.get("nod_px_max"),
                "render_fps": tele.fps_achieved,
                "score": asdict(score),
                "problems": lip_sync_problems(score),
                "control_silent": {"correlation": control.correlation, "offset_frames": control.offset_frames,
                                   "seconds": round(time.perf_counter() - started, 2)},  # fmt: skip
            }
            rows.append(row)
            log(f"{name}: correlation {score.correlation} at offset {score.offset_frames} frames "
                f"(silent control {control.correlation}); {score.frames_measured}/{score.frames} frames with a face")  # fmt: skip
    meets = [r["persona"] for r in rows if not r["problems"]]
    return {
        "benchmark": "lipsync_warp",
        "speech": {"id": speech_id, "text": request.text, "voice": request.voice, "words_per_minute": request.words_per_minute,
                   "duration_s": round(synthesis.duration_s, 3), "engine": synthesis.engine},  # fmt: skip
        "visemes": {"fps": fps, "frames": len(visemes), "open_max": round(float(visemes.open.max()), 3),
                    "open_mean": round(float(visemes.open.mean()), 3)},  # fmt: skip
        "size": f"{spec.width}x{spec.height}",
        "loop": "idle (cycled to the speech's length)",
        "targets": {"correlation": TARGET_CORRELATION, "offset_frames": TARGET_OFFSET_FRAMES},
        "renders": rows,
        "meet_targets": meets,
        "machine": machine_info(),
    }


def _scored(mp4: Path, visemes: Any, **score_kw: Any) -> dict[str, Any]:
    """The lip-sync score of ``mp4`` as a record; a clip the face mesh cannot score (a noise face
    the mesh does not find) is recorded with the reason instead of stopping the arm."""
    started = time.perf_counter()
    try:
        score = asdict(lip_sync_score(mp4, visemes, **score_kw))
    except LipSyncError as exc:  # the message names the clip: keep its file name, not the machine path
        score = {"correlation": None, "offset_frames": None, "error": str(exc).replace(str(mp4), Path(mp4).name)}
    return {**score, "score_s": round(time.perf_counter() - started, 2)}


def _speech_cut(storage: Storage, speech_id: str, seconds: float, fps: int) -> tuple[Any, Any, int]:
    """The sample speech ``speech_id`` from the speech cache (built on first use) and its first
    ``seconds`` as a speech of their own (audio and viseme track cut to the same ``frames`` at
    ``fps``): ``(spoken, cut, frames)``."""
    from newsmotion_engine.speech.cache import ensure_speech_cache

    spoken, _ = ensure_speech_cache(SAMPLE_SPEECHES[speech_id], storage, speech_id, fps=fps)
    # at most the frames the whole audio covers (the viseme track may have one frame more)
    frames = min(len(spoken.visemes), spoken.audio.size * fps // spoken.sample_rate, max(1, round(seconds * fps)))
    # the cut's audio covers exactly ``frames`` video frames: the stage writes floor(duration * fps)
    samples = np.asarray(spoken.audio[: math.ceil(frames * spoken.sample_rate / fps)], np.float32)
    cut = dataclasses.replace(spoken, audio=samples, duration_s=samples.size / spoken.sample_rate,
                              visemes=spoken.visemes.slice(0, frames))  # fmt: skip
    return spoken, cut, frames


def bench_lipsync_musetalk(storage: Storage, personas: list[str], opts: Any, *, speech_id: str = MUSETALK_SPEECH,
                           seconds: float = MUSETALK_SECONDS, fps: int = 30, width: int = 720, height: int = 1280,
                           keep: Path | None = None, log=print, **score_kw: Any) -> dict[str, Any]:  # fmt: skip
    """The ``musetalk`` arm (module docstring): per persona, warp's silent render of the idle loop
    for the first ``seconds`` of ``speech_id``, lip-synced by ``newsmotion lips``' MuseTalk pass
    with ``opts`` and scored against the speech's viseme track; ``score_kw`` goes to
    :func:`lip_sync_score` (tests pass their own ``apertures``); ``keep``: a folder to keep the
    clips in (default: a temporary one)."""
    from newsmotion_engine.render.musetalk.components import load_components
    from newsmotion_engine.render.musetalk.pipeline import lip_sync_render

    spoken, cut, frames = _speech_cut(storage, speech_id, seconds, fps)
    guidance = idle_guidance(frames, fps)
    spec = RenderSpec(width=width, height=height, fps=fps)
    warp = get_backend("warp")
    started = time.perf_counter()
    components = load_components(opts)
    load_s = time.perf_counter() - started
    rows = []
    with tempfile.TemporaryDirectory(prefix="newsmotion-lipsync-musetalk-") as scratch:
        tmp = keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for name in personas:
            persona, _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))
            silent = Path(tmp) / f"{name}-silent.mp4"
            render_clip(guidance, persona, warp, spec, silent)
            out = Path(tmp) / f"{name}-musetalk.mp4"
            lips = lip_sync_render(silent, guidance, persona, cut, out, opts, avatar_dir=Path(tmp) / f"{name}-avatar",
                                   components=components, progress=lambda d, t: log(f"{name}: MuseTalk {d}/{t} frames"))  # fmt: skip
            row = {"persona": name, "kind": SAMPLE_PORTRAITS[name].kind, "musetalk": lips.as_dict(),
                   "score": _scored(out, cut.visemes, **score_kw),
                   "control_silent": _scored(silent, cut.visemes, **score_kw)}  # fmt: skip
            row["musetalk"].pop("output")  # a machine path
            rows.append(row)
            log(f"{name}: correlation {row['score']['correlation']} at offset {row['score']['offset_frames']} frames "
                f"(silent control {row['control_silent']['correlation']}); {NOISE_NOTE}")  # fmt: skip
    return {
        "benchmark": "lipsync_musetalk",
        "note": NOISE_NOTE,
        "speech": {"id": speech_id, "text": SAMPLE_SPEECHES[speech_id].text, "duration_s": round(spoken.duration_s, 3),
                   "cut_s": round(cut.duration_s, 3), "frames": frames},  # fmt: skip
        "size": f"{width}x{height}",
        "loop": "idle (cut to the speech's frames)",
        "stage": {"preset": opts.preset, "device": str(components.device), "dtype": str(components.dtype).removeprefix("torch."),
                  "batch_size": opts.batch_size, "weights": components.weights_label, "load_s": round(load_s, 2),
                  "entry": "render.musetalk.pipeline.lip_sync_render (as `newsmotion lips`)"},  # fmt: skip
        "targets": {"correlation": TARGET_CORRELATION, "offset_frames": TARGET_OFFSET_FRAMES},
        "renders": rows,
        "machine": machine_info(),
    }


def bench_lipsync_echomimic(storage: Storage, personas: list[str], *, preset: str = ECHOMIMIC_PRESET,
                            speech_id: str = MUSETALK_SPEECH, seconds: float = ECHOMIMIC_SECONDS, fps: int = 30,
                            width: int = 720, height: int = 1280, steps: int | None = None, device: str = "cpu",
                            keep: Path | None = None, log=print, **score_kw: Any) -> dict[str, Any]:  # fmt: skip
    """The ``echomimic-v3`` arm (module docstring): per persona, the echomimic-v3 backend (``preset``,
    random weights without a model folder) performs the first ``seconds`` of ``speech_id`` through
    ``render_clip``, handed as a :class:`~newsmotion_engine.speech.audio.SpeechTrack` whose features
    the backend makes by its own recipe; the clip is scored against the cut's viseme track.
    ``steps``: the sampler's steps (default: the release's 8); ``score_kw`` goes to
    :func:`lip_sync_score` (tests pass their own ``apertures``); ``keep``: a folder to keep the clips in."""
    from newsmotion_engine.render.backends.echomimic_v3.config import RANDOM_WEIGHTS_LABEL
    from newsmotion_engine.speech.audio import SpeechTrack

    spoken, cut, frames = _speech_cut(storage, speech_id, seconds, fps)
    guidance = idle_guidance(frames, fps)
    spec = RenderSpec(width=width, height=height, fps=fps)
    backend = get_backend("echomimic-v3", preset=preset, device=device, **({"steps": steps} if steps else {}))
    started = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - started
    # The cut as the speech a story hands an audio-driven backend; render_clip takes no speech track,
    # so its features (the backend's recipe, cached by the audio's digest) are given to the backend.
    track = SpeechTrack(cut.audio, label=f"sample speech {speech_id}, first {cut.duration_s:.2f} s",
                        cache_root=storage.speech_root)  # fmt: skip
    started = time.perf_counter()
    backend.use_speech_audio(backend.speech_features(track))
    features_s = time.perf_counter() - started
    random_weights = backend.describe().get("weights") == RANDOM_WEIGHTS_LABEL
    note = ECHOMIMIC_NOTE if random_weights else "weights from a model folder: the score measures the backend's lip sync"
    rows = []
    with tempfile.TemporaryDirectory(prefix="newsmotion-lipsync-echomimic-") as scratch:
        tmp = keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for name in personas:
            persona, _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))
            started = time.perf_counter()
            backend.prepare_persona(persona, spec)
            persona_s = time.perf_counter() - started
            out = Path(tmp) / f"{name}-echomimic-v3.mp4"
            tele = render_clip(guidance, persona, backend, spec, out,
                               progress=lambda d, t: log(f"{name}: echomimic-v3 {d}/{t} frames") if d % 10 == 0 or d == t else None)  # fmt: skip
            last = backend.describe().get("last_render", {})
            score = _scored(out, cut.visemes, **score_kw)
            faces = score.get("frames_measured")
            if faces is None:  # unscored: the reason says how many frames had a face
                found = re.search(r"a face was found in (\d+) of", score.get("error", ""))
                faces = int(found.group(1)) if found else None
            row = {"persona": name, "kind": SAMPLE_PORTRAITS[name].kind, "frames": tele.frames, "render_s": round(tele.wall_s, 2),
                   "render_fps": tele.fps_achieved, "persona_cache_s": round(persona_s, 2),
                   "model": {**{k: last.get(k) for k in ("model_size", "model_frames", "segments")},
                             **{k: round(last.get(k) or 0.0, 2) for k in ("denoise_s", "decode_s")}},
                   "mouth": last.get("mouth"), "faces_found": f"{_figure(faces)} of {tele.frames}", "score": score}  # fmt: skip
            rows.append(row)
            log(f"{name}: a face in {row['faces_found']} frames; correlation {_figure(score['correlation'])} "
                f"at offset {_figure(score['offset_frames'])} frames; {note}")  # fmt: skip
    info = backend.describe()
    return {
        "benchmark": "lipsync_echomimic_v3",
        "note": note,
        "speech": {"id": speech_id, "text": SAMPLE_SPEECHES[speech_id].text, "duration_s": round(spoken.duration_s, 3),
                   "cut_s": round(cut.duration_s, 3), "frames": frames,
                   "track": {"label": track.label, "audio_digest": track.digest[:16], "duration_s": round(track.duration_s, 3)},
                   "features": info.get("audio_features"), "features_s": round(features_s, 2)},  # fmt: skip
        "size": f"{width}x{height}",
        "loop": "idle (names the render; the model takes no pose)",
        "backend": {"name": "echomimic-v3", "preset": preset, "weights": info.get("weights"), "device": info.get("device"),
                    "dtype": info.get("dtype"), "steps": backend.options.num_steps, "load_s": round(load_s, 2),
                    "entry": "render_clip with the cut's speech-track features (use_speech_audio)"},  # fmt: skip
        "targets": {"correlation": TARGET_CORRELATION, "offset_frames": TARGET_OFFSET_FRAMES},
        "renders": rows,
        "machine": machine_info(),
    }


def _figure(value: Any) -> float | int | str:
    return "n/a" if value is None else value


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=["warp", "musetalk", "echomimic-v3"], default="warp",
                    help="warp's own lips, MuseTalk's over warp's silent render, or echomimic-v3 performing the speech (random weights)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None,
                    help="default: benchmarks/results/lipsync_warp.json, lipsync_musetalk_cpu.json or lipsync_echomimic_v3_cpu.json "
                         "(flash-pro: lipsync_echomimic_v3_flash_pro.json)")  # fmt: skip
    ap.add_argument("--personas", nargs="*", default=None, help="default: every sample (warp), astronaut (musetalk, echomimic-v3)")
    ap.add_argument("--seconds", type=float, default=None,
                    help=f"musetalk / echomimic-v3 arms: the speech's first seconds (default {MUSETALK_SECONDS} / {ECHOMIMIC_SECONDS})")  # fmt: skip
    ap.add_argument("--preset", choices=["v15", "tiny", "flash-pro"], default=None,
                    help="musetalk arm: v15 (default) or tiny; echomimic-v3 arm: tiny (default, CPU) or flash-pro (the released size: a GPU)")  # fmt: skip
    ap.add_argument("--storage", type=Path, default=None, help="build the sample personas here (default: a temporary folder)")
    ap.add_argument("--keep", type=Path, default=None, help="musetalk / echomimic-v3 arms: keep the clips in this folder")
    args = ap.parse_args(argv)
    arm_presets = {"musetalk": ("v15", "tiny"), "echomimic-v3": (ECHOMIMIC_PRESET, "flash-pro")}
    if args.arm in arm_presets and args.preset not in (None, *arm_presets[args.arm]):
        ap.error(f"--preset {args.preset} is not one of the {args.arm} arm's: {', '.join(arm_presets[args.arm])}")
    preset = args.preset or arm_presets.get(args.arm, (None,))[0]
    seconds = args.seconds if args.seconds is not None else ECHOMIMIC_SECONDS if args.arm == "echomimic-v3" else MUSETALK_SECONDS
    default_json = RESULTS_DIR / {"warp": "lipsync_warp.json", "musetalk": "lipsync_musetalk_cpu.json",
                                  "echomimic-v3": f"lipsync_echomimic_v3_{'cpu' if preset == ECHOMIMIC_PRESET else 'flash_pro'}.json"}[args.arm]  # fmt: skip
    out = args.json or default_json
    with tempfile.TemporaryDirectory(prefix="newsmotion-lipsync-store-") as tmp:
        storage = Storage(args.storage or Path(tmp))
        if args.arm == "warp":
            result = _warp_result(bench_lipsync(storage, args.personas or list(SAMPLE_PORTRAITS)))
        elif args.arm == "echomimic-v3":
            device = "cpu" if preset == ECHOMIMIC_PRESET else "auto"
            result = _echomimic_result(bench_lipsync_echomimic(storage, args.personas or MUSETALK_PERSONAS, preset=preset, seconds=seconds,
                                                               device=device, keep=args.keep))  # fmt: skip
        else:
            from newsmotion_engine.render.musetalk.config import MuseTalkOptions

            opts = MuseTalkOptions(preset=preset, device="cpu")
            result = _musetalk_result(bench_lipsync_musetalk(storage, args.personas or MUSETALK_PERSONAS, opts, seconds=seconds, keep=args.keep))
    command = f"{COMMAND} --arm {args.arm}" if args.arm != "warp" else COMMAND
    if args.arm in arm_presets:
        command += f" --seconds {seconds}" if args.seconds is not None else ""
        command += f" --preset {preset}" if args.preset not in (None, arm_presets[args.arm][0]) else ""
    if out != default_json:
        command += f" --json {out}"
    write_result(out, dataclasses.replace(result, command=command))
    print(f"wrote {out}")


def _warp_result(data: dict[str, Any]) -> BenchResult:
    headline: dict[str, float | int | str] = {}
    for row in data["renders"]:
        s = row["score"]
        headline[f"{row['persona']} correlation"] = _figure(s["correlation"])
        headline[f"{row['persona']} offset (frames)"] = _figure(s["offset_frames"])
        headline[f"{row['persona']} silent control correlation"] = _figure(row["control_silent"]["correlation"])
    headline["portraits meeting both targets"] = f"{len(data['meet_targets'])}/{len(data['renders'])}"
    return BenchResult.now(
        "lipsync_warp",
        title=f"warp lip sync: sample personas speaking the '{data['speech']['id']}' sample speech "
        f"({data['speech']['duration_s']:.1f} s, eSpeak NG), idle loop, 720x1280, scored by mediapipe face mesh",
        device=cpu_device(),
        command=COMMAND,
        headline=headline,
        data=data,
    )


def _musetalk_result(data: dict[str, Any]) -> BenchResult:
    headline: dict[str, float | int | str] = {"weights": data["stage"]["weights"], "note": NOISE_NOTE}
    for row in data["renders"]:
        headline[f"{row['persona']} correlation (MuseTalk)"] = _figure(row["score"]["correlation"])
        headline[f"{row['persona']} offset (frames)"] = _figure(row["score"]["offset_frames"])
        headline[f"{row['persona']} silent control correlation"] = _figure(row["control_silent"]["correlation"])
        headline[f"{row['persona']} stage fps"] = row["musetalk"]["stage_fps"]
    speech = data["speech"]
    return BenchResult.now(
        "lipsync_musetalk_cpu",
        title=f"MuseTalk 1.5 lips over warp's silent render ({NOISE_NOTE}): the '{speech['id']}' sample speech's "
        f"first {speech['cut_s']:.1f} s, idle loop, {data['size']}, {data['stage']['preset']}, CPU, scored by mediapipe face mesh",
        device=cpu_device(),
        command=f"{COMMAND} --arm musetalk",
        headline=headline,
        data=data,
        weights=data["stage"]["weights"],
    )


def _echomimic_result(data: dict[str, Any]) -> BenchResult:
    b = data["backend"]
    headline: dict[str, float | int | str] = {"weights": b["weights"], "note": data["note"]}
    for row in data["renders"]:
        headline[f"{row['persona']} frames with a face"] = row["faces_found"]
        headline[f"{row['persona']} correlation (echomimic-v3)"] = _figure(row["score"]["correlation"])
        headline[f"{row['persona']} offset (frames)"] = _figure(row["score"]["offset_frames"])
        if row["score"].get("error"):
            headline[f"{row['persona']} unscored"] = row["score"]["error"]
        headline[f"{row['persona']} render fps"] = _figure(row["render_fps"])
    speech = data["speech"]
    return BenchResult.now(
        "lipsync_echomimic_v3_cpu" if b["preset"] == ECHOMIMIC_PRESET else "lipsync_echomimic_v3_flash_pro",
        title=f"echomimic-v3 ({b['preset']}, {b['weights']}{': noise, this measures the plumbing' if data['note'] == ECHOMIMIC_NOTE else ''}) "
        f"performing the "
        f"'{speech['id']}' sample speech's first {speech['cut_s']:.1f} s, {data['size']}, {b['device']}, scored by mediapipe face mesh",
        device=cpu_device() if b["device"] == "cpu" else str(b["device"]),
        command=f"{COMMAND} --arm echomimic-v3",
        headline=headline,
        data=data,
        weights=b["weights"],
    )


if __name__ == "__main__":
    main()
