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
  ``ftfy``; the text encoding is timed separately and added to its end-to-end time) vs the shipped
  backend path: ``WanAnimateBackend`` loads the components, its ``prepare_guidance`` /
  ``prepare_persona`` build the sub-caches, the base accelerations are applied through the
  registry, and each ``RENDER_VARIANTS`` entry (TeaCache, CFG window / one-pass momentum CFG) is
  applied, rendered with :func:`~newsmotion_engine.render.wan_animate.segment.render_segment`
  (the function ``frames()`` calls per segment) and removed again; same inputs, same initial
  noise; PSNR/SSIM of our frames vs the stock frames, transformer forwards run / skipped, CFG
  passes and FLOPs saved.

Variants are tuples of the typed acceleration configs the product takes
(:mod:`newsmotion_engine.accel`), applied and removed through the acceleration registry; JSON
callers (``bench/device_gpu.sh``) may give flat option mappings, parsed by the same parser as
the CLI's ``-o``.

With random weights (the presets) errors and PSNR measure numerical drift only; every result
says "random weights".

Example::

    result = bench_gpu(preset="14b", part="forward")
    result["forward_speedup_vs_stock"]
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import hashlib
import json
import math
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from newsmotion_engine.accel.attention import Attention
from newsmotion_engine.accel.cfg import CFGSchedule
from newsmotion_engine.accel.compile import Compile
from newsmotion_engine.accel.fp8 import Fp8Linears
from newsmotion_engine.accel.memory import FfnChunks, VaeTiling
from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.accel.teacache import TeaCache

__all__ = ["FORWARD_VARIANTS", "RENDER_VARIANTS", "backend_smoke", "bench_gpu", "forward_variant_configs"]

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


class Skip(NamedTuple):
    """A forward variant that cannot run here, and why."""

    reason: str


FORWARD_VARIANTS = ("stock_bf16", "attention_cudnn", "attention_fp8_triton", "compile_blocks", "fp8_linears", "all",
                    "all_cudnn", "all_cudagraphs", "all_sparse50", "all_sparse30")  # fmt: skip
# The sparse variants (experimental, accel/sparse.py) are measured only when asked for by name.
DEFAULT_FORWARD_VARIANTS = FORWARD_VARIANTS[:8]


def forward_variant_configs(best_attention: Attention | None, fp8_kernel: Attention | None, *, cuda: bool,
                            fp8_kernel_why: str = "no FP8 kernel variant under the error threshold") -> dict[str, tuple[AccelConfig, ...] | Skip]:  # fmt: skip
    """The configs of each :data:`FORWARD_VARIANTS` entry, once the attention micro-benchmark has
    picked ``best_attention`` (the FP8 kernel when accurate and faster than cuDNN, else cuDNN on
    a GPU; ``None``: stock SDPA) and ``fp8_kernel`` (the accurate FP8 kernel variant, if any).

    FP8 keeps the original weights (``keep_original=True``) so every variant is removed again and
    the next one starts from the stock model. Without CUDA, compile is left out of ``all`` and the
    compile-only variants are skipped (compile timing needs CUDA).
    """
    fp8 = Fp8Linears(mode="auto", keep_original=True)
    best = (best_attention,) if best_attention is not None else ()
    cudnn = Attention("cudnn") if cuda else Attention("sdpa")
    compiled = (Compile(),) if cuda else ()
    table: dict[str, tuple[AccelConfig, ...] | Skip] = {
        "stock_bf16": (),
        "attention_cudnn": (Attention("cudnn"),),
        "attention_fp8_triton": (fp8_kernel,) if fp8_kernel is not None else Skip(fp8_kernel_why),
        "compile_blocks": (Compile(),) if cuda else Skip("compile timing needs CUDA"),
        "fp8_linears": (fp8,),
        "all": (fp8, *best, *compiled),
        "all_cudnn": (fp8, cudnn, *compiled),
        "all_cudagraphs": (fp8, *best, Compile(cudagraphs=True)) if cuda else Skip("CUDA graphs need CUDA"),
    }
    for name, density in (("all_sparse50", 0.5), ("all_sparse30", 0.3)):
        if fp8_kernel is None:
            table[name] = Skip(fp8_kernel_why)
        else:
            from newsmotion_engine.accel.sparse import SparseAttention

            table[name] = (fp8, fp8_kernel, SparseAttention(density=density, variant=fp8_kernel.variant), *compiled)
    if table["all_cudnn"] == table["all"]:
        table["all_cudnn"] = Skip("same as 'all' (cuDNN is the best attention here)")
    return table


