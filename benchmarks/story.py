"""Stories on the CPU: join smoothness and render speed, through the product's own story code.

Both parts use a private storage root with the sample persona (the astronaut) and the canonical
loops, and stories whose speech is the TTS's:

- ``joins``: the timeline planned by :func:`newsmotion_engine.story.render.plan_story` for the
  sample story and for a 30-second story cutting every canonical loop mid-gesture, with the
  default blending and with hard cuts (``blend: 0``). Figure: the largest frame-to-frame move of
  any joint (persona canvas pixels) at the joins, against the largest inside the loops (the loops'
  own motion, outside any join window). Written to ``benchmarks/results/story_joins.json``.
- ``speed``: the 30-second story rendered by :func:`~newsmotion_engine.story.render.render_story`
  with the warp backend at 720x1280, 30 fps (plan, frames, encode, AAC mux, sync check; the caches
  are built before the clock starts), ``--runs`` times. Figures: wall seconds over the clip's
  seconds (real-time factor; target <= 1.5), with the process's and ffmpeg's CPU seconds and the
  machine's load average, since other work on the machine slows the wall clock; and the first
  run's lip-sync score (after its timed part). Written to
  ``benchmarks/results/story_speed.json``.

Usage::

    python -m benchmarks.story --part all
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lab_record import write_lab_result  # noqa: E402
from newsmotion_engine.bench.common import cpu_device  # noqa: E402
from newsmotion_engine.bench.suites import sample_portrait  # noqa: E402
from newsmotion_engine.persona.sources import install_source  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend  # noqa: E402
from newsmotion_engine.render.clip import retargeted_keypoints  # noqa: E402
from newsmotion_engine.samples import SAMPLE_STORY  # noqa: E402
from newsmotion_engine.storage import Storage  # noqa: E402
from newsmotion_engine.story.format import load_story  # noqa: E402
from newsmotion_engine.story.render import persona_canvas, plan_story, prepare_story, render_story  # noqa: E402
from newsmotion_engine.story.timeline import join_smoothness, joint_jumps  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
PERSONA = "astronaut"

# About 30 seconds of news at 165 words per minute; every canonical loop is cued, most of them cut
# before their 4-second loop ends (the joins the blending has to bridge).
THIRTY_SECONDS = f"""\
persona: {PERSONA}
speech:
  - id: bench-1
    text: Good evening, here is the news.
  - id: bench-2
    text: The city council has approved the new harbour bridge after a long debate.
  - id: bench-3
    text: Breaking news just in. The airport will close its north runway for repairs from Monday.
  - id: bench-4
    text: Let us think about what that means for travellers this summer.
  - id: bench-5
    text: On the left of your screen, the new timetable; on the right, the detours.
  - id: bench-6
    text: Forecasters expect a mild week, with rain on Thursday.
  - id: bench-7
    text: That is all for tonight. Thank you for watching, and good night.
gestures:
  - {{loop: welcome, sentence: 1}}
  - {{loop: nod, sentence: 2}}
  - {{loop: breaking_alert, sentence: 3}}
  - {{loop: deep_thought, sentence: 4}}
  - {{loop: left_gesture, sentence: 5, fit: once}}
  - {{loop: right_gesture, at: 21.0, for: 2.0}}
  - {{loop: signoff, sentence: 7}}
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def setup(root: Path) -> Storage:
    store = Storage(root)
    install_source(store, sample_portrait(store.persona_samples), PERSONA)
    return store


def write_story(store: Storage, story_id: str, text: str) -> Path:
    store.stories_dir.mkdir(parents=True, exist_ok=True)
    path = store.stories_dir / f"{story_id}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def measure_joins(store: Storage, spec: RenderSpec) -> dict:
    """Join and in-loop joint moves of each story, blended (its own ``blend``) and with hard cuts."""
    stories = {"sample": SAMPLE_STORY.read_text(encoding="utf-8"), "thirty_seconds": THIRTY_SECONDS}
    out: dict = {}
    for name, text in stories.items():
        story = load_story(write_story(store, name.replace("_", "-"), text))
        inputs = prepare_story(store, story, spec)
        canvas = persona_canvas(inputs.persona)
        row = {"duration_s": round(inputs.speech.duration_s, 2), "gestures": len(story.gestures)}
        for label, blend in (("blended", story.blend), ("hard_cuts", 0.0)):
            timeline = plan_story(dataclasses.replace(inputs, story=dataclasses.replace(story, blend=blend)), spec)
            smooth = join_smoothness(timeline, canvas)
            row[label] = {**smooth, "joins_count": len(smooth["joins"])}
        row["loops_own_top_px"] = {
            loop_id: round(float(joint_jumps(retargeted_keypoints(cache, inputs.persona), canvas).max()), 2)
            for loop_id, cache in inputs.loops.items()
        }
        out[name] = row
        log(f"joins {name}: blended {row['blended']['max_jump_at_joins_px']} px at joins vs "
            f"{row['blended']['max_jump_inside_px']} px inside; hard cuts {row['hard_cuts']['max_jump_at_joins_px']} px")
    return out


