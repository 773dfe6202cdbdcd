"""GPU benchmark of the ``wan-animate`` backend against stock diffusers (one run, every variant).

Two parts, each fitting one 10-minute device command:

- ``part="forward"``: one ``WanAnimateTransformer3DModel`` forward at the full segment shape
  (default 14B, 77 frames at 720x1280 = 75.6k tokens): stock bf16 (diffusers defaults: SDPA), then
  each acceleration alone (cuDNN attention, the 8-bit Triton attention, regional compile, FP8
  linears) and all together (also with cuDNN, and with CUDA graphs): ``FORWARD_VARIANTS``. Per
  variant: per-forward ms (median of ``reps`` after ``warmup``), compile s, weights GiB, peak VRAM
  GiB, output relative error vs the stock output. Plus an attention micro-benchmark at the same
  shape (SDPA flash / cuDNN / each kernel variant: ms, TFLOP/s, error vs bf16 flash), which picks
  the kernel variant the "all" forward uses (accurate under ``MAX_FP8_ATTENTION_ERR`` and faster
  than cuDNN, else cuDNN).
- ``part="render"``: one segment end to end at ``steps`` steps and ``guidance_scale``: the stock
  ``WanAnimatePipeline`` (prompt embeddings passed in, because the pipeline's prompt cleaning needs
  ``ftfy``; the text encoding is timed separately and added to its end-to-end time) vs our
  cached-input loop with the accelerations, per ``RENDER_VARIANTS`` entry (TeaCache, CFG window /
  one-pass momentum CFG); same inputs, same initial noise; PSNR/SSIM of our frames vs the stock
  frames, transformer forwards run / skipped, CFG passes and FLOPs saved.

With random weights (the presets) errors and PSNR measure numerical drift only; every result
says "random weights".

Example::

    result = bench_gpu(preset="14b", part="forward")
    result["forward_speedup_vs_stock"]
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bench_gpu"]

Log = Callable[[str], None]
MAX_FP8_ATTENTION_ERR = 0.05  # relative L2 error vs bf16 attention above which the FP8 kernel is not used


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _gib(n: int | float) -> float:
    return round(float(n) / 2**30, 3)


def _peak_reset(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: Any) -> float | None:
    import torch

    return _gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _rel_err(a: Any, ref: Any) -> float:
    a, ref = a.float(), ref.float()
    return float((a - ref).norm() / ref.norm().clamp_min(1e-30))


def _time_calls(fn: Callable[[], Any], device: Any, warmup: int, reps: int) -> tuple[list[float], float, Any]:
    """(per-call ms of the timed reps, first-call ms, last output)."""
    out = None
    first_ms = 0.0
    for i in range(warmup):
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        if i == 0:
            first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, first_ms, out


def forward_inputs(cfg: dict[str, Any], width: int, height: int, frames: int, device: Any, dtype: Any, seed: int = 0):
    """Random inputs of one segment forward (the shapes WanAnimatePipeline feeds the transformer)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    t_lat = (frames - 1) // 4 + 1
    h, w = height // 8, width // 8
    lat_c = cfg["latent_channels"]
    face = cfg["motion_encoder_size"]

    def r(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dt)

    img_tokens = 257 if cfg["image_dim"] == 1280 else 17  # CLIP ViT-H/14 at 224 px: 16x16 patches + CLS
    return dict(
        hidden_states=r(1, 2 * lat_c + 4, t_lat + 1, h, w),
        timestep=torch.tensor([999.0], device=device),
        encoder_hidden_states=r(1, 512, cfg["text_dim"]),
        encoder_hidden_states_image=r(1, img_tokens, cfg["image_dim"]),
        pose_hidden_states=r(1, lat_c, t_lat, h, w),
        face_pixel_values=r(1, 3, frames, face, face).clamp(-1, 1),
        return_dict=False,
    )


