"""GPU benchmark of the champ backend: seconds for the reference design's clip (120 frames for a
720x1280 canvas, rendered at 512x912 — Champ's 512 width at the canvas' aspect — and scaled onto
it), stock vs ours, peak VRAM.

One random-weight model (``champ``: the released architecture) renders through the shipped path
(``render_clip`` -> the backend's frames -> the chroma composite), the SMPL body from the user's
file (``--smpl``; it is licensed and not shipped):

- ``stock``: the official recipe on diffusers components in bf16: 20 DDIM steps, CFG 3.5, 24-frame
  context windows overlapping by 4, and the official order of work for the reference attention
  (``reference_pass="official"``: the reference UNet for both CFG halves, the unconditional rows
  attended twice);
- ``conditional``: the reference UNet once, the unconditional rows once (the same frames: tested);
- ``conditional+compile`` (CUDA only): plus regional ``torch.compile`` of the denoising UNet's
  transformer blocks through the acceleration registry;
- ``conditional+compile+fp8_attention`` (CUDA only): plus our 8-bit attention kernel in the
  reference attention (``-o attention=fp8-triton``; SD1.5's 40- and 80-wide heads zero-padded to
  the kernel's 64 and 128, the own and reference key sets merged by log-sum-exp:
  :mod:`newsmotion_engine.render.backends.champ.attention`);
- ``conditional+compile+channels_last`` (CUDA only): plus the convolution weights channels-last
  (:mod:`newsmotion_engine.accel.memory_format`; cuDNN's bf16 convolutions run natively in NHWC);
- ``conditional+compile+compile_vae`` (CUDA only): plus the VAE decoder's blocks compiled
  (:mod:`newsmotion_engine.accel.compile_vae`);
- ``conditional+compile+compile_vae+fp8_attention`` (CUDA only): compile, the compiled VAE decoder and the 8-bit attention together;
  ``...+one_key_cross`` also computes the cross-attention over the one-token CLIP embedding as its
  value (:mod:`newsmotion_engine.accel.one_key_cross`; exact);
- ``conditional+compile_unet_blocks+compile_vae+fp8_attention+one_key_cross`` (CUDA only): the same
  with ``compile_scope="unet_blocks"``: the resnets and the spatial-transformer and motion-module
  wrappers compiled too, not only the transformer blocks (their GroupNorms, SiLUs, residual adds and
  layout changes otherwise run eagerly; now the backend's default scope);
  ``...+fp8_attention_polyexp+...``: the same with the kernel variant ``int8qk-fp8pv-polyexp``
  (half of each tile's exponentials on the FMA pipe; :mod:`newsmotion_engine.accel.attention_triton`);
  ``...+short_attention``: plus the motion modules' 24-frame self-attention packed eight
  sequences to a Triton program (:mod:`newsmotion_engine.accel.short_attention`);
- ``conditional+fp8+compile[+channels_last]`` (CUDA only): plus the linears of the denoising
  UNet's blocks in FP8 (:mod:`newsmotion_engine.accel.fp8`, rowwise scales, as in the Wan
  transformer; the originals kept, so the next variant gets the bf16 UNet back).

Each variant renders once to warm up (caches, compile; at 2 steps, the same shapes) and once timed. Frames are not encoded
(:class:`benchmarks.clip.FrameSink`). With random weights only speed and memory mean anything.

``--maps-only``: the guidance maps alone (:func:`bench_maps`), one thread vs the default
worker threads, on the CPU or a GPU's rasterizer (there also the z-buffer frame by frame, as
before it ran several frames per pass); no model is involved.

Example (from the repository root)::

    python -m benchmarks.champ --smpl ~/models/SMPL_NEUTRAL.pkl --json benchmarks/results/champ_h100.json
    python -m benchmarks.champ --smpl synthetic --json benchmarks/results/champ_h100.json   # no SMPL file: a box body
    python -m benchmarks.champ --smpl SMPL.npz --preset tiny --sizes 64x128 --frames 9 --steps 2   # CPU check
    python -m benchmarks.champ --smpl synthetic --maps-only --device cpu --json benchmarks/results/champ_maps_cpu.json

``--profile-steps N``: each row also gets a kernel breakdown of one more clip at N steps, and as its
``one_step`` one step's kernels alone (a second profiled clip at N + 1 steps less the first: the
denoise without the decode; :func:`benchmarks.clip.profile_clip_steps`, :mod:`benchmarks.kernel_profile`),
not in the timed figures::

    bash benchmarks/device_gpu.sh zoo 540 "champ --smpl synthetic --variants stock,conditional+compile --profile-steps 1 --budget-s 400"
"""

