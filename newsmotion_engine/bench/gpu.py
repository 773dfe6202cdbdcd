"""GPU benchmark of the ``wan-animate`` backend against stock diffusers (one run, every variant).

Two parts, each fitting one 10-minute device command:

- ``part="forward"``: one ``WanAnimateTransformer3DModel`` forward at the full segment shape
  (default 14B, 77 frames at 720x1280 = 75.6k tokens): stock bf16 (diffusers defaults: SDPA), then
  each acceleration alone (cuDNN attention, FP8 Triton attention, regional compile, FP8 linears)
  and all together. Per variant: per-forward ms (median of ``reps`` after ``warmup``), compile s,
  weights GiB, peak VRAM GiB, output relative error vs the stock output. Plus an attention
  micro-benchmark at the same shape (SDPA flash / cuDNN / FP8 Triton, error vs bf16 flash).
- ``part="render"``: one segment end to end at ``steps`` steps: the stock ``WanAnimatePipeline``
  (prompt embeddings passed in, because the pipeline's prompt cleaning needs ``ftfy``; the text
  encoding is timed separately and added to its end-to-end time) vs our cached-input loop with all
  accelerations; same inputs, same initial noise; PSNR/SSIM of our frames vs the stock frames.

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


def _attention_bench(tokens: int, heads: int, dim: int, device: Any, log: Log, reps: int) -> dict[str, Any]:
    """SDPA flash / cuDNN / FP8 Triton at [1, tokens, heads, dim]; error vs SDPA flash (bf16)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from newsmotion_engine.accel.attention import fp8_attention, fp8_attention_supported

    res: dict[str, Any] = {"shape": [1, tokens, heads, dim]}
    if device.type != "cuda":
        return {**res, "skipped": "needs CUDA"}
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(1, tokens, heads, dim, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * tokens * tokens * heads * dim
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    ref = None
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", None)):
        if backend is None:
            continue
        try:
            with sdpa_kernel(backend):
                times, _, out = _time_calls(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt), device, 1, reps)
            ms = statistics.median(times)
            out = out.transpose(1, 2)
            if ref is None:
                ref = out
            res[name] = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "rel_err_vs_flash": round(_rel_err(out, ref), 5)}
        except Exception as exc:  # a backend missing on this build is a result, not a crash
            res[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        log(f"attention {name}: {res[name]}")
    ok, why = fp8_attention_supported()
    if ok:
        try:
            times, first, out = _time_calls(lambda: fp8_attention(q, k, v), device, 2, reps)
            ms = statistics.median(times)
            res["fp8_triton"] = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "first_call_ms": round(first, 1),
                                 "rel_err_vs_flash": round(_rel_err(out, ref), 5) if ref is not None else None,
                                 "finite": bool(torch.isfinite(out).all())}  # fmt: skip
        except Exception as exc:
            res["fp8_triton"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    else:
        res["fp8_triton"] = {"skipped": why}
    log(f"attention fp8_triton: {res['fp8_triton']}")
    del q, k, v, qt, kt, vt, ref
    return res


def _uncompile(model: Any) -> None:
    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            m._compiled_call_impl = None


def _reset_processors(model: Any) -> None:
    from diffusers.models.transformers.transformer_wan_animate import WanAttnProcessor

    for block in model.blocks:
        block.attn1.set_processor(WanAttnProcessor())
    model.set_attention_backend("native")


def _bench_forward(opts: Any, width: int, height: int, frames: int, warmup: int, reps: int, log: Log) -> dict[str, Any]:
    import torch

    from newsmotion_engine.accel.attention import fp8_attention_supported, set_attention
    from newsmotion_engine.accel.compile import compile_blocks
    from newsmotion_engine.accel.fp8 import fp8_compute_supported, module_weight_gib, quantize_fp8
    from newsmotion_engine.render.wan_animate.components import build_transformer, resolve_device, torch_dtype

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
    result["attention_microbench"] = _attention_bench(tokens, heads, head_dim, device, log, reps=max(3, reps))
    fp8_attn_err = result["attention_microbench"].get("fp8_triton", {}).get("rel_err_vs_flash")

    def run(name: str, setup: Callable[[], dict[str, Any]] | None = None, teardown: Callable[[], None] | None = None) -> None:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        row: dict[str, Any] = {}
        try:
            if setup is not None:
                row["setup"] = setup()
            _peak_reset(device)
            with torch.no_grad():
                times, first, out = _time_calls(lambda: model(**inputs)[0], device, warmup, reps)
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
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            if teardown is not None:
                teardown()
        result["variants"][name] = row
        log(f"forward {name}: {row}")

    run("stock_bf16")
    run("attention_cudnn", lambda: set_attention(model, "cudnn"), lambda: _reset_processors(model))
    fp8_attn_ok, fp8_attn_why = fp8_attention_supported()
    if fp8_attn_ok:
        run("attention_fp8_triton", lambda: set_attention(model, "fp8-triton"), lambda: _reset_processors(model))
    else:
        result["variants"]["attention_fp8_triton"] = {"skipped": fp8_attn_why}
    if device.type == "cuda":
        run("compile_blocks", lambda: {"compile": compile_blocks(model)}, lambda: (_uncompile(model), torch._dynamo.reset()))
    else:
        result["variants"]["compile_blocks"] = {"skipped": "compile timing needs CUDA"}
    fp8_ok, fp8_why = fp8_compute_supported(device)
    run("fp8_linears", lambda: quantize_fp8(model, mode="auto"))  # destructive: every later variant is FP8
    # All together: FP8 linears + the fastest measured attention + regional compile.
    v = result["variants"]
    # The FP8 kernel is used only when faster AND its measured error vs bf16 attention is small.
    best_attn = "cudnn"
    fp8_fast = v.get("attention_fp8_triton", {}).get("forward_ms", math.inf) < v.get("attention_cudnn", {}).get("forward_ms", math.inf)
    if fp8_fast and fp8_attn_err is not None and fp8_attn_err < MAX_FP8_ATTENTION_ERR:
        best_attn = "fp8-triton"

    def all_setup() -> dict[str, Any]:
        out = {"attention": set_attention(model, best_attn)}
        if device.type == "cuda":
            out["compile"] = compile_blocks(model)
        return out

    run("all", all_setup, lambda: model.set_attention_backend("native"))  # the active backend is process-global
    result["fp8_compute"] = {"supported": fp8_ok, "why": fp8_why}
    result["best_attention"] = best_attn
    ref = result.pop("_ref", None)
    del ref, model, inputs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    stock = v.get("stock_bf16", {}).get("forward_ms")
    best = v.get("all", {}).get("forward_ms")
    result["forward_speedup_vs_stock"] = round(stock / best, 3) if stock and best else None
    return result


def _psnr_ssim(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    psnr = float(np.mean([peak_signal_noise_ratio(x, y, data_range=255) for x, y in zip(a, b)]))
    ssim = float(np.mean([structural_similarity(x, y, channel_axis=2, data_range=255) for x, y in zip(a[::8], b[::8])]))
    return round(psnr, 2), round(ssim, 4)


def _bench_render(opts: Any, width: int, height: int, frames: int, steps: int, log: Log, accel: dict[str, Any]) -> dict[str, Any]:
    """Stock WanAnimatePipeline vs our cached-input loop, one segment, same inputs and noise."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanAnimatePipeline
    from PIL import Image

    from newsmotion_engine.accel.cfg import CFGConfig, CFGStrategy
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
    res: dict[str, Any] = {"steps": steps, "frames": frames, "size": [width, height], "guidance_scale": 1.0}

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
    _peak_reset(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        stock = pipe(image=Image.fromarray(ref), pose_video=[Image.fromarray(f) for f in pose_frames],
                     face_video=[Image.fromarray(f) for f in face_frames], prompt_embeds=emb[0:1].to(device, dtype),
                     height=height, width=width, segment_frame_length=frames, num_inference_steps=steps,
                     guidance_scale=1.0, latents=noise.to(device), output_type="np").frames[0]  # fmt: skip
    _sync(device)
    stock_s = time.perf_counter() - t0
    stock_u8 = (np.clip(stock, 0, 1) * 255).round().astype(np.uint8)
    res["stock"] = {"pipeline_s": round(stock_s, 2), "text_encode_s": round(text_s, 2), "end_to_end_s": round(stock_s + text_s, 2),
                    "peak_vram_gib": _peak(device)}  # fmt: skip
    log(f"render stock: {res['stock']}")

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
    report = apply_accelerations(comps, opts.__class__(**{**_opts_dict(opts), **accel}))
    res["accel_apply_s"] = round(time.perf_counter() - t0, 2)
    res["accel_report"] = report
    inputs = SegmentInputs(
        reference_latents=torch.cat([ref_lat, cond0], dim=2).to(device),
        pose_latents=pose_lat.to(device, dtype),
        face_pixels=C.to_video_tensor(face_frames).to(device, dtype),
        prompt_embeds=emb[0:1].to(device, dtype),
        negative_embeds=None,
        image_embeds=tokens.to(device, dtype),
    )

    def ours() -> tuple[np.ndarray, float, float]:
        ta = time.perf_counter()
        with torch.no_grad():
            lat = denoise_segment(transformer, comps.new_scheduler(), noise.to(device), inputs, steps=steps,
                                  cfg=CFGStrategy(CFGConfig(), steps), dtype=dtype)  # fmt: skip
        _sync(device)
        tb = time.perf_counter()
        video = decode_latents(vae, lat)
        return video, tb - ta, time.perf_counter() - tb

    if device.type == "cuda" and accel.get("compile", "off") != "off":
        t0 = time.perf_counter()
        ours()  # warm: compile (paid once per warm resource) and autotune
        res["warmup_render_s"] = round(time.perf_counter() - t0, 2)
    _peak_reset(device)
    t0 = time.perf_counter()
    video, den_s, dec_s = ours()
    e2e = time.perf_counter() - t0
    psnr, ssim = _psnr_ssim(video, stock_u8)
    res["ours"] = {"end_to_end_s": round(e2e, 2), "denoise_s": round(den_s, 2), "decode_s": round(dec_s, 2),
                   "peak_vram_gib": _peak(device), "psnr_vs_stock": psnr, "ssim_vs_stock": ssim,
                   "accel": accel}  # fmt: skip
    res["render_speedup_vs_stock"] = round((stock_s + text_s) / e2e, 3)
    log(f"render ours: {res['ours']}")
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
    json_path: str | Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run the GPU benchmark (see the module docstring) and return (and optionally write) the
    result dict. ``part``: ``"forward"``, ``"render"`` or ``"all"``.

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
    if part in ("forward", "all"):
        result["forward"] = _bench_forward(opts, width, height, frames, warmup, reps, log)
        result["forward_speedup_vs_stock"] = result["forward"]["forward_speedup_vs_stock"]
    if part in ("render", "all"):
        accel = render_accel if render_accel is not None else (
            {"fp8": "auto", "attention": "cudnn", "compile": "blocks", "vae_tiling": True, "ffn_chunks": 8}
            if dev.type == "cuda" else {"fp8": "auto", "vae_tiling": True, "ffn_chunks": 2}
        )  # fmt: skip
        result["render"] = _bench_render(opts, width, height, frames, steps, log, accel)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    if json_path is not None:
        p = Path(json_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