def _tokens(cfg: dict[str, Any], width: int, height: int, frames: int) -> int:
    p = cfg["patch_size"]
    return ((frames - 1) // 4 + 2) * (height // 8 // p[1]) * (width // 8 // p[2])


def _attention_bench(tokens: int, heads: int, dim: int, device: Any, log: Log, reps: int,
                     variants: tuple[str, ...] | None = None) -> dict[str, Any]:  # fmt: skip
    """SDPA flash / cuDNN and each FP8-kernel variant at [1, tokens, heads, dim]: ms, TFLOP/s,
    relative error vs SDPA flash (bf16) on N(0, 1) inputs, plus the error on a sharper softmax
    (q x 3, 8192 tokens). ``selected``: the variant with the fastest kernel among those under
    ``MAX_FP8_ATTENTION_ERR`` on both inputs."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from newsmotion_engine.accel.attention import FP8_VARIANTS, fp8_attention, fp8_attention_supported, quantize_attention_inputs

    res: dict[str, Any] = {"shape": [1, tokens, heads, dim], "max_rel_err": MAX_FP8_ATTENTION_ERR}
    if device.type != "cuda":
        return {**res, "skipped": "needs CUDA"}
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(1, tokens, heads, dim, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * tokens * tokens * heads * dim

    def sdpa(q_, k_, v_, backend):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2)).transpose(1, 2)

    ref = None
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            times, _, out = _time_calls(lambda: sdpa(q, k, v, backend), device, 1, reps)
            ms = statistics.median(times)
            if ref is None:
                ref = out
            res[name] = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "rel_err_vs_flash": round(_rel_err(out, ref), 5)}
        except Exception as exc:  # a backend missing on this build is a result, not a crash
            res[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        log(f"attention {name}: {res[name]}")
    # A sharper softmax (larger logits): where 8-bit Q/K errors matter most.
    gs = torch.Generator(device=device).manual_seed(2)
    qs_, ks_, vs_ = (torch.randn(1, 8192, heads, dim, generator=gs, device=device, dtype=torch.bfloat16) for _ in range(3))
    qs_ = qs_ * 3
    ref_sharp = sdpa(qs_, ks_, vs_, SDPBackend.FLASH_ATTENTION)
    ok, why = fp8_attention_supported()
    res["fp8_triton"] = {}
    for name in variants or tuple(FP8_VARIANTS):
        if not ok:
            res["fp8_triton"][name] = {"skipped": why}
            continue
        try:
            times, first, out = _time_calls(lambda: fp8_attention(q, k, v, variant=name), device, 2, reps)
            ms = statistics.median(times)
            sharp = fp8_attention(qs_, ks_, vs_, variant=name)
            # The kernel alone on pre-quantized inputs (in a compiled block the quantization is
            # fused into the code before it; eager it is separate torch ops, included in "ms").
            x = quantize_attention_inputs(q, k, v, name)
            kt, _, _ = _time_calls(lambda: torch.ops.newsmotion.fp8_attention_kernel(*x, name), device, 1, reps)
            del x
            kms = statistics.median(kt)
            row = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "first_call_ms": round(first, 1),
                   "kernel_ms": round(kms, 2), "kernel_tflops": round(flops / kms / 1e9, 1),
                   "autotuned_config": _autotuned_config(),
                   "rel_err_vs_flash": round(_rel_err(out, ref), 5) if ref is not None else None,
                   "rel_err_sharp_vs_flash": round(_rel_err(sharp, ref_sharp), 5),
                   "finite": bool(torch.isfinite(out).all())}  # fmt: skip
            row["accurate"] = bool(row["finite"] and row["rel_err_vs_flash"] is not None
                                   and max(row["rel_err_vs_flash"], row["rel_err_sharp_vs_flash"]) < MAX_FP8_ATTENTION_ERR)  # fmt: skip
            res["fp8_triton"][name] = row
            del out, sharp
        except Exception as exc:
            res["fp8_triton"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        log(f"attention fp8_triton[{name}]: {res['fp8_triton'][name]}")
    # Ranked by the kernel alone: in the compiled forward (where it is used) the quantization is
    # fused into the block's preceding ops; the forward rows measure the whole effect.
    good = {n: r["kernel_ms"] for n, r in res["fp8_triton"].items() if r.get("accurate")}
    res["selected"] = min(good, key=good.get) if good else None
    cudnn_ms = res.get("cudnn", {}).get("ms", math.inf)
    res["selected_beats_cudnn"] = bool(good) and good[res["selected"]] < cudnn_ms
    log(f"attention selected: {res['selected']} (beats cuDNN: {res['selected_beats_cudnn']})")
    del q, k, v, ref, qs_, ks_, vs_, ref_sharp
    return res


def _autotuned_config() -> str | None:
    from newsmotion_engine.accel import attention

    best = getattr(attention._KERNEL, "best_config", None)
    return None if best is None else f"{best.kwargs} warps={best.num_warps} stages={best.num_stages}"


def attention_config_sweep(tokens: int = 75600, heads: int = 40, dim: int = 128, reps: int = 5,
                           variants: tuple[str, ...] | None = None, configs: Any = None, log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Every :data:`~newsmotion_engine.accel.attention.AUTOTUNE_CONFIGS` entry (or ``configs``) of
    every kernel variant, timed alone on pre-quantized ``[1, tokens, heads, dim]`` inputs (kernel ms, TFLOP/s,
    error vs bf16 SDPA), next to cuDNN's SDPA: what the autotuner chooses between."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from newsmotion_engine.accel import attention as A

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.randn(1, tokens, heads, dim, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * tokens * tokens * heads * dim
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)  # noqa: E731
        times, _, ref = _time_calls(sdpa, dev, 1, reps)
    res: dict[str, Any] = {"shape": [1, tokens, heads, dim], "cudnn_ms": round(statistics.median(times), 2), "configs": {}}
    log(f"cudnn: {res['cudnn_ms']} ms")
    kernel = A._build_kernel(autotune=False)
    for name in variants or tuple(A.FP8_VARIANTS):
        x = A.quantize_attention_inputs(q, k, v, name)
        for bm, bn, w, st, pipe in configs or A.AUTOTUNE_CONFIGS:
            key = f"{name} {bm}x{bn} w{w} s{st}" + (" pipelined" if pipe else "")
            try:
                times, first, out = _time_calls(lambda: A.launch_kernel(kernel, x, name, BLOCK_M=bm, BLOCK_N=bn, PIPELINE_QK=pipe,
                                                                        num_warps=w, num_stages=st), dev, 1, reps)  # fmt: skip
                ms = statistics.median(times)
                res["configs"][key] = {"kernel_ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1),
                                       "compile_ms": round(first, 1), "rel_err_vs_cudnn": round(_rel_err(out, ref), 5)}  # fmt: skip
            except Exception as exc:
                res["configs"][key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            log(f"{key}: {res['configs'][key]}")
        del x
    return res


def _uncompile(model: Any) -> None:
    from newsmotion_engine.accel.compile import _STEP_HOOK

    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            m._compiled_call_impl = None
    hook = getattr(model, _STEP_HOOK, None)
    if hook is not None:
        hook.remove()
        setattr(model, _STEP_HOOK, None)


def _reset_processors(model: Any) -> None:
    from diffusers.models.transformers.transformer_wan_animate import WanAttnProcessor

    for block in model.blocks:
        block.attn1.set_processor(WanAttnProcessor())
    model.set_attention_backend("native")


FORWARD_VARIANTS = ("stock_bf16", "attention_cudnn", "attention_fp8_triton", "compile_blocks", "fp8_linears", "all",
                    "all_cudnn", "all_cudagraphs")  # fmt: skip


def _bench_forward(opts: Any, width: int, height: int, frames: int, warmup: int, reps: int, log: Log,
                   variants: tuple[str, ...] | None = None, attention_variants: tuple[str, ...] | None = None,
                   deadline: float = math.inf, save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """One forward at the full segment shape per variant (``FORWARD_VARIANTS``; stock first).

    ``all``: FP8 linears + the fastest accurate attention (the selected FP8 kernel variant when it
    beats cuDNN in the micro-bench, else cuDNN) + regional compile; ``all_cudnn``: the same with
    cuDNN attention; ``all_cudagraphs``: ``all`` with CUDA graphs. A variant that would start
    after ``deadline`` (``time.perf_counter()`` seconds) is skipped, so a run ends inside its limit.
    """
    import torch

    from newsmotion_engine.accel.attention import fp8_attention_supported, set_attention
    from newsmotion_engine.accel.compile import compile_blocks
    from newsmotion_engine.accel.fp8 import fp8_compute_supported, module_weight_gib, quantize_fp8
    from newsmotion_engine.render.wan_animate.components import build_transformer, resolve_device, torch_dtype

    variants = tuple(variants or FORWARD_VARIANTS)
    attention_variants = tuple(attention_variants) if attention_variants else None
    unknown = set(variants) - set(FORWARD_VARIANTS)
    if unknown:
        raise ValueError(f"forward variants {sorted(unknown)}: use {', '.join(FORWARD_VARIANTS)}")
    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    cfg = dict(opts.preset_spec.transformer)
    t0 = time.perf_counter()
    model = build_transformer(opts, device, dtype)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    log(f"built {opts.preset} transformer: {n_params / 1e9:.2f}B params, {module_weight_gib(model):.2f} GiB in {build_s:.1f}s")
    inputs = forward_inputs(cfg, width, height, frames, device, dtype)
    tokens = _tokens(cfg, width, height, frames)
    result: dict[str, Any] = {"tokens": tokens, "params_b": round(n_params / 1e9, 3), "build_s": round(build_s, 1), "variants": {}}
    heads, head_dim = cfg["num_attention_heads"], cfg["attention_head_dim"]
    micro = _attention_bench(tokens, heads, head_dim, device, log, reps=max(3, reps), variants=attention_variants)
    result["attention_microbench"] = micro
    fp8_variant = micro.get("selected")
    # The FP8 kernel is used only when it is accurate (error under the threshold) AND beats cuDNN.
    best_attn = "fp8-triton" if micro.get("selected_beats_cudnn") else ("cudnn" if device.type == "cuda" else "sdpa")
    result["best_attention"] = best_attn
    result["best_attention_variant"] = fp8_variant if best_attn == "fp8-triton" else None
    state = {"fp8": None}

    def ensure_fp8() -> dict[str, Any]:
        if state["fp8"] is None:  # destructive: every later variant is FP8
            state["fp8"] = quantize_fp8(model, mode="auto")
        return state["fp8"]

    def attn(kind: str, variant: str | None = None) -> dict[str, Any]:
        return set_attention(model, kind, variant=variant) if kind == "fp8-triton" else set_attention(model, kind)

    def reset() -> None:
        _uncompile(model)
        torch._dynamo.reset()
        _reset_processors(model)

    def run(name: str, setup: Callable[[], dict[str, Any]] | None = None, warm: int = warmup) -> None:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        row: dict[str, Any] = {}
        if time.perf_counter() > deadline:
            result["variants"][name] = {"skipped": "device-time budget of this run spent"}
            log(f"forward {name}: skipped (budget)")
            return
        try:
            if setup is not None:
                row["setup"] = setup()
            _peak_reset(device)
            with torch.no_grad():
                times, first, out = _time_calls(lambda: model(**inputs)[0], device, warm, reps)
            row.update(
                forward_ms=round(statistics.median(times), 1),
                forward_ms_all=[round(t, 1) for t in times],
                first_call_ms=round(first, 1),
                weight_gib=round(module_weight_gib(model), 3),
                peak_vram_gib=_peak(device),
                finite=bool(torch.isfinite(out).all()),
            )
            if name == "stock_bf16":
                result["_ref"] = out
            elif "_ref" in result:
                row["rel_err_vs_stock"] = round(_rel_err(out, result["_ref"]), 5)
            stock = result["variants"].get("stock_bf16", {}).get("forward_ms")
            if stock:
                row["speedup_vs_stock"] = round(stock / row["forward_ms"], 3)
            if "compile" in (row.get("setup") or {}):
                row["compile_s"] = round(max(0.0, first - row["forward_ms"]) / 1e3, 1)
            del out
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            reset()
        result["variants"][name] = row
        log(f"forward {name}: {row}")
        if save is not None:
            save({k: v for k, v in result.items() if k != "_ref"})

    fp8_attn_ok, fp8_attn_why = fp8_attention_supported()
    for name in variants:
        if name == "stock_bf16":
            run(name)
        elif name == "attention_cudnn":
            run(name, lambda: attn("cudnn"))
        elif name == "attention_fp8_triton":
            if fp8_attn_ok and fp8_variant:
                run(name, lambda: attn("fp8-triton", fp8_variant))
            else:
                result["variants"][name] = {"skipped": fp8_attn_why if not fp8_attn_ok else "no FP8 kernel variant under the error threshold"}
        elif name == "compile_blocks":
            if device.type == "cuda":
                run(name, lambda: {"compile": compile_blocks(model)})
            else:
                result["variants"][name] = {"skipped": "compile timing needs CUDA"}
        elif name == "fp8_linears":
            run(name, ensure_fp8)
        else:  # all, all_cudnn, all_cudagraphs
            kind = ("cudnn" if device.type == "cuda" else "sdpa") if name == "all_cudnn" else best_attn
            if name == "all_cudnn" and kind == best_attn:
                result["variants"][name] = {"skipped": "same as 'all' (cuDNN is the best attention here)"}
                continue
            graphs = name == "all_cudagraphs"
            if graphs and device.type != "cuda":
                result["variants"][name] = {"skipped": "CUDA graphs need CUDA"}
                continue

            def all_setup(kind: str = kind, graphs: bool = graphs) -> dict[str, Any]:
                out = {"fp8": ensure_fp8(), "attention": attn(kind, fp8_variant)}
                if device.type == "cuda":
                    out["compile"] = compile_blocks(model, cudagraphs=graphs)
                return out

            # CUDA graphs: call 1 warms up, call 2 records, later calls replay.
            run(name, all_setup, warm=max(warmup, 2) if graphs else warmup)
    fp8_ok, fp8_why = fp8_compute_supported(device)
    result["fp8_compute"] = {"supported": fp8_ok, "why": fp8_why}
    ref = result.pop("_ref", None)
    del ref, model, inputs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    v = result["variants"]
    stock = v.get("stock_bf16", {}).get("forward_ms")
    best = v.get("all", {}).get("forward_ms")
    result["forward_speedup_vs_stock"] = round(stock / best, 3) if stock and best else None
    return result


def _psnr_ssim(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    psnr = float(np.mean([peak_signal_noise_ratio(x, y, data_range=255) for x, y in zip(a, b)]))
    ssim = float(np.mean([structural_similarity(x, y, channel_axis=2, data_range=255) for x, y in zip(a[::8], b[::8])]))
    return round(psnr, 2), round(ssim, 4)


# Our render variants for the CFG comparison: each runs on the same accelerated transformer (FP8,
# attention, compile, tiled VAE, FFN chunks applied once); they differ in TeaCache and CFG strategy.
RENDER_VARIANTS: dict[str, dict[str, Any]] = {
    # Every acceleration: TeaCache at its default threshold, CFG window [0, 0.8) and one-pass CFG
    # with momentum (two passes every 2nd step, cached delta with momentum 0.5 between).
    "all": {"teacache": 0.15, "cfg_start": 0.0, "cfg_stop": 0.8, "cfg_every": 2, "cfg_momentum": 0.5},
    # Kernels only: plain CFG every step, no TeaCache (separates kernel speed from skipped work).
    "kernels_only": {"teacache": 0.0, "cfg_start": 0.0, "cfg_stop": 1.0, "cfg_every": 1, "cfg_momentum": 0.0},
}


def _bench_render(opts: Any, width: int, height: int, frames: int, steps: int, log: Log, accel: dict[str, Any],
                  guidance_scale: float = 1.0, variants: dict[str, dict[str, Any]] | list[str] | None = None,
                  warmup_steps: int = 2, deadline: float = math.inf,
                  save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Stock WanAnimatePipeline vs our cached-input loop, one segment, same inputs and noise.

    ``accel`` (FP8, attention, compile, VAE tiling, FFN chunks) is applied once after the stock
    run; then each of ``variants`` (TeaCache threshold and CFG window / period / momentum; default:
    the ``"all"`` entry of :data:`RENDER_VARIANTS`) renders the same segment. With ``compile`` on,
    a ``warmup_steps``-step render (both CFG passes) pays compilation and autotuning first.
    """
    import torch
    from diffusers import UniPCMultistepScheduler, WanAnimatePipeline
    from PIL import Image

    from newsmotion_engine.accel.cfg import CFGConfig, CFGStrategy
    from newsmotion_engine.accel.teacache import TeaCacheConfig, apply_teacache, remove_teacache, reset_teacache, teacache_stats
    from newsmotion_engine.render.wan_animate import caches as C
    from newsmotion_engine.render.wan_animate.backend import apply_accelerations
    from newsmotion_engine.render.wan_animate.components import (
        RenderComponents,
        build_transformer,
        build_vae,
        load_image_encoder,
        load_text_encoder,
        model_identity,
        resolve_device,
        torch_dtype,
    )
    from newsmotion_engine.render.wan_animate.denoise import SegmentInputs, decode_latents, denoise_segment

    if variants is None:
        variants = {"all": RENDER_VARIANTS["all"]}
    elif not isinstance(variants, dict):  # names of RENDER_VARIANTS entries
        variants = {n: RENDER_VARIANTS[n] for n in variants}
    use_cfg = guidance_scale > 1.0
    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    vae_dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    t0 = time.perf_counter()
    transformer = build_transformer(opts, device, dtype)
    vae = build_vae(opts, device, vae_dtype)
    proc, img_enc = load_image_encoder(opts, device)
    img_enc = img_enc.to(dtype)
    tok, txt_enc = load_text_encoder(opts, device)
    scheduler = UniPCMultistepScheduler(**opts.preset_spec.scheduler)
    log(f"render components built in {time.perf_counter() - t0:.1f}s")
    res: dict[str, Any] = {"steps": steps, "frames": frames, "size": [width, height], "guidance_scale": guidance_scale,
                           "tokens": _tokens(dict(opts.preset_spec.transformer), width, height, frames)}  # fmt: skip

    # Inputs: a synthetic reference image, pose video (drawn loop) and face video.
    from newsmotion_engine.guidance.draw import draw_pose
    from newsmotion_engine.guidance.palette import author_loop

    kp = author_loop("welcome")
    pose_frames = np.stack([draw_pose(kp[i % len(kp)], width, height) for i in range(frames)])
    rng = np.random.default_rng(0)
    ref = np.full((height, width, 3), (0, 177, 64), np.uint8)
    ref[height // 4 :, width // 4 : 3 * width // 4] = rng.integers(60, 200, (height - height // 4, 3 * width // 4 - width // 4, 3), dtype=np.uint8)
    fsize = opts.preset_spec.transformer["motion_encoder_size"]
    face_frames = np.stack([np.roll(np.asarray(Image.fromarray(ref).resize((fsize, fsize))), i, axis=1) for i in range(frames)])
    t_lat = (frames - 1) // 4 + 1
    h, w = height // 8, width // 8
    noise = torch.randn((1, 16, t_lat + 1, h, w), generator=torch.Generator("cpu").manual_seed(0))

    # Text embeddings (timed; the stock end-to-end time includes them).
    t0 = time.perf_counter()
    emb = C.encode_prompts(tok, txt_enc, ["a news anchor waves to the camera", ""], device)
    _sync(device)
    text_s = time.perf_counter() - t0
    del txt_enc
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()

    pipe = WanAnimatePipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=scheduler, image_processor=proc,
                              image_encoder=img_enc, transformer=transformer)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    stock_calls = {"n": 0}
    counter = transformer.register_forward_pre_hook(lambda *_: stock_calls.__setitem__("n", stock_calls["n"] + 1))
    _peak_reset(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        stock = pipe(image=Image.fromarray(ref), pose_video=[Image.fromarray(f) for f in pose_frames],
                     face_video=[Image.fromarray(f) for f in face_frames], prompt_embeds=emb[0:1].to(device, dtype),
                     negative_prompt_embeds=emb[1:2].to(device, dtype) if use_cfg else None,
                     height=height, width=width, segment_frame_length=frames, num_inference_steps=steps,
                     guidance_scale=guidance_scale, latents=noise.to(device), output_type="np").frames[0]  # fmt: skip
    _sync(device)
    stock_s = time.perf_counter() - t0
    counter.remove()
    stock_u8 = (np.clip(stock, 0, 1) * 255).round().astype(np.uint8)
    res["stock"] = {"pipeline_s": round(stock_s, 2), "text_encode_s": round(text_s, 2), "end_to_end_s": round(stock_s + text_s, 2),
                    "peak_vram_gib": _peak(device), "transformer_forwards": stock_calls["n"]}  # fmt: skip
    log(f"render stock: {res['stock']}")
    if save is not None:
        save(res)

    # Our caches (built once; timed separately: they are not paid per render).
    t0 = time.perf_counter()
    pose_lat = C.vae_encode(vae, C.to_video_tensor(pose_frames), device)
    cond0 = torch.cat([C.i2v_mask(t_lat, h, w, 0), C.vae_encode(vae, torch.zeros(1, 3, frames, height, width), device)], dim=1)
    ref_lat = torch.cat([C.i2v_mask(1, h, w, 1), C.vae_encode(vae, C.to_video_tensor(ref[None]), device)], dim=1)
    tokens = C.encode_image_tokens(proc, img_enc, ref, device)
    _sync(device)
    res["cache_build_s"] = round(time.perf_counter() - t0, 2)
    del pipe, img_enc
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()

    comps = RenderComponents(transformer, vae, dict(opts.preset_spec.scheduler), model_identity(opts, device), device, dtype, vae_dtype)
    t0 = time.perf_counter()
    report = apply_accelerations(comps, opts.__class__(**{**_opts_dict(opts), **accel, "teacache": 0.0}))
    res["accel_apply_s"] = round(time.perf_counter() - t0, 2)
    res["accel_report"] = report
    inputs = SegmentInputs(
        reference_latents=torch.cat([ref_lat, cond0], dim=2).to(device),
        pose_latents=pose_lat.to(device, dtype),
        face_pixels=C.to_video_tensor(face_frames).to(device, dtype),
        prompt_embeds=emb[0:1].to(device, dtype),
        negative_embeds=emb[1:2].to(device, dtype) if use_cfg else None,
        image_embeds=tokens.to(device, dtype),
    )
    calls = {"n": 0}
    transformer.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))

    def ours(n_steps: int, cfg: CFGConfig) -> tuple[np.ndarray, float, float, dict[str, Any]]:
        strategy = CFGStrategy(cfg, n_steps)
        ta = time.perf_counter()
        with torch.no_grad():
            lat = denoise_segment(transformer, comps.new_scheduler(), noise.to(device), inputs, steps=n_steps, cfg=strategy, dtype=dtype)
        _sync(device)
        tb = time.perf_counter()
        video = decode_latents(vae, lat)
        return video, tb - ta, time.perf_counter() - tb, strategy.stats()

    if device.type == "cuda" and accel.get("compile", "off") != "off":
        t0 = time.perf_counter()
        try:
            ours(min(warmup_steps, steps), CFGConfig(scale=guidance_scale))  # compile + autotune, both CFG passes
        except Exception as exc:
            res["warmup_error"] = f"{type(exc).__name__}: {exc}"[:500]
        res["warmup_render_s"] = round(time.perf_counter() - t0, 2)
        res["warmup_steps"] = min(warmup_steps, steps)
    res["variants"] = {}
    for name, var in variants.items():
        if time.perf_counter() > deadline:
            res["variants"][name] = {"skipped": "device-time budget of this run spent"}
            continue
        cfg = CFGConfig(scale=guidance_scale, start=var.get("cfg_start", 0.0), stop=var.get("cfg_stop", 1.0),
                        every=var.get("cfg_every", 1), momentum=var.get("cfg_momentum", 0.0))  # fmt: skip
        tc = var.get("teacache", 0.0)
        if tc > 0:
            apply_teacache(transformer, TeaCacheConfig(threshold=tc, warmup_steps=var.get("teacache_warmup", 1)))
        reset_teacache(transformer)
        calls["n"] = 0
        _peak_reset(device)
        t0 = time.perf_counter()
        try:
            video, den_s, dec_s, cfg_stats = ours(steps, cfg)
        except Exception as exc:  # one failing variant is a result; the others still run
            res["variants"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            remove_teacache(transformer)
            log(f"render ours[{name}]: {res['variants'][name]}")
            continue
        e2e = time.perf_counter() - t0
        tstats = teacache_stats(transformer)
        remove_teacache(transformer)
        psnr, ssim = _psnr_ssim(video, stock_u8)
        row = {"end_to_end_s": round(e2e, 2), "denoise_s": round(den_s, 2), "decode_s": round(dec_s, 2),
               "peak_vram_gib": _peak(device), "psnr_vs_stock": psnr, "ssim_vs_stock": ssim,
               "speedup_vs_stock": round((stock_s + text_s) / e2e, 3), "settings": {**accel, **var},
               "transformer_calls": calls["n"], "forwards_run": calls["n"] - tstats["skipped"],
               "forwards_skipped": tstats["skipped"], "cfg": cfg_stats, "teacache": tstats if tc > 0 else None}  # fmt: skip
        res["variants"][name] = row
        log(f"render ours[{name}]: {row}")
        if save is not None:
            save(res)
    first = next((r for r in res["variants"].values() if "end_to_end_s" in r), None)
    if first is not None:  # the first variant is the headline ("ours")
        res["ours"] = first
        res["render_speedup_vs_stock"] = first["speedup_vs_stock"]
    return res


def _opts_dict(opts: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if f.name != "extra"}


def bench_gpu(
    preset: str = "14b",
    *,
    part: str = "forward",
    width: int = 720,
    height: int = 1280,
    frames: int = 77,
    steps: int = 4,
    warmup: int = 1,
    reps: int = 2,
    device: str = "auto",
    render_accel: dict[str, Any] | None = None,
    guidance_scale: float = 1.0,
    render_variants: dict[str, dict[str, Any]] | list[str] | None = None,
    forward_variants: tuple[str, ...] | None = None,
    attention_variants: tuple[str, ...] | None = None,
    budget_s: float | None = None,
    render_size: tuple[int, int, int] | None = None,
    forward_budget_s: float | None = None,
    json_path: str | Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run the GPU benchmark (see the module docstring) and return (and optionally write) the
    result dict. ``part``: ``"forward"``, ``"render"`` or ``"all"``.

    ``forward_variants`` (default all of ``FORWARD_VARIANTS``) and ``attention_variants`` (FP8
    kernel variants for the micro-bench, default all) narrow the forward part;
    ``guidance_scale``, ``steps`` and ``render_variants`` (default ``RENDER_VARIANTS["all"]``)
    shape the render part. ``budget_s``: variants that would start after this many seconds are
    skipped (recorded as such). The JSON is rewritten after every variant, so a run cut short
    keeps what it measured. ``render_size`` ``(width, height, frames)``: the render part's shape
    when it differs from the forward's (``part="all"``; ``forward_budget_s`` then caps the forward
    part's own variant starts); ``render_accel["attention"] == "best"``
    takes the forward part's measured choice (the FP8 kernel variant only when accurate and faster
    than cuDNN, else cuDNN).

    Keys: ``weights`` ("random weights" for presets), ``device``, ``versions``, ``forward``
    (variants, attention micro-bench), ``forward_speedup_vs_stock`` (all accelerations vs stock
    bf16 at the same tokens), ``render`` (stock vs ours, PSNR/SSIM), ``created_at``.
    """
    import diffusers
    import torch

    from newsmotion_engine.render.wan_animate.config import RANDOM_WEIGHTS_LABEL, WanAnimateOptions

    if part not in ("forward", "render", "all"):
        raise ValueError(f"part {part!r}: use forward, render or all")
    opts = WanAnimateOptions(preset=preset, device=device)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    result: dict[str, Any] = {
        "bench": "gpu",
        "weights": RANDOM_WEIGHTS_LABEL,
        "note": "random weights: output errors and PSNR/SSIM measure numerical drift only, not quality",
        "preset": preset,
        "shape": {"width": width, "height": height, "frames": frames},
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                     "cuda": torch.version.cuda, "python": platform.python_version()},  # fmt: skip
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    t0 = time.perf_counter()
    deadline = t0 + budget_s if budget_s else math.inf

    def write() -> None:
        if json_path is not None:
            result["wall_s"] = round(time.perf_counter() - t0, 1)
            p = Path(json_path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(result, indent=2, default=str) + "\n")

    def saver(key: str) -> Callable[[dict[str, Any]], None]:
        def save(partial: dict[str, Any]) -> None:
            result[key] = partial
            write()

        return save

    if part in ("forward", "all"):
        result["forward"] = _bench_forward(opts, width, height, frames, warmup, reps, log, variants=forward_variants,
                                           attention_variants=attention_variants,
                                           deadline=min(deadline, t0 + forward_budget_s if forward_budget_s else math.inf),
                                           save=saver("forward"))  # fmt: skip
        result["forward_speedup_vs_stock"] = result["forward"]["forward_speedup_vs_stock"]
        write()
    if part in ("render", "all"):
        accel = render_accel if render_accel is not None else (
            {"fp8": "auto", "attention": "cudnn", "compile": "blocks", "vae_tiling": True, "ffn_chunks": 8}
            if dev.type == "cuda" else {"fp8": "auto", "vae_tiling": True, "ffn_chunks": 2}
        )  # fmt: skip
        if accel.get("attention") == "best":
            # The FP8 kernel only where the forward part ran it compiled and it beat cuDNN there.
            fwd = result.get("forward", {})
            fv = fwd.get("variants", {})
            fp8_ms, cudnn_ms = fv.get("all", {}).get("forward_ms"), fv.get("all_cudnn", {}).get("forward_ms")
            use_fp8 = fwd.get("best_attention") == "fp8-triton" and fp8_ms is not None and (cudnn_ms is None or fp8_ms < cudnn_ms)
            accel = {**accel, "attention": "fp8-triton" if use_fp8 else ("cudnn" if dev.type == "cuda" else "sdpa"),
                     "fp8_attention_variant": fwd.get("best_attention_variant") if use_fp8 else None}  # fmt: skip
        rw, rh, rf = render_size or (width, height, frames)
        result["render"] = _bench_render(opts, rw, rh, rf, steps, log, accel, guidance_scale=guidance_scale,
                                         variants=render_variants, deadline=deadline, save=saver("render"))  # fmt: skip
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    write()
    return result
