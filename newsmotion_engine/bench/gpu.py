"""GPU forward benchmark of the ``wan-animate`` transformer (the ``benchmarks`` asset's GPU part).

One ``WanAnimateTransformer3DModel`` forward at the full segment shape (default 14B, 77 frames at
720x1280 = 75.6k tokens): stock bf16 (diffusers defaults: SDPA), then each acceleration alone
(cuDNN attention, the 8-bit Triton attention, regional compile, FP8 linears) and all together
(also with cuDNN, and with CUDA graphs): ``FORWARD_VARIANTS``. Per variant: per-forward ms (median
of ``reps`` after ``warmup``), compile s, weights GiB, peak VRAM GiB, output relative error vs the
stock output. Plus an attention micro-benchmark at the same shape (SDPA flash / cuDNN / each
kernel variant: ms, TFLOP/s, error vs bf16 flash), which picks the kernel variant the "all"
forward uses (accurate under ``MAX_FP8_ATTENTION_ERR`` and faster than cuDNN, else cuDNN).

Variants are tuples of the typed acceleration configs the product takes
(:mod:`newsmotion_engine.accel`), applied and removed through the acceleration registry. With
random weights (the presets) errors measure numerical drift only; every result says "random
weights". The render part (stock pipeline vs the shipped backend) is lab harness:
``python -m benchmarks.gpu``.

Example::

    result = bench_gpu_forward(preset="14b")
    result["forward_speedup_vs_stock"]
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from newsmotion_engine.accel.attention import Attention
from newsmotion_engine.accel.compile import Compile
from newsmotion_engine.accel.fp8 import Fp8Linears
from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.bench.record import BenchResult, current_commit, write_result
from newsmotion_engine.bench.timing import peak_gib, peak_reset, rel_err, time_calls

__all__ = ["FORWARD_VARIANTS", "bench_forward", "bench_gpu_forward", "forward_inputs", "forward_record", "forward_variant_configs", "result_header", "token_count"]

Log = Callable[[str], None]
MAX_FP8_ATTENTION_ERR = 0.05  # relative L2 error vs bf16 attention above which the FP8 kernel is not used


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


def token_count(cfg: dict[str, Any], width: int, height: int, frames: int) -> int:
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
            timed = time_calls(lambda: sdpa(q, k, v, backend), device, 1, reps)
            ms, out = timed.median_ms, timed.output
            if ref is None:
                ref = out
            res[name] = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "rel_err_vs_flash": round(rel_err(out, ref), 5)}
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
            timed = time_calls(lambda: fp8_attention(q, k, v, variant=name), device, 2, reps)
            ms, first, out = timed.median_ms, timed.first_call_ms, timed.output
            sharp = fp8_attention(qs_, ks_, vs_, variant=name)
            # The kernel alone on pre-quantized inputs (in a compiled block the quantization is
            # fused into the code before it; eager it is separate torch ops, included in "ms").
            x = quantize_attention_inputs(q, k, v, name)
            kms = time_calls(lambda: torch.ops.newsmotion.fp8_attention_kernel(*x, name), device, 1, reps).median_ms
            del x
            row = {"ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1), "first_call_ms": round(first, 1),
                   "kernel_ms": round(kms, 2), "kernel_tflops": round(flops / kms / 1e9, 1),
                   "autotuned_config": _autotuned_config(),
                   "rel_err_vs_flash": round(rel_err(out, ref), 5) if ref is not None else None,
                   "rel_err_sharp_vs_flash": round(rel_err(sharp, ref_sharp), 5),
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


def bench_forward(opts: Any, width: int, height: int, frames: int, warmup: int, reps: int, log: Log,
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
    from newsmotion_engine.render.backends.wan.components import resolve_device, torch_dtype
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer

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
    n_tokens = token_count(cfg, width, height, frames)
    result: dict[str, Any] = {"tokens": n_tokens, "params_b": round(n_params / 1e9, 3), "build_s": round(build_s, 1), "variants": {}}
    heads, head_dim = cfg["num_attention_heads"], cfg["attention_head_dim"]
    micro = _attention_bench(n_tokens, heads, head_dim, device, log, reps=max(3, reps), variants=attention_variants)
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
            peak_reset(device)
            with torch.no_grad():
                timed = time_calls(lambda: model(**inputs)[0], device, warm, reps)
            out, first = timed.output, timed.first_call_ms
            row.update(
                forward_ms=round(timed.median_ms, 1),
                forward_ms_all=[round(t, 1) for t in timed.ms],
                first_call_ms=None if first is None else round(first, 1),
                weight_gib=round(module_weight_gib(model), 3),
                peak_vram_gib=peak_gib(device),
                finite=bool(torch.isfinite(out).all()),
            )
            if name == "stock_bf16":
                result["_ref"] = out
            elif "_ref" in result:
                row["rel_err_vs_stock"] = round(rel_err(out, result["_ref"]), 5)
            stock = result["variants"].get("stock_bf16", {}).get("forward_ms")
            if stock:
                row["speedup_vs_stock"] = round(stock / row["forward_ms"], 3)
            if "compile" in (row.get("setup") or {}) and first is not None:
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



def result_header(preset: str, device: Any, width: int, height: int, frames: int) -> dict[str, Any]:
    """What every GPU result of the ``wan-animate`` model starts with: weights label, preset,
    shape, device name, library versions, time of measurement."""
    import diffusers
    import torch

    from newsmotion_engine.render.backends.wan_animate.config import RANDOM_WEIGHTS_LABEL

    return {
        "bench": "gpu",
        "weights": RANDOM_WEIGHTS_LABEL,
        "note": "random weights: output errors and PSNR/SSIM measure numerical drift only, not quality",
        "preset": preset,
        "shape": {"width": width, "height": height, "frames": frames},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                     "cuda": torch.version.cuda, "python": platform.python_version()},  # fmt: skip
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def forward_record(name: str, result: dict[str, Any]) -> BenchResult:
    """The record of a :func:`bench_gpu_forward` result."""
    shape = result["shape"]
    variants = (result.get("forward") or {}).get("variants", {})
    headline = {f"{label} (ms)": variants[key]["forward_ms"] for key, label in
                (("stock_bf16", "stock bf16 forward"), ("all", "all accelerations forward")) if "forward_ms" in variants.get(key, {})}  # fmt: skip
    if result.get("forward_speedup_vs_stock") is not None:
        headline["forward speedup vs stock (x)"] = result["forward_speedup_vs_stock"]
    return BenchResult(
        name=name,
        title=f"wan-animate {result['preset']} transformer forward, {shape['width']}x{shape['height']}x{shape['frames']}: "
              "stock bf16 vs each acceleration",  # fmt: skip
        created_at=result["created_at"],
        device=result["device"],
        commit=current_commit(),
        command=f"newsmotion bench gpu --preset {result['preset']} --json benchmarks/results/{name}.json",
        headline=headline,
        data=result,
        weights=result["weights"],
    )


def bench_gpu_forward(
    preset: str = "14b",
    *,
    width: int = 720,
    height: int = 1280,
    frames: int = 77,
    warmup: int = 1,
    reps: int = 2,
    device: str = "auto",
    forward_variants: tuple[str, ...] | None = None,
    attention_variants: tuple[str, ...] | None = None,
    budget_s: float | None = None,
    json_path: str | Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run the forward benchmark (see the module docstring) and return (and optionally write) the
    result dict. ``forward_variants`` (names, default the first eight of ``FORWARD_VARIANTS``) and
    ``attention_variants`` (FP8 kernel variants for the micro-bench, default all) narrow it;
    variants that would start after ``budget_s`` seconds are skipped (recorded as such). The JSON
    is rewritten after every variant, so a run cut short keeps what it measured.

    Keys: ``weights`` ("random weights" for presets), ``device``, ``versions``, ``forward``
    (variants, attention micro-bench), ``forward_speedup_vs_stock`` (all accelerations vs stock
    bf16 at the same tokens), ``created_at``, ``wall_s``.
    """
    import torch

    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    opts = WanAnimateOptions(preset=preset, device=device)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    result = result_header(preset, dev, width, height, frames)
    t0 = time.perf_counter()

    def write(forward: dict[str, Any] | None = None) -> None:
        if forward is not None:
            result["forward"] = forward
        if json_path is not None:
            result["wall_s"] = round(time.perf_counter() - t0, 1)
            write_result(Path(json_path), forward_record(Path(json_path).stem, result))

    result["forward"] = bench_forward(opts, width, height, frames, warmup, reps, log, variants=forward_variants,
                                      attention_variants=attention_variants,
                                      deadline=t0 + budget_s if budget_s else math.inf, save=write)  # fmt: skip
    result["forward_speedup_vs_stock"] = result["forward"]["forward_speedup_vs_stock"]
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    write()
    return result