@dataclass
class _Transformer:
    """The components the forward variants act on: only a transformer."""

    transformer: Any


def _bench_forward(opts: Any, width: int, height: int, frames: int, warmup: int, reps: int, log: Log,
                   variants: tuple[str, ...] | None = None, attention_variants: tuple[str, ...] | None = None,
                   deadline: float = math.inf, save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """One forward at the full segment shape per variant (``FORWARD_VARIANTS``; stock first), each
    variant's configs applied through the acceleration registry before it and removed after it.

    ``all``: FP8 linears + the fastest accurate attention (the selected FP8 kernel variant when it
    beats cuDNN in the micro-bench, else cuDNN) + regional compile; ``all_cudnn``: the same with
    cuDNN attention; ``all_cudagraphs``: ``all`` with CUDA graphs. A variant that would start
    after ``deadline`` (``time.perf_counter()`` seconds) is skipped, so a run ends inside its limit.
    """
    import torch

    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.attention import fp8_attention_supported
    from newsmotion_engine.accel.fp8 import fp8_compute_supported, module_weight_gib
    from newsmotion_engine.render.wan_animate.components import build_transformer, resolve_device, torch_dtype

    variants = tuple(variants or DEFAULT_FORWARD_VARIANTS)
    attention_variants = tuple(attention_variants) if attention_variants else None
    unknown = set(variants) - set(FORWARD_VARIANTS)
    if unknown:
        raise ValueError(f"forward variants {sorted(unknown)}: use {', '.join(FORWARD_VARIANTS)}")
    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    cfg = dict(opts.preset_spec.transformer)
    t0 = time.perf_counter()
    model = build_transformer(opts, device, dtype)
    comps = _Transformer(model)
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
    cuda = device.type == "cuda"
    # The FP8 kernel is used only when it is accurate (error under the threshold) AND beats cuDNN.
    best_attn = "fp8-triton" if micro.get("selected_beats_cudnn") else ("cudnn" if cuda else "sdpa")
    result["best_attention"] = best_attn
    result["best_attention_variant"] = fp8_variant if best_attn == "fp8-triton" else None
    fp8_attn_ok, fp8_attn_why = fp8_attention_supported()
    fp8_kernel = Attention("fp8-triton", variant=fp8_variant) if fp8_attn_ok and fp8_variant else None
    best = Attention(best_attn, variant=result["best_attention_variant"])
    table = forward_variant_configs(best, fp8_kernel, cuda=cuda,
                                    fp8_kernel_why=fp8_attn_why if not fp8_attn_ok else "no FP8 kernel variant under the error threshold")  # fmt: skip

    def run(name: str, configs: tuple[AccelConfig, ...], warm: int) -> None:
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        row: dict[str, Any] = {}
        if time.perf_counter() > deadline:
            result["variants"][name] = {"skipped": "device-time budget of this run spent"}
            log(f"forward {name}: skipped (budget)")
            return
        applied = None
        try:
            if configs:
                applied = registry.apply_accelerations(comps, configs)
                row["setup"] = applied.report
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
            if applied is not None:
                registry.remove_accelerations(comps, applied)  # the next variant starts from the stock model
        result["variants"][name] = row
        log(f"forward {name}: {row}")
        if save is not None:
            save({k: v for k, v in result.items() if k != "_ref"})

    for name in variants:
        configs = table[name]
        if isinstance(configs, Skip):
            result["variants"][name] = {"skipped": configs.reason}
            continue
        # CUDA graphs: call 1 warms up, call 2 records, later calls replay.
        graphs = any(isinstance(c, Compile) and c.cudagraphs for c in configs)
        run(name, configs, max(warmup, 2) if graphs else warmup)
    fp8_ok, fp8_why = fp8_compute_supported(device)
    result["fp8_compute"] = {"supported": fp8_ok, "why": fp8_why}
    ref = result.pop("_ref", None)
    del ref, model, inputs, comps
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    v = result["variants"]
    stock = v.get("stock_bf16", {}).get("forward_ms")
    best_ms = v.get("all", {}).get("forward_ms")
    result["forward_speedup_vs_stock"] = round(stock / best_ms, 3) if stock and best_ms else None
    return result


def _psnr_ssim(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    psnr = float(np.mean([peak_signal_noise_ratio(x, y, data_range=255) for x, y in zip(a, b)]))
    ssim = float(np.mean([structural_similarity(x, y, channel_axis=2, data_range=255) for x, y in zip(a[::8], b[::8])]))
    return round(psnr, 2), round(ssim, 4)


# Our render variants: each runs on the same accelerated components (the base accelerations:
# FP8, attention, compile, tiled VAE, FFN chunks, applied once); they differ in TeaCache and CFG
# schedule, applied before the variant's render and removed after it.
RENDER_VARIANTS: dict[str, tuple[AccelConfig, ...]] = {
    # Every acceleration: TeaCache at its default threshold, CFG window [0, 0.8) and one-pass CFG
    # with momentum (two passes every 2nd step, cached delta with momentum 0.5 between).
    "all": (TeaCache(threshold=0.15), CFGSchedule(start=0.0, stop=0.8, every=2, momentum=0.5)),
    # Kernels only: plain CFG every step, no TeaCache (separates kernel speed from skipped work).
    "kernels_only": (),
}
BENCH_PROMPT = "a news anchor waves to the camera"


@dataclass
class BenchLoop:
    """A guidance cache stand-in the backend can prepare and render (id, keypoints, folder, source)."""

    loop_id: str
    keypoints: np.ndarray
    path: Path
    metadata: dict[str, Any]


@dataclass
class BenchPersona:
    """A persona cache stand-in: portrait, masks, landmarks, folder, source."""

    persona_id: str
    portrait: np.ndarray
    person_mask: np.ndarray
    face_mask: np.ndarray
    landmarks: np.ndarray
    path: Path
    metadata: dict[str, Any]


def _source(*arrays: np.ndarray) -> dict[str, Any]:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return {"source": {"kind": "bench", "sha256": h.hexdigest()}}


def bench_inputs(width: int, height: int, frames: int, root: Path) -> tuple[BenchLoop, BenchPersona]:
    """The bench's synthetic segment: the ``welcome`` loop's first ``frames`` frames (cyclically)
    and a reference image filling the frame (random texture over chroma green), as cache
    stand-ins under ``root`` that the backend's ``prepare_*`` turn into its sub-caches."""
    from newsmotion_engine.guidance.choreography import author_loop

    kp = author_loop("welcome")
    kp = np.ascontiguousarray(kp[np.arange(frames) % len(kp)])
    rng = np.random.default_rng(0)
    ref = np.full((height, width, 3), (0, 177, 64), np.uint8)
    ref[height // 4 :, width // 4 : 3 * width // 4] = rng.integers(60, 200, (height - height // 4, 3 * width // 4 - width // 4, 3), dtype=np.uint8)
    # A full matte and a portrait the size of the frame: the backend's reference frame is `ref` itself.
    mask = np.full((height, width), 255, np.uint8)
    # wan-animate-2's driving clip: the moving astronaut photo at the model's 24 fps, dropped as the
    # loop's own clip (guidance/driver.py; no persona build, so no mediapipe on the GPU machine).
    # The loop says 24 fps, so the frames asked for are the frames generated (no re-timing).
    from newsmotion_engine.guidance.driver import MODEL_FPS, user_clips_dir
    from newsmotion_engine.samples import write_moving_photo_video

    loop_dir = root / "motion" / "preprocessed" / "welcome"
    loop_dir.mkdir(parents=True, exist_ok=True)
    user_clips_dir(root / "motion").mkdir(parents=True, exist_ok=True)
    write_moving_photo_video(user_clips_dir(root / "motion") / "welcome.mp4", frames=frames + 2, width=width, height=height, fps=MODEL_FPS)
    (root / "persona").mkdir(parents=True, exist_ok=True)
    loop = BenchLoop("welcome", kp, loop_dir, {**_source(kp), "fps": MODEL_FPS})
    persona = BenchPersona("bench", ref, mask, np.zeros_like(mask), kp[0].copy(), root / "persona", _source(ref))
    return loop, persona



def stock_reference(pipe: Any, image_encoder: Any, persona: Any, width: int, height: int) -> Any:
    """The stock ``WanAnimatePipeline``'s reference image, fed as ours is: the persona placed on the
    render canvas (``caches.reference_frame``), and its CLIP tokens from the whole frame stretched to
    224 px (``caches.encode_image_tokens``) instead of the pipeline's centre crop. The tokens are
    computed when the pipeline asks for them, so the stock time still includes the image encode."""
    from PIL import Image

    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.wan_animate import caches as C

    ref = C.reference_frame(persona, width, height, RenderSpec(width=width, height=height).background)
    pipe.encode_image = lambda image, device=None: C.encode_image_tokens(image_encoder, ref, device).to(device)
    return Image.fromarray(ref)

def _bench_render(opts: Any, width: int, height: int, frames: int, steps: int, log: Log, accel: Sequence[AccelConfig],
                  guidance_scale: float = 1.0, variants: Mapping[str, Sequence[AccelConfig]] | None = None,
                  warmup_steps: int = 2, deadline: float = math.inf,
                  save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Stock WanAnimatePipeline vs the shipped backend path, one segment, same inputs and noise.

    ``accel`` (FP8, attention, compile, VAE tiling, FFN chunks) is applied once after the stock
    run; then each of ``variants`` (configs applied before and removed after the variant; default:
    the ``"all"`` entry of :data:`RENDER_VARIANTS`) renders the same segment through
    :func:`~newsmotion_engine.render.wan_animate.segment.render_segment`. With ``compile`` on, a
    ``warmup_steps``-step render (both CFG passes) pays compilation and autotuning first.
    """
    import torch
    from diffusers import WanAnimatePipeline
    from PIL import Image

    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.fp8 import module_weight_gib
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.clip import retargeted_keypoints
    from newsmotion_engine.render.wan_animate import caches as C
    from newsmotion_engine.render.wan_animate import segment as S
    from newsmotion_engine.render.wan_animate.backend import WanAnimateBackend
    from newsmotion_engine.render.wan_animate.components import load_image_encoder, load_text_encoder

    variants = dict(variants) if variants is not None else {"all": RENDER_VARIANTS["all"]}
    base_types = {type(c) for c in accel}
    for name, configs in variants.items():
        clash = base_types & {type(c) for c in configs}
        if clash:
            raise ValueError(f"render variant {name!r} repeats base acceleration(s) {sorted(t.__name__ for t in clash)}")
    use_cfg = guidance_scale > 1.0
    res: dict[str, Any] = {"steps": steps, "frames": frames, "size": [width, height], "guidance_scale": guidance_scale,
                           "tokens": _tokens(dict(opts.preset_spec.transformer), width, height, frames)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="newsmotion-bench-") as tmp:
        bopts = dataclasses.replace(opts, steps=steps, guidance_scale=guidance_scale, segment_frames=frames, prompt=BENCH_PROMPT,
                                    negative_prompt="", accelerations=(), cache_root=str(Path(tmp) / "caches"))  # fmt: skip
        backend = WanAnimateBackend(bopts)
        t0 = time.perf_counter()
        backend.load()  # the backend's own component loading (no accelerations yet: stock runs first)
        comps = backend.components
        device, dtype = comps.device, comps.dtype
        proc, img_enc = load_image_encoder(bopts, device)
        img_enc = img_enc.to(dtype)
        tok, txt_enc = load_text_encoder(bopts, device)
        log(f"render components built in {time.perf_counter() - t0:.1f}s")

        # Inputs: a synthetic reference image, the pose video the backend draws (the retargeted
        # loop in Wan's style on the reference person, caches.pose_frames) and a face video.
        loop, persona = bench_inputs(width, height, frames, Path(tmp))
        spec = RenderSpec(width=width, height=height, seed=0)
        ref = persona.portrait
        pose_frames = C.pose_frames(persona, retargeted_keypoints(loop, persona), width, height)
        fsize = opts.preset_spec.transformer["motion_encoder_size"]
        face_frames = np.stack([np.roll(np.asarray(Image.fromarray(ref).resize((fsize, fsize))), i, axis=1) for i in range(frames)])
        t_lat = (frames - 1) // 4 + 1
        h, w = height // 8, width // 8
        noise = torch.randn((1, 16, t_lat + 1, h, w), generator=torch.Generator("cpu").manual_seed(0))

        # Text embeddings for the stock side (timed; the stock end-to-end time includes them).
        t0 = time.perf_counter()
        emb = C.encode_prompts(tok, txt_enc, [BENCH_PROMPT, ""], device)
        _sync(device)
        text_s = time.perf_counter() - t0
        del txt_enc
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

        pipe = WanAnimatePipeline(tokenizer=None, text_encoder=None, vae=comps.vae, scheduler=comps.new_scheduler(),
                                  image_processor=proc, image_encoder=img_enc, transformer=comps.transformer)  # fmt: skip
        pipe.set_progress_bar_config(disable=True)
        stock_calls = {"n": 0}
        counter = comps.transformer.register_forward_pre_hook(lambda *_: stock_calls.__setitem__("n", stock_calls["n"] + 1))
        _peak_reset(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            stock = pipe(image=stock_reference(pipe, img_enc, persona, width, height), pose_video=[Image.fromarray(f) for f in pose_frames],
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
        del pipe, img_enc
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

        # The backend's sub-caches, built by its own prepare_* (timed separately: not paid per render).
        t0 = time.perf_counter()
        backend.prepare_guidance(loop, spec)
        backend.prepare_persona(persona, spec)
        _sync(device)
        res["cache_build_s"] = round(time.perf_counter() - t0, 2)
        g, p = backend.load_guidance(loop, spec), backend.load_persona(persona, spec)
        plan = C.plan_segments(frames, frames, bopts.prev_frames)

        loaded_gib = module_weight_gib(comps.transformer)
        t0 = time.perf_counter()
        base = registry.apply_accelerations(comps, accel)
        res["accel_apply_s"] = round(time.perf_counter() - t0, 2)
        res["accel_report"] = {"weight_gib_loaded": round(loaded_gib, 3), **base.report,
                               "weight_gib": round(module_weight_gib(comps.transformer), 3)}  # fmt: skip
        calls = {"n": 0}
        comps.transformer.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))

        def ours(n_steps: int) -> S.SegmentResult:
            # The shipped per-segment path, looked up at call time (a test spies on it), after the
            # pose encode every render pays (the stock side's time includes its own).
            gp = dataclasses.replace(g, pose_latents=C.encode_pose_latents(comps.vae, pose_frames, plan, device))
            return S.render_segment(comps, gp, p, face_frames, plan=plan, segment=0, noise=noise, steps=n_steps,
                                    guidance_scale=guidance_scale)  # fmt: skip

        if device.type == "cuda" and any(isinstance(c, Compile) for c in accel):
            t0 = time.perf_counter()
            try:
                ours(min(warmup_steps, steps))  # compile + autotune, both CFG passes (plain CFG)
            except Exception as exc:
                res["warmup_error"] = f"{type(exc).__name__}: {exc}"[:500]
            res["warmup_render_s"] = round(time.perf_counter() - t0, 2)
            res["warmup_steps"] = min(warmup_steps, steps)
        res["variants"] = {}
        for name, configs in variants.items():
            if time.perf_counter() > deadline:
                res["variants"][name] = {"skipped": "device-time budget of this run spent"}
                continue
            settings = {c.technique: c.fields() for c in registry.ordered((*accel, *configs))}
            applied = registry.apply_accelerations(comps, configs)
            calls["n"] = 0
            _peak_reset(device)
            t0 = time.perf_counter()
            try:
                out = ours(steps)
            except Exception as exc:  # one failing variant is a result; the others still run
                res["variants"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                log(f"render ours[{name}]: {res['variants'][name]}")
                continue
            finally:
                registry.remove_accelerations(comps, applied)
            e2e = time.perf_counter() - t0
            st = out.stats
            skipped = st["teacache_skipped"]
            teacache = None
            if any(isinstance(c, TeaCache) for c in configs):
                done = st["teacache_computed"] + skipped
                teacache = {"computed": st["teacache_computed"], "skipped": skipped, "skip_ratio": round(skipped / done, 4) if done else 0.0}
            psnr, ssim = _psnr_ssim(out.video, stock_u8)
            row = {"end_to_end_s": round(e2e, 2), "denoise_s": round(st["denoise_s"], 2), "decode_s": round(st["decode_s"], 2),
                   "peak_vram_gib": _peak(device), "psnr_vs_stock": psnr, "ssim_vs_stock": ssim,
                   "speedup_vs_stock": round((stock_s + text_s) / e2e, 3), "settings": settings,
                   "transformer_calls": calls["n"], "forwards_run": calls["n"] - skipped, "forwards_skipped": skipped,
                   "cfg": {k: st[k] for k in ("cond_passes", "uncond_passes", "plain_cfg_passes", "flops_saved")},
                   "teacache": teacache}  # fmt: skip
            res["variants"][name] = row
            log(f"render ours[{name}]: {row}")
            if save is not None:
                save(res)
        backend.close()
    first = next((r for r in res["variants"].values() if "end_to_end_s" in r), None)
    if first is not None:  # the first variant is the headline ("ours")
        res["ours"] = first
        res["render_speedup_vs_stock"] = first["speedup_vs_stock"]
    return res


def _configs(value: Sequence[AccelConfig] | Mapping[str, Any], what: str) -> tuple[AccelConfig, ...]:
    """Typed configs as given, or parsed from a flat option mapping (JSON callers) by the same
    parser as the CLI's ``-o``."""
    from newsmotion_engine.render.wan_animate.config import parse_accelerations

    if isinstance(value, Mapping):
        return parse_accelerations(value)
    configs = tuple(value)
    if not all(isinstance(c, AccelConfig) for c in configs):
        raise TypeError(f"{what}: give acceleration configs (newsmotion_engine.accel) or a flat option mapping, got {value!r}")
    return configs


def _default_render_accel(cuda: bool) -> tuple[AccelConfig, ...]:
    if cuda:
        return (Fp8Linears(mode="auto"), Attention("cudnn"), Compile(), VaeTiling(), FfnChunks(chunks=8))
    return (Fp8Linears(mode="auto"), VaeTiling(), FfnChunks(chunks=2))


def _measured_attention(forward: Mapping[str, Any], cuda: bool) -> Attention | None:
    """The forward part's measured attention for the render part: the FP8 kernel only where the
    forward part ran it compiled and it beat cuDNN there; else cuDNN (GPU) or stock SDPA."""
    fv = forward.get("variants", {})
    fp8_ms, cudnn_ms = fv.get("all", {}).get("forward_ms"), fv.get("all_cudnn", {}).get("forward_ms")
    if forward.get("best_attention") == "fp8-triton" and fp8_ms is not None and (cudnn_ms is None or fp8_ms < cudnn_ms):
        return Attention("fp8-triton", variant=forward.get("best_attention_variant"))
    return Attention("cudnn") if cuda else None


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
    render_accel: Sequence[AccelConfig] | Mapping[str, Any] | None = None,
    best_render_attention: bool = False,
    guidance_scale: float = 1.0,
    render_variants: Mapping[str, Sequence[AccelConfig] | Mapping[str, Any]] | Sequence[str] | None = None,
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

    ``forward_variants`` (names, default all of ``FORWARD_VARIANTS``) and ``attention_variants``
    (FP8 kernel variants for the micro-bench, default all) narrow the forward part;
    ``guidance_scale``, ``steps``, ``render_accel`` (the base accelerations: configs, or a flat
    option mapping such as ``{"fp8": "auto", "attention": "cudnn"}``; default FP8 + cuDNN +
    compile + VAE tiling + 8 FFN chunks on a GPU) and ``render_variants`` (names of
    ``RENDER_VARIANTS`` entries, or ``{name: configs or flat mapping}``; default ``["all"]``)
    shape the render part. ``best_render_attention`` (or ``"attention": "best"`` in a flat
    ``render_accel``) takes the forward part's measured choice for the render (the FP8 kernel
    variant only when accurate and faster than cuDNN, else cuDNN). ``budget_s``: variants that
    would start after this many seconds are skipped (recorded as such). The JSON is rewritten
    after every variant, so a run cut short keeps what it measured. ``render_size`` ``(width,
    height, frames)``: the render part's shape when it differs from the forward's (``part="all"``;
    ``forward_budget_s`` then caps the forward part's own variant starts). The render part needs
    sizes the backend renders (multiples of 16, at least 64).

    Keys: ``weights`` ("random weights" for presets), ``device``, ``versions``, ``forward``
    (variants, attention micro-bench), ``forward_speedup_vs_stock`` (all accelerations vs stock
    bf16 at the same tokens), ``render`` (stock vs ours, PSNR/SSIM, ``render_speedup_vs_stock``),
    ``created_at``.
    """
    import diffusers
    import torch

    from newsmotion_engine.render.wan_animate.config import RANDOM_WEIGHTS_LABEL, WanAnimateOptions

    if part not in ("forward", "render", "all"):
        raise ValueError(f"part {part!r}: use forward, render or all")
    opts = WanAnimateOptions(preset=preset, device=device)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    # Edge parsing (JSON callers): flat mappings become typed configs before anything loads.
    if isinstance(render_accel, Mapping) and render_accel.get("attention") == "best":
        render_accel = {k: v for k, v in render_accel.items() if k != "attention"}
        best_render_attention = True
    accel = _configs(render_accel, "render_accel") if render_accel is not None else _default_render_accel(dev.type == "cuda")
    if render_variants is None:
        variants = {"all": RENDER_VARIANTS["all"]}
    elif isinstance(render_variants, Mapping):
        variants = {n: _configs(v, f"render variant {n!r}") for n, v in render_variants.items()}
    else:
        unknown = [n for n in render_variants if n not in RENDER_VARIANTS]
        if unknown:
            raise ValueError(f"render variants {unknown}: use {', '.join(RENDER_VARIANTS)} or give configs")
        variants = {n: RENDER_VARIANTS[n] for n in render_variants}
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
        if best_render_attention:
            measured = _measured_attention(result.get("forward", {}), dev.type == "cuda")
            accel = tuple(c for c in accel if not isinstance(c, Attention)) + ((measured,) if measured else ())
        rw, rh, rf = render_size or (width, height, frames)
        result["render"] = _bench_render(opts, rw, rh, rf, steps, log, accel, guidance_scale=guidance_scale,
                                         variants=variants, deadline=deadline, save=saver("render"))  # fmt: skip
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    write()
    return result


def backend_smoke(preset: str = "smoke", *, device: str = "auto", width: int = 256, height: int = 256, frames: int = 13,
                  steps: int = 2, options: Mapping[str, Any] | None = None, log: Log = print) -> dict[str, Any]:  # fmt: skip
    """A whole clip through the shipped backend entry points (options mapping -> ``get_backend`` ->
    ``prepare_guidance`` / ``prepare_persona`` -> ``frames``) on the bench's synthetic loop and
    persona, with ``options`` (flat keys, as the CLI's ``-o``): every acceleration path plus the
    face video and the continuation between segments (``frames`` over one segment).
    Returns ``{"frames", "wall_s", "backend"}`` (``backend``: ``describe()``)."""
    from newsmotion_engine.render import get_backend
    from newsmotion_engine.render.base import RenderSpec

    with tempfile.TemporaryDirectory(prefix="newsmotion-smoke-") as tmp:
        loop, persona = bench_inputs(width, height, frames, Path(tmp))
        backend = get_backend("wan-animate", preset=preset, device=device, steps=steps, cache_root=str(Path(tmp) / "caches"),
                              **dict(options or {}))  # fmt: skip
        spec = RenderSpec(width=width, height=height)
        t0 = time.perf_counter()
        try:
            backend.prepare_guidance(loop, spec)
            backend.prepare_persona(persona, spec)
            n = sum(1 for _ in backend.frames(loop, persona, loop.keypoints, spec))
            info = backend.describe()
        finally:
            backend.close()
    result = {"frames": n, "wall_s": round(time.perf_counter() - t0, 2), "backend": info}
    log(f"backend smoke: {result}")
    return result