def _cpu_s() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def measure_speed(store: Storage, spec: RenderSpec, runs: int) -> dict:
    story = load_story(write_story(store, "thirty-seconds", THIRTY_SECONDS))
    inputs = prepare_story(store, story, spec)  # caches built before the clock starts
    backend = get_backend("warp")
    backend.load()
    records = []
    for i in range(runs):
        load_before = os.getloadavg()[0]
        cpu0 = _cpu_s()
        # Lip sync is scored once (after the timed render, outside wall_s).
        tele = render_story(store, story, backend, spec, inputs=inputs, force=True, lip_sync=i == 0)
        cpu1 = _cpu_s()
        record = {
            "wall_s": tele.wall_s, "duration_s": tele.duration_s, "realtime_factor": tele.realtime_factor,
            "frames": tele.frames, "render_ms": tele.render_ms, "encode_wait_ms": tele.encode_wait_ms,
            "python_cpu_s": round(cpu1[0] - cpu0[0], 2), "ffmpeg_cpu_s": round(cpu1[1] - cpu0[1], 2),
            "cpu_s_per_clip_s": round((cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1]) / tele.duration_s, 3),
            "load_avg_1min_before": round(load_before, 2), "load_avg_1min_after": round(os.getloadavg()[0], 2),
            "in_sync": tele.av_sync["in_sync"], "av_offset_frames": tele.av_sync["offset_frames"],
        }  # fmt: skip
        records.append(record)
        if i == 0:
            lip_sync, lip_sync_reason = tele.lip_sync, tele.lip_sync_reason
        log(f"speed run {i + 1}/{runs}: {tele.duration_s} s story in {tele.wall_s} s = {tele.realtime_factor}x real time "
            f"(load {record['load_avg_1min_before']} -> {record['load_avg_1min_after']})")
    backend.close()
    factors = [r["realtime_factor"] for r in records]
    best = records[factors.index(min(factors))]
    return {
        "lip_sync": lip_sync,
        "lip_sync_reason": lip_sync_reason,
        "best_run": best,
        "runs": records,
        "realtime_factor_best": min(factors),
        "realtime_factor_median": round(statistics.median(factors), 3),
        "target_realtime_factor": 1.5,
        "backend": "warp",
        "size": f"{spec.width}x{spec.height}",
        "fps": spec.fps,
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("joins", "speed", "all"), default="all")
    parser.add_argument("--runs", type=int, default=2, help="speed: renders of the 30-second story")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args()
    spec = RenderSpec()
    with tempfile.TemporaryDirectory(prefix="newsmotion-story-bench-") as tmp:
        store = setup(Path(tmp))
        if args.part in ("joins", "all"):
            joins = measure_joins(store, spec)
            headline = {}
            for name, row in joins.items():
                headline[f"{name}: largest joint move at joins, blended (px)"] = row["blended"]["max_jump_at_joins_px"]
                headline[f"{name}: largest joint move inside loops (px)"] = row["blended"]["max_jump_inside_px"]
                headline[f"{name}: at joins with hard cuts (px)"] = row["hard_cuts"]["max_jump_at_joins_px"]
            write_lab_result(args.out / "story_joins.json", {"device": cpu_device(), **joins}, headline=headline,
                             title="Story joins: largest frame-to-frame joint move (persona canvas px, 720x1280) at the "
                                   "joins vs inside the loops, sample persona, blended vs hard cuts")  # fmt: skip
        if args.part in ("speed", "all"):
            speed = measure_speed(store, spec, args.runs)
            write_lab_result(
                args.out / "story_speed.json", {"device": cpu_device(), **speed},
                title="A 30-second story rendered on the CPU (warp, 720x1280 @ 30 fps, encode and AAC mux included), "
                      "wall over clip seconds; the machine's load average is recorded with each run",
                headline={"real-time factor, best (x)": speed["realtime_factor_best"],
                          "real-time factor, median (x)": speed["realtime_factor_median"],
                          "target (x)": 1.5,
                          "CPU seconds (python + ffmpeg) per clip second, best run": speed["best_run"]["cpu_s_per_clip_s"],
                          "lip-sync correlation": (speed["lip_sync"] or {}).get("correlation", "not measured"),
                          "lip-sync offset (frames)": (speed["lip_sync"] or {}).get("offset_frames", "not measured"),
                          "load average before the best run": speed["best_run"]["load_avg_1min_before"]},
            )  # fmt: skip


if __name__ == "__main__":
    main()