from __future__ import annotations

import dataclasses
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.budget import VariantBudget
from benchmarks.lab_record import stock_vs_ours, top_level_figures, write_lab_result

__all__ = ["VARIANTS", "bench_champ", "bench_maps", "count_flops"]

VARIANTS = ("stock", "conditional", "conditional+compile", "conditional+compile+channels_last", "conditional+fp8+compile",
            "conditional+fp8+compile+channels_last", "conditional+compile+compile_vae", "conditional+compile+fp8_attention",
            "conditional+compile+compile_vae+fp8_attention", "conditional+compile+compile_vae+fp8_attention+one_key_cross",
            "conditional+compile_unet_blocks+compile_vae+fp8_attention+one_key_cross",
            "conditional+compile_unet_blocks+compile_vae+fp8_attention_polyexp+one_key_cross",
            "conditional+compile_unet_blocks+compile_vae+fp8_attention+one_key_cross+short_attention")


def _variant_options(name: str) -> dict[str, Any]:
    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.compile import Compile
    from newsmotion_engine.accel.compile_vae import CompileVae
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.memory_format import ChannelsLast
    from newsmotion_engine.accel.one_key_cross import OneKeyCross
    from newsmotion_engine.accel.short_attention import ShortAttention
    from newsmotion_engine.render.backends.champ.config import COMPILE_SCOPES

    fp8 = Fp8Linears(mode="compute", keep_original=True)  # originals kept: the next variant gets the bf16 UNet back
    blocks = {"compile_scope": "transformer_blocks"}  # "+compile": the transformer blocks alone, as these variants were measured
    return {"stock": {"reference_pass": "official"}, "conditional": {},
            "conditional+compile": {**blocks, "accelerations": (Compile(),)},
            "conditional+compile+channels_last": {**blocks, "accelerations": (ChannelsLast(), Compile())},
            "conditional+compile+compile_vae": {**blocks, "accelerations": (CompileVae(), Compile())},
            "conditional+compile+fp8_attention": {**blocks, "accelerations": (Attention(kernel="fp8-triton"), Compile())},
            "conditional+compile+compile_vae+fp8_attention": {
                **blocks, "accelerations": (Attention(kernel="fp8-triton"), CompileVae(), Compile())},
            "conditional+compile+compile_vae+fp8_attention+one_key_cross": {
                **blocks, "accelerations": (Attention(kernel="fp8-triton"), OneKeyCross(), CompileVae(), Compile())},
            # compile_scope="unet_blocks" (the backend's default): the resnets and the transformer /
            # motion-module wrappers compiled too
            "conditional+compile_unet_blocks+compile_vae+fp8_attention+one_key_cross": {
                "accelerations": (Attention(kernel="fp8-triton"), OneKeyCross(), CompileVae(),
                                  Compile(regions=COMPILE_SCOPES["unet_blocks"]))},
            # and half the attention's exponentials on the FMA pipe (the kernel's POLY_EXP)
            "conditional+compile_unet_blocks+compile_vae+fp8_attention_polyexp+one_key_cross": {
                "accelerations": (Attention(kernel="fp8-triton", variant="int8qk-fp8pv-polyexp"), OneKeyCross(), CompileVae(),
                                  Compile(regions=COMPILE_SCOPES["unet_blocks"]))},
            # and the motion modules' 24-frame attention packed many sequences to a Triton program
            "conditional+compile_unet_blocks+compile_vae+fp8_attention+one_key_cross+short_attention": {
                "accelerations": (Attention(kernel="fp8-triton"), OneKeyCross(), ShortAttention(), CompileVae(),
                                  Compile(regions=COMPILE_SCOPES["unet_blocks"]))},
            "conditional+fp8+compile": {**blocks, "accelerations": (fp8, Compile())},
            "conditional+fp8+compile+channels_last": {**blocks, "accelerations": (fp8, ChannelsLast(), Compile())}}[name]  # fmt: skip


