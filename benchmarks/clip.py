"""GPU benchmark of doing less work per clip: a whole 120-frame 720x1280 clip, stock vs ours.

One run (one device call) measures, on the same synthetic loop and reference image
(:func:`~benchmarks.gpu.bench_inputs`) and the same random-weight model:

- ``vae``: the tiled VAE decode of one segment's latents against larger tiles, untiled, and
  untiled with ``channels_last_3d`` (seconds and peak VRAM) — the decode on the critical path;
- ``stock``: diffusers' ``WanAnimatePipeline`` in bf16 with its defaults on the whole clip (two
  77-frame segments; its own VAE / CLIP encodes included, text encoding timed and added) —
  ``clip_120f_720p_s_stock``;
- ``ours``: each :data:`CLIP_VARIANTS` entry renders the same clip through the shipped path —
  ``render_clip`` -> the backend's frames, with sparse keyframes + flow infill from ``RenderSpec.keyframes`` and the
  variant's acceleration configs applied and removed through the registry. The fastest variant
  without experimental approximations is ``clip_120f_720p_s``; the experimental ones (sparse
  attention, pyramid) are reported beside it, labelled.

Frames are not encoded: the GPU machine has no ffmpeg (and none can be carried), so the clips go
into :class:`FrameSink`, which does the per-frame colour conversion the encoder's writer thread
does and discards the frames; libx264 encoding runs beside the render in that thread on a
machine with ffmpeg (about 8.6 ms of CPU per 720x1280 frame on 2 cores, ``bench warp``).

With random weights the frames are noise: figures are speed and memory only.

Example::

    result = bench_clip("14b", parts=("vae", "stock", "ours"), json_path="gpu_clip.json")
    result["clip_120f_720p_s"], result["clip_120f_720p_s_stock"]
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import gc
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.bench.timing import peak_gib, peak_reset, sync

from benchmarks.budget import VariantBudget
from benchmarks.lab_record import top_level_figures, write_lab_result

__all__ = ["CLIP_VARIANTS", "FrameSink", "bench_clip", "options_replaced", "profile_clip", "profile_clip_steps", "timed_variant"]

Log = Callable[[str], None]


class FrameSink:
    """Stands in for :class:`~newsmotion_engine.video.encode.VideoEncoder` where there is no ffmpeg:
    same constructor and attributes, converts each frame to yuv420p (as the encoder's writer
    thread does) and drops it. Writes no file."""

    def __init__(self, path: Any, width: int, height: int, fps: int, **_: Any) -> None:
        self.path, self.width, self.height, self.fps = Path(path), width, height, fps
        self.encoder = "none (benchmark sink: no ffmpeg on this machine)"
        self.frames, self.mux_ms, self.wait_ms = 0, 0.0, 0.0

    def write(self, frame: np.ndarray) -> None:
        cv2.cvtColor(frame, cv2.COLOR_RGB2YUV_I420)
        self.frames += 1

    def __enter__(self) -> FrameSink:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


@contextlib.contextmanager
def options_replaced(backend: Any, options: Mapping[str, Any] | None) -> Iterator[None]:
    """The backend's options with ``options`` replacing some of them (e.g. fewer steps for a
    warm-up or a profiled clip) inside the block, the configured ones back after it."""
    saved = backend.options
    if options:
        backend.options = dataclasses.replace(saved, **options)
    try:
        yield
    finally:
        backend.options = saved


def profile_clip(backend: Any, loop: Any, persona: Any, spec: Any, out_path: Path, options: Mapping[str, Any] | None = None,
                 *, top: int = 20) -> dict[str, Any]:  # fmt: skip
    """One more clip through ``render_clip`` (into a :class:`FrameSink`) under ``torch.profiler``,
    with ``options`` replacing some of the backend's options for it (e.g. ``{"steps": 1}``: the
    kernels of one step, not a whole render's worth of events). Run it after the timed clip, with
    the variant's accelerations still applied; the timed figure never includes the profiler.
    Returns :func:`benchmarks.kernel_profile.profile_call`'s summary plus ``options`` and
    ``frames_out``, or ``{"options", "error"}`` (a failed profile never spoils the timed row)."""
    from benchmarks.kernel_profile import profile_call
    from newsmotion_engine.render.clip import render_clip

    opts = dict(options or {})
    try:
        with options_replaced(backend, opts):
            tele, summary = profile_call(lambda: render_clip(loop, persona, backend, spec, out_path, sink=FrameSink), top=top)
        return {**summary, "options": opts, "frames_out": tele.frames}
    except Exception as exc:
        return {"options": opts, "error": f"{type(exc).__name__}: {exc}"[:500]}


def profile_clip_steps(backend: Any, loop: Any, persona: Any, spec: Any, out_path: Path, steps: int, *,
                       top: int = 60) -> dict[str, Any]:  # fmt: skip
    """:func:`profile_clip` at ``steps`` steps, with ``one_step``: the kernels of one more step alone
    (:func:`benchmarks.kernel_profile.step_difference` of a second profile at ``steps + 1``), the
    denoise without the once-a-clip work. A wide ``top`` so that both lists hold the same names."""
    from benchmarks.kernel_profile import step_difference

    summary = profile_clip(backend, loop, persona, spec, out_path, {"steps": steps}, top=top)
    if "error" not in summary:
        more = profile_clip(backend, loop, persona, spec, out_path, {"steps": steps + 1}, top=top)
        summary["one_step"] = more if "error" in more else step_difference(summary, more)
    return summary


def timed_variant(backend: Any, loop: Any, persona: Any, spec: Any, out_path: Path, *, warm_up: bool,
                  warm_up_options: Mapping[str, Any] | None = None,
                  profile_options: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One variant of a stock-vs-ours bench: the backend's configured accelerations applied through
    the registry, a warm-up clip when ``warm_up`` (compiles; with ``warm_up_options`` replacing
    some of the backend's options for it, e.g. fewer steps), then the timed clip through
    ``render_clip`` into a :class:`FrameSink`; the accelerations removed again. Returns
    ``end_to_end_s``, ``peak_vram_gib``, ``frames_out`` and the backend's ``last_render`` stats, or
    ``error`` (one failing variant is a result; the bench goes on with the others).
    ``profile_options`` (e.g. ``{"steps": 1}``; ``{}`` keeps the options): after the timed clip,
    one more clip with these overrides under the profiler, as ``row["profile"]``
    (:func:`profile_clip`); the timed figures are measured before it and do not include it."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.render.clip import render_clip

    comps = backend.components
    applied = None
    try:
        applied = registry.apply_accelerations(comps, backend.options.accelerations)
        if warm_up:
            with options_replaced(backend, warm_up_options):
                render_clip(loop, persona, backend, spec, out_path, sink=FrameSink)
        peak_reset(comps.device)
        t0 = time.perf_counter()
        tele = render_clip(loop, persona, backend, spec, out_path, sink=FrameSink)
        row = {"end_to_end_s": round(time.perf_counter() - t0, 2), "peak_vram_gib": peak_gib(comps.device),
               "frames_out": tele.frames, **tele.backend_info.get("last_render", {})}  # fmt: skip
        if profile_options is not None:
            steps = profile_options.get("steps")
            row["profile"] = (profile_clip_steps(backend, loop, persona, spec, out_path, steps) if set(profile_options) == {"steps"}
                              else profile_clip(backend, loop, persona, spec, out_path, profile_options))  # fmt: skip
        return row
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        if applied is not None:
            registry.remove_accelerations(comps, applied)


def _variants() -> dict[str, dict[str, Any]]:
    from newsmotion_engine.accel.memory import VaeTiling
    from newsmotion_engine.accel.pyramid import PyramidCascade
    from newsmotion_engine.accel.sparse import SparseAttention

    return {
        # Sparse keyframes alone on top of the dense kernels (no approximation of the model).
        "keyframes_1to2": {"keyframes": 2, "accel": ()},
        "keyframes_1to3": {"keyframes": 3, "accel": ()},
        # The same with a 512-px tiled VAE decode: the decode's activations stay small (peak VRAM).
        "keyframes_1to2_vae512": {"keyframes": 2, "accel": (VaeTiling(tile=512, stride=448),)},
        "keyframes_1to3_vae512": {"keyframes": 3, "accel": (VaeTiling(tile=512, stride=448),)},
        # Experimental approximations (off by default; quality needs real weights), each alone on 1:2.
        "keyframes_1to3_sparse50_pyramid1": {"keyframes": 3, "accel": (SparseAttention(density=0.5), PyramidCascade(low_steps=1)),
                                             "experimental": True},  # fmt: skip
        "keyframes_1to2_sparse50": {"keyframes": 2, "accel": (SparseAttention(density=0.5),), "experimental": True},
        "keyframes_1to2_pyramid1": {"keyframes": 2, "accel": (PyramidCascade(low_steps=1),), "experimental": True},
    }


# Filled on first use (the configs import torch): name -> {"keyframes", "accel", "experimental"?}.
CLIP_VARIANTS: dict[str, dict[str, Any]] = {}


def _base_accel(cuda: bool) -> tuple[AccelConfig, ...]:
    """The dense accelerations every "ours" variant runs with (the 1.45x forward of BENCHMARKS)."""
    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.compile import Compile
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.memory import FfnChunks

    if not cuda:
        return ()
    return (Fp8Linears(mode="auto"), Attention("fp8-triton"), Compile(), FfnChunks(chunks=8))


def _bench_vae(backend: Any, width: int, height: int, frames: int, log: Log) -> dict[str, Any]:
    """Decode one ``frames``-frame segment's latents: tiled (today's default), larger tiles,
    untiled, untiled + channels_last_3d."""
    import torch

    from newsmotion_engine.accel.memory import VaeTiling, disable_vae_tiling, enable_vae_tiling
    from newsmotion_engine.render.backends.wan import decode as wan_decode

    comps = backend.components
    vae, dev = comps.vae, comps.device
    t_lat = (frames - 1) // 4 + 1
    latents = torch.randn(1, 16, t_lat + 1, height // 8, width // 8, generator=torch.Generator("cpu").manual_seed(1)).to(dev)
    out: dict[str, Any] = {"frames": frames}
    cases: list[tuple[str, VaeTiling | None, bool]] = [("tiled_256_192", VaeTiling(256, 192), False),
                                                       ("tiled_512_448", VaeTiling(512, 448), False),
                                                       ("untiled", None, False), ("untiled_channels_last", None, True)]  # fmt: skip
    for name, tiling, channels_last in cases:
        if tiling is not None:
            enable_vae_tiling(vae, tiling)
        else:
            disable_vae_tiling(vae)
        convs = [m for m in vae.modules() if isinstance(m, torch.nn.Conv3d)] if channels_last else []
        for m in convs:  # the 3-D convolutions only (other parameters have no 5-D layout)
            m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
        try:
            wan_decode.decode_latents(vae, latents[:, :, :3])  # warm-up (cuDNN algorithm choice)
            peak_reset(dev)
            sync(dev)
            t0 = time.perf_counter()
            video = wan_decode.decode_latents(vae, latents)
            sync(dev)
            out[name] = {"decode_s": round(time.perf_counter() - t0, 3), "peak_vram_gib": peak_gib(dev), "frames_out": int(video.shape[0])}
        except Exception as exc:  # an OOM at one setting is a result; the others still run
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            for m in convs:
                m.weight.data = m.weight.data.contiguous()
        log(f"vae {name}: {out[name]}")
    disable_vae_tiling(vae)
    ok = {k: v for k, v in out.items() if isinstance(v, dict) and "decode_s" in v}
    if ok:
        out["fastest"] = min(ok, key=lambda k: ok[k]["decode_s"])
    return out


def _bench_stock(backend: Any, loop: Any, persona: Any, width: int, height: int, frames: int, steps: int, log: Log) -> dict[str, Any]:
    """Stock ``WanAnimatePipeline`` (bf16, SDPA, its defaults) on the whole clip."""
    import torch
    from PIL import Image

    from benchmarks.gpu import stock_inputs, stock_pipeline, stock_reference

    comps = backend.components
    dev, dtype = comps.device, comps.dtype
    si = stock_inputs(backend.options, comps, loop, persona, width, height, frames)
    img_enc, emb, text_s = si.image_encoder, si.prompt_embeds, si.text_encode_s
    pose, face = [Image.fromarray(f) for f in si.pose_frames], [Image.fromarray(f) for f in si.face_frames]
    pipe, calls, hook = stock_pipeline(comps, si.processor, img_enc)
    peak_reset(dev)
    t0 = time.perf_counter()
    with torch.no_grad():
        video = pipe(image=stock_reference(pipe, img_enc, persona, width, height), pose_video=pose, face_video=face, prompt_embeds=emb[0:1].to(dev, dtype),
                     height=height, width=width, segment_frame_length=77, num_inference_steps=steps, guidance_scale=1.0,
                     generator=torch.Generator("cpu").manual_seed(0), output_type="np").frames[0]  # fmt: skip
    sync(dev)
    pipeline_s = time.perf_counter() - t0
    hook.remove()
    del pipe, img_enc, si
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    res = {"pipeline_s": round(pipeline_s, 2), "text_encode_s": round(text_s, 2), "end_to_end_s": round(pipeline_s + text_s, 2),
           "frames_out": int(len(video)), "transformer_forwards": calls["n"], "peak_vram_gib": peak_gib(dev)}  # fmt: skip
    log(f"stock clip: {res}")
    return res


def _render_ours(backend: Any, loop: Any, persona: Any, spec: Any, out_path: Path, *,
                 infill_device: str | None = None) -> tuple[Any, float]:  # fmt: skip
    """One clip through the product path (``render_clip`` -> the backend's frames): its telemetry
    and wall seconds."""
    from newsmotion_engine.render.clip import render_clip

    t0 = time.perf_counter()
    telemetry = render_clip(loop, persona, backend, spec, out_path, sink=FrameSink, infill_device=infill_device)
    return telemetry, time.perf_counter() - t0


def bench_clip(
    preset: str = "14b",
    *,
    parts: Sequence[str] = ("vae", "stock", "ours"),
    width: int = 720,
    height: int = 1280,
    frames: int = 120,
    steps: int = 4,
    variants: Sequence[str] | None = None,
    vae_frames: int = 61,
    device: str = "auto",
    budget_s: float | None = None,
    json_path: str | Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run the clip benchmark (see the module docstring); the JSON is rewritten after every
    measurement, so a run cut short keeps what it measured. ``parts``: any of ``"vae"``,
    ``"stock"``, ``"ours"``. ``variants``: names of :data:`CLIP_VARIANTS` (default all).
    ``budget_s``: measurements that would start after this many seconds are skipped (recorded).
    ``vae_frames``: the decoded segment's length (61: a 120-frame clip at 1:2 keyframes).

    Keys: ``clip_120f_720p_s`` (fastest non-experimental "ours"), ``clip_120f_720p_s_stock``,
    ``clip_speedup_vs_stock``, ``clip_120f_720p_s_experimental`` (fastest with an approximation),
    ``vae``, ``stock``, ``ours``, ``weights``.
    """
    import diffusers
    import torch

    from newsmotion_engine.accel import registry
    from benchmarks.gpu import BENCH_PROMPT, bench_inputs
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.backends.wan_animate.backend import WanAnimateBackend
    from newsmotion_engine.render.backends.wan_animate.config import RANDOM_WEIGHTS_LABEL, WanAnimateOptions

    unknown = set(parts) - {"vae", "stock", "ours"}
    if unknown:
        raise ValueError(f"parts {sorted(unknown)}: use vae, stock, ours")
    CLIP_VARIANTS.update(_variants())
    names = list(variants) if variants is not None else list(CLIP_VARIANTS)
    bad = [n for n in names if n not in CLIP_VARIANTS]
    if bad:
        raise ValueError(f"clip variants {bad}: use {', '.join(CLIP_VARIANTS)}")
    t_start = time.perf_counter()
    budget = VariantBudget(budget_s)
    result: dict[str, Any] = {"bench": "gpu_clip", "weights": RANDOM_WEIGHTS_LABEL, "preset": preset,
                              "note": "random weights: speed and memory only; frames are not encoded (no ffmpeg on the GPU machine)",
                              "shape": {"width": width, "height": height, "frames": frames, "steps": steps},
                              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            write_lab_result(json_path, result, title=f"a whole wan-animate {preset} clip {width}x{height}x{frames}: stock vs ours",
                             headline=top_level_figures(result))  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="newsmotion-clip-") as tmp_dir:
        tmp = Path(tmp_dir)
        opts = WanAnimateOptions(preset=preset, device=device, steps=steps, prompt=BENCH_PROMPT, negative_prompt="",
                                 cache_root=str(tmp / "caches"))  # fmt: skip
        backend = WanAnimateBackend(opts)
        t0 = time.perf_counter()
        backend.load()
        comps = backend.components
        dev = comps.device
        result["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
        result["versions"] = {"torch": torch.__version__, "diffusers": diffusers.__version__, "python": platform.python_version()}
        result["load_s"] = round(time.perf_counter() - t0, 1)
        loop, persona = bench_inputs(width, height, frames, tmp)
        write()
        if "vae" in parts:
            result["vae"] = _bench_vae(backend, width, height, vae_frames, log)
            write()
        if "stock" in parts and not budget.spent():
            result["stock"] = _bench_stock(backend, loop, persona, width, height, frames, steps, log)
            result["clip_120f_720p_s_stock"] = result["stock"]["end_to_end_s"]
            write()
        if "ours" not in parts:
            backend.close()
            return result
        base = registry.apply_accelerations(comps, _base_accel(dev.type == "cuda"))
        result["accel_report"] = base.report
        result["ours"] = {}
        t0 = time.perf_counter()
        for name in names:
            v = CLIP_VARIANTS[name]
            if why := budget.next_variant():
                result["ours"][name] = {"skipped": why}
                continue
            spec = RenderSpec(width=width, height=height, keyframes=v["keyframes"])
            row: dict[str, Any] = {"keyframes": v["keyframes"], "experimental": bool(v.get("experimental")),
                                   "settings": [c.describe() for c in registry.ordered((*base.configs, *v["accel"]))]}  # fmt: skip
            try:
                backend.prepare_guidance(loop, spec)
                backend.prepare_persona(persona, spec)
                applied = registry.apply_accelerations(comps, v["accel"])
                try:
                    t1 = time.perf_counter()
                    _render_ours(backend, loop, persona, spec, tmp / "clip.mp4", infill_device="cuda" if dev.type == "cuda" else None)
                    row["first_run_s"] = round(time.perf_counter() - t1, 2)  # includes compiling this shape
                    peak_reset(dev)
                    tele, wall_s = _render_ours(backend, loop, persona, spec, tmp / "clip.mp4",
                                                infill_device="cuda" if dev.type == "cuda" else None)  # fmt: skip
                    stats = tele.backend_info.get("last_render", {})
                    row.update(end_to_end_s=round(wall_s, 2), peak_vram_gib=peak_gib(dev), frames_out=tele.frames,
                               # prepare holds face_video and pose_encode, which run side by side; decode is the
                               # GPU decode time, streamed beside the infill's CPU work.
                               stages_s={"prepare": stats.get("prep_s"), "face_video": stats.get("face_video_s"),
                                         "pose_encode": stats.get("pose_encode_s"), "denoise": stats.get("denoise_s"),
                                         "decode": stats.get("decode_s"),
                                         "infill": round((tele.keyframes or {}).get("infill_ms", 0.0) / 1e3, 3)},
                               segments=stats.get("segments"), infill=tele.keyframes)  # fmt: skip
                finally:
                    registry.remove_accelerations(comps, applied)
            except Exception as exc:  # one failing variant is a result; the others still run
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            result["ours"][name] = row
            log(f"ours[{name}]: {row}")
            write()
        done = {n: r for n, r in result["ours"].items() if "end_to_end_s" in r}
        exact = {n: r for n, r in done.items() if not r["experimental"]}
        if exact:
            best = min(exact, key=lambda n: exact[n]["end_to_end_s"])
            result["clip_120f_720p_s"] = exact[best]["end_to_end_s"]
            result["clip_fastest_variant"] = best
            if "clip_120f_720p_s_stock" in result:
                result["clip_speedup_vs_stock"] = round(result["clip_120f_720p_s_stock"] / result["clip_120f_720p_s"], 3)
        approx = {n: r for n, r in done.items() if r["experimental"]}
        if approx:
            best = min(approx, key=lambda n: approx[n]["end_to_end_s"])
            result["clip_120f_720p_s_experimental"] = approx[best]["end_to_end_s"]
            result["clip_fastest_experimental_variant"] = best
        backend.close()
    write()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="14b")
    parser.add_argument("--parts", default="vae,stock,ours")
    parser.add_argument("--variants", default=None, help="comma-separated CLIP_VARIANTS names (default all)")
    parser.add_argument("--width", type=int, default=720)
    parser.add_argument("--height", type=int, default=1280)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    bench_clip(a.preset, parts=a.parts.split(","), variants=a.variants.split(",") if a.variants else None, width=a.width,
               height=a.height, frames=a.frames, steps=a.steps, budget_s=a.budget_s, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
