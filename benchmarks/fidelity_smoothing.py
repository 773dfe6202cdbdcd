"""Would smoothing the extractor's readings make the pose-fidelity judge more right?

    python -m benchmarks.fidelity_smoothing [--portrait P ...] [--loop L ...] [--json PATH]

For each portrait x loop: the rigid control of ``newsmotion_engine.bench.fidelity`` (a render
perfect for the loop's rigid motion, which a perfect judge scores 1) read by the extractor as the
renders are (stills), then the same readings smoothed with the One Euro filter the driving-video
extractor uses (at the compared frames' rate, 30 / stride fps) and scored again. A change to the
judge is only worth making if it scores that perfect render higher. Measures nothing else.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.lab_record import running_command


class _Recording:
    def __init__(self, detector) -> None:  # noqa: ANN001
        self.detector, self.readings = detector, []

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        self.readings.append(np.asarray(self.detector.detect(rgb), np.float64))
        return self.readings[-1]


class _Replay:
    def __init__(self, readings: list[np.ndarray]) -> None:
        self.readings = list(readings)

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        return self.readings.pop(0)


def summary(rows: list[dict]) -> dict:
    """Means over the rows: pck (head, torso, arms) and motion energy, raw and smoothed."""
    def mean(side: str, key: str) -> float | None:
        values = [r[side][key] for r in rows if r.get(side) and r[side].get(key) is not None]
        return round(float(np.mean(values)), 4) if values else None

    return {"pck_body_mean": {"raw": mean("raw", "pck_body"), "one_euro": mean("one_euro", "pck_body")},
            "motion_energy_mean": {"raw": mean("raw", "motion_energy_ratio"), "one_euro": mean("one_euro", "motion_energy_ratio")}}  # fmt: skip


def _write(path: str, stride: int, rows: list[dict]) -> None:
    from newsmotion_engine.bench.common import cpu_device
    from newsmotion_engine.bench.record import BenchResult, write_result

    result = {"benchmark": "fidelity-smoothing", "stride": stride, **summary(rows), "rows": rows}
    write_result(Path(path), BenchResult.now(
        Path(path).stem, device=cpu_device(), command=running_command(), data=result,
        title="the pose-fidelity judge on perfect rigid renders, raw vs One-Euro-smoothed keypoints",
        headline={"rigid renders' pck, raw": result["pck_body_mean"]["raw"], "rigid renders' pck, One Euro": result["pck_body_mean"]["one_euro"]},
    ))  # fmt: skip


def main(argv: list[str]) -> int:
    from newsmotion_engine.bench.fidelity import rigid_motion_control
    from newsmotion_engine.bench.record import read_result
    from newsmotion_engine.guidance.cache import ensure_guidance
    from newsmotion_engine.guidance.holistic import HolisticDetector
    from newsmotion_engine.guidance.smoothing import smooth_sequence
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.render import RenderSpec
    from newsmotion_engine.render.clip import retargeted_keypoints
    from newsmotion_engine.samples import write_sample_portrait
    from newsmotion_engine.storage import Storage

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--portrait", action="append", default=None)
    p.add_argument("--loop", action="append", default=None)
    p.add_argument("--stride", type=int, default=4)
    p.add_argument("--json")
    p.add_argument("--summarize", metavar="JSON", help="only rewrite an existing result with its summary (no measuring)")
    a = p.parse_args(argv)
    if a.summarize:
        try:
            old = read_result(Path(a.summarize)).data
            stride, rows = old["stride"], old["rows"]
        except (ValueError, KeyError, TypeError) as exc:  # NotABenchResult is a ValueError
            print(f"error: {a.summarize}: not a fidelity-smoothing result ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        _write(a.summarize, stride, rows)
        return 0
    storage, spec, rows = Storage(Path(tempfile.mkdtemp(prefix="newsmotion-smoothing-"))), RenderSpec(), []
    for name in a.portrait or ["grace-hopper", "astronaut"]:
        persona, _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))
        for loop_id in a.loop or ["signoff", "nod"]:
            intended = retargeted_keypoints(ensure_guidance(storage, loop_id)[0], persona)
            with HolisticDetector(static_image_mode=True) as det:
                rec = _Recording(det)
                raw = rigid_motion_control(persona, spec, intended, a.stride, detector=rec)
            frames, rest = np.stack(rec.readings[:-1]), rec.readings[-1]  # the rest frame is read last
            smoothed = smooth_sequence(frames, 30.0 / a.stride).astype(np.float64)
            smooth = rigid_motion_control(persona, spec, intended, a.stride, detector=_Replay([*smoothed, rest]))
            rows.append({"portrait": name, "loop": loop_id, "raw": raw, "one_euro": smooth})
            print(f"{name} x {loop_id}: raw pck {raw['pck_body']} {raw['per_part_pck']} energy {raw['motion_energy_ratio']} | "
                  f"smoothed pck {smooth['pck_body']} {smooth['per_part_pck']} energy {smooth['motion_energy_ratio']}")
    if a.json:
        _write(a.json, a.stride, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