def _timed_render(backend: Any, loop: Any, persona: Any, spec: Any, out: Path, profile_steps: int | None = None) -> dict[str, Any]:
    """One warm-up render (2 steps), then one timed; the row of figures. ``profile_steps``: then one more at
    this many steps under the profiler (the row's ``profile``; not in the timed figures)."""
    from benchmarks.clip import FrameSink, options_replaced, profile_clip_steps
    from newsmotion_engine.bench.timing import peak_gib, peak_reset
    from newsmotion_engine.render.clip import render_clip

    with options_replaced(backend, {"steps": 2}):  # warm-up (compiles): the same shapes at 2 steps
        render_clip(loop, persona, backend, spec, out, sink=FrameSink)
    peak_reset(backend.components.device)
    t0 = time.perf_counter()
    tele = render_clip(loop, persona, backend, spec, out, sink=FrameSink)
    stats = tele.backend_info.get("last_render", {})
    row = {"end_to_end_s": round(time.perf_counter() - t0, 2), "peak_vram_gib": peak_gib(backend.components.device),
           "frames_out": tele.frames, "windows": stats.get("windows"), "maps_s": stats.get("maps_s"),
           "denoise_s": stats.get("denoise_s")}  # fmt: skip
    if profile_steps:
        row["profile"] = profile_clip_steps(backend, loop, persona, spec, out, profile_steps)
    return row


