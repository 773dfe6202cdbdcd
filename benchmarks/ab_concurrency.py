"""GPU benchmark of the two-model A/B on one GPU: serial vs two CUDA streams vs two processes.

The two light models of the reference design each render one clip of the bench's synthetic
persona x loop (:func:`benchmarks.gpu.bench_inputs`):

- ``echomimic-v3`` (``flash-pro``: the release's sizes on Wan2.1-Fun-1.3B, random weights), its
  mouth driven by random audio features of the clip's length (the release's feature shape);
- ``wan-animate-2`` at the ``1.3b`` preset (Wan 1.3B dimensions, random weights), in one segment
  of the least ``4k+1`` frames that holds the clip (no frames rendered past its end), with
  regional compile on a GPU (its cached pass's flex attention needs it).

Both render with the product's defaults (released step counts, no other acceleration) through
the shipped path (``render_clip`` -> the backend's frames -> the chroma composite), and the two
sides run through :func:`newsmotion_engine.render.ab.run_sides`, the runner ``run_ab`` uses, in
each mode: ``serial`` (one side loads, renders and closes, then the other), ``streams`` (both
loaded in this process, each rendering on its own thread and CUDA stream), ``processes`` (a
spawned child process a side, rendering together once both are ready). Each side loads, prepares
its sub-caches and renders an untimed warm-up clip (compiles included) before its timed clip.

Reported per mode: ``render_wall_s`` (serial: the two timed clips one after the other; streams /
processes: from both starting to the last one done), each side's seconds, the speed-up over
serial, and GPU memory: the allocator's peak (in-process modes: over the whole mode, loads and
warm-ups included; processes: each child's own peak, summed) and the device memory in use as a
side finished (every process's, contexts included). Frames are not encoded (no ffmpeg on the GPU
machine): :class:`benchmarks.clip.FrameSink` takes them. With random weights the figures are
speed and memory only.

Default shape: 33 frames at 480x832 (portrait): Wan's 480p portrait bucket, the size both 1.3B
models were trained at, and 33 = 4x8+1 frames, one segment per side, so each side renders a few
seconds and the three modes with their loads and warm-ups fit about five minutes of an H100.

Example (from the repository root)::

    python -m benchmarks.ab_concurrency --json benchmarks/results/ab_concurrency_h100.json
    python -m benchmarks.ab_concurrency --echomimic-preset tiny --animate2-preset tiny --size 64x128 --frames 9 --steps 1   # CPU check
"""

from __future__ import annotations

import datetime as _dt
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lab_record import write_lab_result

__all__ = ["BenchSide", "bench_ab_concurrency"]

Log = Callable[[str], None]
MODES = ("serial", "streams", "processes")


@dataclass
class BenchSide:
    """One side of the bench as a :class:`~newsmotion_engine.render.ab.SideWork` (it pickles into
    the child of ``processes`` mode): set up = inputs, load, sub-caches, warm-up clip; run = the
    timed clip."""

    label: str
    backend: str
    options: dict[str, Any]
    width: int
    height: int
    frames: int
    root: str
    inputs: Any = None

    def _spec(self) -> Any:
        from newsmotion_engine.render.base import RenderSpec

        return RenderSpec(width=self.width, height=self.height)

    def _clip(self, backend: Any) -> Any:
        from benchmarks.clip import FrameSink
        from newsmotion_engine.render.clip import render_clip

        loop, persona = self.inputs
        return render_clip(loop, persona, backend, self._spec(), Path(self.root) / self.label / "clip.mp4", sink=FrameSink)

    def setup(self) -> Any:
        from benchmarks.gpu import bench_inputs
        from newsmotion_engine.render.base import get_backend

        spec = self._spec()
        self.inputs = loop, persona = bench_inputs(self.width, self.height, self.frames, Path(self.root) / self.label)
        backend = get_backend(self.backend, **self.options)
        try:
            backend.load()
            if self.backend == "echomimic-v3":
                backend.use_speech_audio(_random_speech(backend, self.frames / spec.fps))
            backend.prepare_guidance(loop, spec)
            backend.prepare_persona(persona, spec)
            self._clip(backend)  # warm-up: compiles, first-call allocations
        except BaseException:
            backend.close()
            raise
        return backend

    def run(self, backend: Any) -> dict[str, Any]:
        import torch

        from newsmotion_engine.bench.timing import gib

        tele = self._clip(backend)
        out: dict[str, Any] = {"frames_out": tele.frames, **{k: v for k, v in tele.backend_info.get("last_render", {}).items()
                                                             if k in ("segments", "denoise_s", "decode_s")}}  # fmt: skip
        device = backend.components.device
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            out.update(peak_gib=gib(torch.cuda.max_memory_allocated(device)), device_used_gib=gib(total - free))
        return out


def _random_speech(backend: Any, seconds: float) -> Any:
    """Random audio features of the release's shape for ``seconds`` at the model's 25 fps."""
    from newsmotion_engine.render.backends.echomimic_v3.audio import SpeechAudio

    shape = backend._audio_shape()
    rows = max(1, round(seconds * 25))
    feats = np.random.default_rng(0).standard_normal((rows, shape["window"], shape["layers"], shape["channels"])).astype(np.float32)
    return SpeechAudio("bench", feats, seconds, "random-features")


