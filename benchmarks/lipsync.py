"""Lip sync of the warp backend on the sample personas speaking a sample speech.

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

Run from the repository root (CPU, about a minute per persona on 2 cores)::

    python -m benchmarks.lipsync                         # writes benchmarks/results/lipsync_warp.json
    python -m benchmarks.lipsync --json /tmp/l.json --personas astronaut
"""

from __future__ import annotations

import argparse
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
from newsmotion_engine.render.lipsync import TARGET_CORRELATION, TARGET_OFFSET_FRAMES, lip_sync_problems, lip_sync_score
from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait
from newsmotion_engine.speech.samples import SAMPLE_SPEECHES
from newsmotion_engine.speech.visemes import visemes_from_phonemes
from newsmotion_engine.storage import Storage

SPEECH = "weather"
COMMAND = "python -m benchmarks.lipsync"


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=RESULTS_DIR / "lipsync_warp.json")
    ap.add_argument("--personas", nargs="*", default=list(SAMPLE_PORTRAITS))
    ap.add_argument("--storage", type=Path, default=None, help="build the sample personas here (default: a temporary folder)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="newsmotion-lipsync-store-") as tmp:
        data = bench_lipsync(Storage(args.storage or Path(tmp)), args.personas)
    headline: dict[str, float | int | str] = {}
    for row in data["renders"]:
        s = row["score"]
        headline[f"{row['persona']} correlation"] = s["correlation"] if s["correlation"] is not None else "n/a"
        headline[f"{row['persona']} offset (frames)"] = s["offset_frames"] if s["offset_frames"] is not None else "n/a"
        headline[f"{row['persona']} silent control correlation"] = row["control_silent"]["correlation"] if row["control_silent"]["correlation"] is not None else "n/a"
    headline["portraits meeting both targets"] = f"{len(data['meet_targets'])}/{len(data['renders'])}"
    result = BenchResult.now(
        "lipsync_warp",
        title=f"warp lip sync: sample personas speaking the '{data['speech']['id']}' sample speech "
        f"({data['speech']['duration_s']:.1f} s, eSpeak NG), idle loop, 720x1280, scored by mediapipe face mesh",
        device=cpu_device(),
        command=COMMAND if args.json == RESULTS_DIR / "lipsync_warp.json" else f"{COMMAND} --json {args.json}",
        headline=headline,
        data=data,
    )
    write_result(args.json, result)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