def bench_champ(smpl_model: str | Path, preset: str = "champ", *, sizes: Sequence[tuple[int, int]] = ((720, 1280),),
                frames: int = 120, steps: int = 20, variants: Sequence[str] | None = None, device: str = "auto",
                dtype: str = "bfloat16", model_width: int = 512, budget_s: float | None = None, profile_steps: int | None = None,
                json_path: str | Path | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every measurement.

    Keys: ``rows`` (size -> variant -> seconds, peak VRAM, windows, map / denoise seconds), and per
    size ``clip_{W}x{H}_s_stock``, ``clip_{W}x{H}_s`` (the fastest "ours") and ``speedup_{W}x{H}``.
    ``profile_steps``: each row's ``profile`` (a clip at this many steps under the profiler, after the timed one).
    """
    import torch

    from benchmarks.gpu import bench_inputs
    from newsmotion_engine.accel import registry
    from newsmotion_engine.render.backends.champ.backend import ChampBackend
    from newsmotion_engine.render.backends.champ.config import ChampOptions
    from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL
    from newsmotion_engine.render.base import RenderSpec

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    unknown = set(variants or ()) - set(VARIANTS)
    if unknown:
        raise ValueError(f"variants {sorted(unknown)}: use {', '.join(VARIANTS)}")
    names = [n for n in (variants or VARIANTS) if cuda or "compile" not in n]
    t_start = time.perf_counter()
    budget = VariantBudget(budget_s)
    result: dict[str, Any] = {"bench": "champ", "weights": RANDOM_WEIGHTS_LABEL, "preset": preset, "dtype": dtype,
                              "smpl_body": "synthetic box body (no SMPL file)" if Path(smpl_model).name == "SMPL_SYNTH.npz" else "user's SMPL file",
                              "note": "random weights: speed and memory only; frames not encoded",
                              "shape": {"frames": frames, "steps": steps, "model_width": model_width, "sizes": [list(s) for s in sizes]},
                              "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
                              "rows": {}}  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            write_lab_result(json_path, result, title=f"champ {preset}: a {frames}-frame clip, stock vs ours",
                             headline=top_level_figures(result))  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="newsmotion-champ-") as tmp_dir:
        tmp = Path(tmp_dir)
        base = ChampOptions(preset=preset, device=device, dtype=dtype, steps=steps, smpl_model=str(smpl_model),
                            model_width=model_width, cache_root=str(tmp / "caches"))  # fmt: skip
        backend = ChampBackend(base)
        backend.load()
        for width, height in sizes:
            key = f"{width}x{height}"
            rows = result["rows"].setdefault(key, {})
            loop, persona = bench_inputs(width, height, frames, tmp / key)
            spec = RenderSpec(width=width, height=height)
            backend.prepare_guidance(loop, spec)
            backend.prepare_persona(persona, spec)
            for name in names:
                if why := budget.next_variant():
                    rows[name] = {"skipped": why}
                    continue
                backend.options = dataclasses.replace(base, **_variant_options(name))
                row: dict[str, Any] = {"model_size": list(backend.options.model_size(width, height))}
                applied = None
                try:
                    applied = registry.apply_accelerations(backend.components, backend.options.accelerations)
                    row.update(_timed_render(backend, loop, persona, spec, tmp / "clip.mp4", profile_steps))
                except Exception as exc:  # one failing variant is a result; the others still run
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                finally:
                    if applied is not None:
                        registry.remove_accelerations(backend.components, applied)
                rows[name] = row
                log(f"{key} {name}: {row}")
                write()
            stock_vs_ours(result, key, rows)
            write()
        backend.close()
    write()
    return result


def bench_maps(smpl_model: str | Path, *, frames: int = 120, size: tuple[int, int] = (720, 1280), model_width: int = 512,
               device: str = "cpu", workers: Sequence[int | None] = (1, None), json_path: str | Path | None = None,
               log: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """The guidance maps alone (depth, normal, semantic, skeleton) of the bench's clip at the
    model's size, as a render draws them (``ChampBackend.guidance_videos``), with each count of
    worker threads in ``workers`` (None: the default): seconds, and whether every map equals the
    first count's. No model weights are involved (the ``tiny`` preset's components are built
    only because the backend loads them)."""
    import os

    import numpy as np
    import torch

    from benchmarks.gpu import bench_inputs
    import newsmotion_engine.render.backends.champ.maps as maps_module
    from newsmotion_engine.render.backends.champ.backend import ChampBackend
    from newsmotion_engine.render.backends.champ.config import ChampOptions
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.clip import retargeted_keypoints

    width, height = size
    original = maps_module.rasterizes_in_chunks
    result: dict[str, Any] = {"bench": "champ_maps", "smpl_body": "synthetic box body (no SMPL file)" if Path(smpl_model).name == "SMPL_SYNTH.npz" else "user's SMPL file",
                              "shape": {"frames": frames, "size": [width, height], "model_width": model_width},
                              "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                              "cpus": os.cpu_count(), "rows": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="newsmotion-champ-maps-") as tmp_dir:
        tmp = Path(tmp_dir)
        backend = ChampBackend(ChampOptions(preset="tiny", device=device, dtype="float32", smpl_model=str(smpl_model),
                                            model_width=model_width, cache_root=str(tmp / "caches")))  # fmt: skip
        backend.load()
        loop, persona = bench_inputs(width, height, frames, tmp / "inputs")
        spec = RenderSpec(width=width, height=height)
        backend.prepare_guidance(loop, spec)
        fit = backend.load_guidance(loop, spec)
        keypoints = retargeted_keypoints(loop, persona)
        first = None
        runs = [(f"workers_{n}" if n else "workers_default", n, True) for n in workers]
        if maps_module.rasterizes_in_chunks(backend.components.device):  # a GPU: also the frame-by-frame z-buffer
            runs.append(("workers_default_frame_by_frame", None, False))
        try:
            for key, n, chunked in runs:
                maps_module.rasterizes_in_chunks = original if chunked else (lambda device: False)
                backend.guidance_videos(fit, persona, keypoints[:4], spec, workers=n)  # warm-up (allocator, kernels)
                t0 = time.perf_counter()
                videos = backend.guidance_videos(fit, persona, keypoints, spec, workers=n)
                seconds = time.perf_counter() - t0
                first = videos if first is None else first
                result["rows"][key] = {"seconds": round(seconds, 3), "ms_per_frame": round(seconds / frames * 1e3, 2),
                                       "same_maps_as_first": all(np.array_equal(videos[t], first[t]) for t in videos)}  # fmt: skip
                log(f"maps, {key}: {result['rows'][key]}")
        finally:  # the module's own chunking decision back, whatever happened
            maps_module.rasterizes_in_chunks = original
        backend.close()
    rows = [result["rows"][key] for key, _, _ in runs[:len(workers)]]
    result["maps_s_one_thread"], result["maps_s"] = rows[0]["seconds"], rows[-1]["seconds"]
    if "workers_default_frame_by_frame" in result["rows"]:
        result["maps_s_frame_by_frame"] = result["rows"]["workers_default_frame_by_frame"]["seconds"]
    result["maps_speedup"] = round(rows[0]["seconds"] / rows[-1]["seconds"], 2)
    if json_path is not None:
        write_lab_result(json_path, result, title=f"champ guidance maps of a {frames}-frame clip at the model's size, one thread vs several",
                         headline={"one thread (s)": result["maps_s_one_thread"], "default threads (s)": result["maps_s"],
                                   "speed-up (x)": result["maps_speedup"],
                                   **({"frame by frame, default threads (s)": result["maps_s_frame_by_frame"]}
                                      if "maps_s_frame_by_frame" in result else {})})  # fmt: skip
    return result


def count_flops(record_path: str | Path, json_path: str | Path | None = None, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The denoising UNet's work in a champ clip record, counted on the meta device, and the rate
    each measured variant's denoise ran at (``--count-flops RECORD``).

    One window forward (both guidance rows, the window's frames, at the record's model size) is
    counted by operator three ways: the official reference pass (every row attends over its own
    tokens and the reference's, the unconditional rows then recomputed without them: stock), the
    conditional one (ours) and the conditional one with ``one_key_cross``. A variant's denoise is
    its forward's count x windows x steps; the reference UNet's one pass, the guidance encoders and
    element-wise work are left out, and the seconds are the record's.
    """
    import json

    import torch

    from benchmarks.flop_count import count_call, write_flops_record
    from newsmotion_engine.accel.one_key_cross import set_one_key_cross
    from newsmotion_engine.render.backends.champ.components import build_models
    from newsmotion_engine.render.backends.champ.config import PRESETS, ChampOptions
    from newsmotion_engine.render.backends.champ.denoise import context_windows
    from newsmotion_engine.render.backends.champ.modules import ReferenceState, install_reference_attention, reference_attention_names

    try:
        record = json.loads(Path(record_path).read_text())
        data = record["data"]
        measured = {size: {n: v for n, v in r.items() if "denoise_s" in v and "model_size" in v} for size, r in data["rows"].items()}
        if data.get("bench") != "champ" or data.get("preset") not in PRESETS or not all(measured.values()):
            raise ValueError("not a champ clip record (python -m benchmarks.champ --json ...)")
        if unknown := {n for r in measured.values() for n in r} - set(VARIANTS):
            raise ValueError(f"variants {sorted(unknown)} are not this bench's ({', '.join(VARIANTS)})")
        steps, frames = int(data["shape"]["steps"]), int(data["shape"]["frames"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{record_path}: {exc}") from None
    opts = ChampOptions(preset=data["preset"], smpl_model="unused")
    windows = context_windows(frames, opts.context_frames, opts.context_overlap)
    window = len(windows[0])
    with torch.device("meta"):
        models = build_models(PRESETS[data["preset"]]())
    unet = models["denoising_unet"].to(torch.bfloat16)
    state = ReferenceState()
    install_reference_attention(models["reference_unet"], unet, state)

    rows = 2  # CFG: the unconditional and the conditional row

    def fill_bank(name: str) -> Callable[..., None]:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:  # the reference's tokens: one frame of the same shape
            x = kwargs.get("hidden_states", args[0] if args else None)
            videos = rows if state.official else 1  # the official reference pass runs for both CFG rows
            state.bank[name] = torch.empty(videos, *x.shape[1:], device="meta", dtype=x.dtype)
        return hook

    hooks = [unet.get_submodule(n).register_forward_pre_hook(fill_bank(n), with_kwargs=True) for n in reference_attention_names(unet)]
    out: dict[str, Any] = {"bench": "champ", "part": "flops", "preset": data["preset"], "window_frames": window, "windows": len(windows),
                           "steps": steps, "note": "counted on the meta device (torch.utils.flop_counter: matmuls, convolutions, attention); "
                           "the reference UNet's one pass, the guidance encoders and element-wise work left out; seconds from 'source'",
                           "source": {"record": Path(record_path).name, "device": record.get("device"), "commit": record.get("commit")},
                           "rows": {}}  # fmt: skip
    try:
        for size, variants in measured.items():
            w, h = next(iter(variants.values()))["model_size"]
            x = torch.empty(rows, 4, window, h // 8, w // 8, device="meta", dtype=torch.bfloat16)
            ctx = torch.empty(rows * window, 1, unet.config.cross_attention_dim, device="meta", dtype=torch.bfloat16)

            def count(official: bool, one_key: bool) -> tuple[int, dict[str, float]]:
                state.official, state.frames, state.uncond_rows = official, window, window
                set_one_key_cross(unet, one_key)
                try:
                    return count_call(lambda: unet(x, torch.tensor(10.0, device="meta"), encoder_hidden_states=ctx, return_dict=False))
                finally:
                    set_one_key_cross(unet, False)

            forwards = {}
            for label, official, one_key in (("official", True, False), ("conditional", False, False), ("conditional_one_key_cross", False, True)):
                flop, by_op = count(official, one_key)
                forwards[label] = {"flop": flop, "tflop": round(flop / 1e12, 2), "by_op_tflop": by_op}
            row: dict[str, Any] = {"model_size": [w, h], "forward": forwards, "variants": {}}
            for name, v in variants.items():
                options = _variant_options(name)  # which forward the variant ran, from its own options
                one_key = any(c.technique == "one_key_cross" for c in options.get("accelerations", ()))
                label = ("official" if options.get("reference_pass") == "official"
                         else "conditional_one_key_cross" if one_key else "conditional")  # fmt: skip
                work = forwards[label]["flop"] * len(windows) * steps
                rate = work / 1e12 / v["denoise_s"]
                row["variants"][name] = {"forward": label, "denoise_tflop": round(work / 1e12, 1), "denoise_s": v["denoise_s"],
                                         "denoise_tflops": round(rate, 1)}  # fmt: skip
                log(f"{size} {name}: {work / 1e12:.0f} TFLOP in {v['denoise_s']} s = {rate:.0f} TFLOP/s")
            out["rows"][size] = row
    finally:
        for hk in hooks:
            hk.remove()
    out["device"] = f"{record.get('device')} (its seconds; the count ran on the CPU)"
    if json_path:
        write_flops_record(out, json_path, "champ", record_path,
                           title="champ: the denoising UNet's work in the clip, counted, and the rate each variant's denoise ran at")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smpl", default=os.environ.get("NEWSMOTION_SMPL_MODEL"),
                        help="the SMPL model file (.pkl / .npz), or 'synthetic': the box body of "
                        "render/backends/champ/synthetic_body.py (timing only; the record says so)")  # fmt: skip
    parser.add_argument("--preset", default="champ")
    parser.add_argument("--sizes", default="720x1280", help="comma-separated WxH render sizes")
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--model-width", type=int, default=512)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--variants", default=None, help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--profile-steps", type=int, default=None,
                        help="after each timed clip, one more at N steps under torch.profiler (the row's kernel breakdown)")
    parser.add_argument("--maps-only", action="store_true",
                        help="only the guidance maps of the first size, one thread vs the default (any device; no model)")
    parser.add_argument("--device", default="auto", help="auto / cpu / cuda (--maps-only: where the rasterizer runs)")
    parser.add_argument("--count-flops", metavar="RECORD_JSON", default=None,
                        help="count the denoising UNet's work of a champ clip record on the meta device (no GPU, no SMPL file)")
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    if a.count_flops:
        try:
            count_flops(a.count_flops, a.json)
        except ValueError as exc:
            parser.error(str(exc))
        return
    if not a.smpl:
        parser.error("give the SMPL model file: --smpl PATH (or $NEWSMOTION_SMPL_MODEL); get it from https://smpl.is.tue.mpg.de")
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    smpl = a.smpl
    if smpl == "synthetic":
        from newsmotion_engine.render.backends.champ.synthetic_body import write_synthetic_smpl

        smpl = str(write_synthetic_smpl(Path(tempfile.mkdtemp(prefix="newsmotion-smpl-")) / "SMPL_SYNTH.npz"))
    if a.maps_only:
        import torch

        device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        bench_maps(smpl, frames=a.frames, size=sizes[0], model_width=a.model_width, device=device, json_path=a.json)  # type: ignore[arg-type]
        return
    bench_champ(smpl, a.preset, sizes=sizes, device=a.device, frames=a.frames, steps=a.steps, dtype=a.dtype, model_width=a.model_width,  # type: ignore[arg-type]
                variants=a.variants.split(",") if a.variants else None, budget_s=a.budget_s,
                profile_steps=a.profile_steps, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