def _sides(echomimic_preset: str, animate2_preset: str, width: int, height: int, frames: int, steps: int | None, device: str,
           cuda: bool, root: Path) -> list[BenchSide]:  # fmt: skip
    common: dict[str, Any] = {"device": device, **({"steps": steps} if steps else {})}
    segment = (frames - 1 + 3) // 4 * 4 + 1  # the least 4k+1 holding the clip: one segment
    animate2 = {"preset": animate2_preset, "segment_frames": max(segment, 5), **common, **({"compile": "blocks"} if cuda else {})}
    return [
        BenchSide("echomimic-v3", "echomimic-v3", {"preset": echomimic_preset, **common, "cache_root": str(root / "caches")},
                  width, height, frames, str(root)),
        BenchSide("wan-animate-2", "wan-animate-2", {**animate2, "cache_root": str(root / "caches")}, width, height, frames, str(root)),
    ]  # fmt: skip


def bench_ab_concurrency(echomimic_preset: str = "flash-pro", animate2_preset: str = "1.3b", *, width: int = 480, height: int = 832,
                         frames: int = 33, steps: int | None = None, modes: Sequence[str] = MODES, device: str = "auto",
                         budget_s: float | None = None, json_path: str | Path | None = None, log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every mode.

    Keys: ``modes`` (mode -> timing, per-side results, memory, or ``error``), and per measured
    mode ``{mode}_s`` (its render wall) and, beside serial, ``{mode}_vs_serial`` (serial / mode).
    """
    import diffusers
    import torch

    from newsmotion_engine.bench.timing import peak_gib, peak_reset
    from newsmotion_engine.render.ab import run_sides

    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"modes {sorted(unknown)}: use {', '.join(MODES)}")
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    dev = torch.device("cuda" if cuda and device == "auto" else ("cpu" if device == "auto" else device))
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "bench": "ab_concurrency", "weights": "random weights",
        "note": "random weights and random audio features: speed and memory only; frames not encoded",
        "sides": {"echomimic-v3": echomimic_preset, "wan-animate-2": animate2_preset},
        "shape": {"width": width, "height": height, "frames": frames, "steps": steps or "released"},
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__, "cuda": torch.version.cuda,
                     "python": platform.python_version()},
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "modes": {},
    }  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            headline = {k: v for k, v in result.items() if k.endswith(("_s", "_vs_serial", "_gib")) and k != "wall_s"}
            write_lab_result(json_path, result, title=f"A/B of echomimic-v3 {echomimic_preset} and wan-animate-2 {animate2_preset} "
                             f"on one device: serial vs two streams vs two processes", headline=headline)  # fmt: skip

    log(f"ab_concurrency: echomimic-v3 {echomimic_preset} + wan-animate-2 {animate2_preset} (random weights), "
        f"{frames} frames at {width}x{height}, device {dev}")
    with tempfile.TemporaryDirectory(prefix="newsmotion-ab-bench-") as tmp:
        for mode in modes:
            if budget_s is not None and time.perf_counter() - t_start > budget_s:
                result["modes"][mode] = {"skipped": "device-time budget of this run spent"}
                continue
            works = _sides(echomimic_preset, animate2_preset, width, height, frames, steps, str(dev), dev.type == "cuda",
                           Path(tmp) / mode)  # fmt: skip
            peak_reset(dev)
            run = run_sides(works, mode)
            row: dict[str, Any] = {**run.timing.as_dict(), "results": run.results,
                                   "errors": {k: str(v).splitlines()[0] for k, v in run.errors.items()}}  # fmt: skip
            if dev.type == "cuda":
                used = [r["device_used_gib"] for r in run.results.values() if "device_used_gib" in r]
                row["device_used_gib"] = max(used) if used else None
                row["peak_gib"] = (round(sum(r.get("peak_gib") or 0 for r in run.results.values()), 3) if mode == "processes"
                                   else peak_gib(dev))  # fmt: skip
            result["modes"][mode] = row
            if not run.errors:
                result[f"{mode}_s"] = row["render_wall_s"]
                if row.get("peak_gib") is not None:
                    result[f"{mode}_peak_gib"] = row["peak_gib"]
                if mode != "serial" and "serial_s" in result:
                    result[f"{mode}_vs_serial"] = round(result["serial_s"] / row["render_wall_s"], 3)
            log(f"{mode}: {row}")
            write()
    write()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--echomimic-preset", default="flash-pro")
    parser.add_argument("--animate2-preset", default="1.3b")
    parser.add_argument("--size", default="480x832", help="WxH render size")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=None, help="both sides' steps (default: each release's)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    width, height = (int(v) for v in a.size.split("x"))
    bench_ab_concurrency(a.echomimic_preset, a.animate2_preset, width=width, height=height, frames=a.frames, steps=a.steps,
                         modes=a.modes.split(","), device=a.device, budget_s=a.budget_s, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
