"""GPU benchmark of the ``wan-animate-2`` backend against diffusers' stock modular pipelines
(random weights; every result says so). Each part fits one 10-minute device command
(``--budget-s``: work that would start past the budget is recorded as skipped).

Parts (``--part``):

- ``forward``: one transformer, timed twice — stock (bf16, the regional compile the stock
  docstring requires for the cached pass's flex attention) and ours (FP8 linears + regional
  compile, through the acceleration registry). Per side: the extract pass ms, one cached
  (conditional) forward ms and one unconditional forward ms (the base schedule's second pass),
  each the median of ``reps`` after ``warmup``; weights GiB, peak VRAM. Then the reference K/V
  per segment: measured bytes (bf16 and FP8) next to the analytic figure (this shape, and 14B at
  720x1280 x 81 frames), and the cache-hit paths: an LRU hit, the FP8 file read back (page cache
  dropped, then warm), and a cached forward reading FP8 K/V. Base schedule (40 steps, CFG 3.0):
  per-forward timing only (a clip would not fit a call): ``base_segment_s_estimate`` is
  ``extract + 40 x (cond + uncond)`` from the measured forwards, labelled as an estimate.
- ``clip``: a 120-frame 720x1280 clip, distilled schedule (10 steps), both sides in child
  processes (concurrently on two GPUs when the host has two, else one after the other):
  ``clip-stock`` = ``WanAnimate2DistilledModularPipeline`` end to end from the reference image
  and the driving video (its text, CLIP and VAE encoders included, as a user runs it), after a
  compile warm-up at the segment shape; ``clip-ours`` = the backend: ``prepare_*`` (timed apart:
  built once per loop / persona), the K/V of the loop's segments extracted into the GPU LRU
  (timed apart: a warm renderer has them from the previous persona), then ``frames()`` for the
  clip (``animate2_clip_s``). Keys ``animate2_clip_s``, ``animate2_clip_s_stock``,
  ``animate2_clip_speedup_vs_stock``, peak VRAM per side.
- ``multistream``: A/B of two configurations (A: bf16, B: FP8 linears; preset ``--ms-preset``,
  default 1.3b) on one GPU, each side ``--ms-forwards`` cached forwards: one after the other,
  two CUDA streams in one process (a thread per side), two processes (started together behind a
  file barrier); throughput ratio vs serial and peak VRAM.

``--preset tiny`` runs every part on the CPU in seconds (a dry run of the same code).

    python -m benchmarks.animate2 --preset 14b --part forward --budget-s 540 --json $OUT/gpu_animate2_forward_14b.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.bench.timing import gib, peak_gib, peak_reset, sync, time_calls

from benchmarks.kernel_profile import gpu_busy_and_copy_ms, kernel_totals
from benchmarks.lab_record import read_lab_data, top_level_figures, write_lab_result

__all__ = ["bench_animate2", "main"]

Log = Callable[[str], None]
FILE_LAYERS = 4  # layers in the FP8-file read measurement when all layers would exceed 4 GiB
PARTS = ("forward", "attention", "clip", "clip-ours", "clip-stock", "multistream", "ms-worker", "all")


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError"


def _options(preset: str, device: str, accel: Mapping[str, Any], **kw: Any):
    from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2Options

    return WanAnimate2Options.from_mapping({"preset": preset, "device": device, **accel, **kw})


def _default_accel(cuda: bool) -> dict[str, Any]:
    # FP8 linears + regional compile + our 8-bit split attention + the VAE channels-last (its
    # float32 decode 6% faster than in torch's default layout), its padding folded into its
    # convolutions (exact; ~5% faster) and its RMS norms + SiLUs in one pass (a further ~16%; all
    # three measured in that layout, conv3d_h100.json) on a GPU; nothing on the CPU dry run
    # (inductor there would spend minutes compiling a model that runs in milliseconds).
    return ({"fp8": "auto", "compile": "blocks", "attention": "fp8-triton", "channels_last": True, "causal_pad_fold": True,
             "fused_vae_norm": True} if cuda else {})


def _header(preset: str, dev: Any, **shape: Any) -> dict[str, Any]:
    import diffusers
    import torch

    return {
        "bench": "animate2",
        "weights": "random weights",
        "note": "random weights: timing, memory and numerical drift only, not picture quality",
        "preset": preset,
        "shape": shape,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__, "cuda": torch.version.cuda,
                     "python": platform.python_version()},  # fmt: skip
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _write_json(path: Path, result: dict[str, Any], title: str | None = None) -> None:
    """As a result record, atomically (a reader never sees half a file); the title defaults to the
    part's stock-vs-ours comparison."""
    shape = "x".join(str(v) for v in (result.get("shape") or {}).values())
    title = title or " ".join(f"wan-animate-2 {result.get('preset', '')} {result.get('part', '')}: stock vs ours {shape}".split())
    write_lab_result(path, result, title=title, headline=top_level_figures(result))


class _Writer:
    def __init__(self, result: dict[str, Any], path: str | Path | None, title: str | None = None) -> None:
        self.result, self.path, self.title, self.t0 = result, Path(path) if path else None, title, time.perf_counter()

    def __call__(self) -> None:
        self.result["wall_s"] = round(time.perf_counter() - self.t0, 1)
        if self.path is not None:
            _write_json(self.path, self.result, self.title)


# ---------------------------------------------------------------------------------------- forward
def _segment_inputs(comps: Any, geom: Any, seed: int = 0) -> dict[str, Any]:
    """Random tensors of one segment's shapes (the extract pass's and the cached pass's)."""
    import torch

    g = torch.Generator("cpu").manual_seed(seed)
    dev, dt = comps.device, comps.dtype
    cfg = comps.transformer.config
    r = lambda *s: torch.randn(*s, generator=g).to(dev, dt)  # noqa: E731
    t, h, w = geom.latent_frames, geom.latent_h, geom.latent_w
    return {
        "driving_condition": r(20, t, h, w),
        "prompt_ref": r(1, 512, cfg.text_dim),
        "clip": r(1, 257, 1280),
        "latents": torch.randn(16, t + 1, h, w, generator=g).to(dev),
        "reference": r(20, t + 1, h, w),
        "prompt": r(1, 512, cfg.text_dim),
        "negative": r(1, 512, cfg.text_dim),
        "image": r(1, 257, 1280),
    }


def _forward_side(comps: Any, geom: Any, inputs: dict[str, Any], warmup: int, reps: int, log: Log, label: str) -> tuple[dict, Any]:
    import torch

    from newsmotion_engine.accel.fp8 import module_weight_gib
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    dev, tr = comps.device, comps.transformer
    out: dict[str, Any] = {"weight_gib": round(module_weight_gib(tr), 3)}
    peak_reset(dev)
    box: dict[str, Any] = {}

    def extract():
        box["kv"] = None
        with torch.no_grad():
            box["kv"] = D.extract_reference_kv(tr, inputs["driving_condition"], inputs["prompt_ref"], inputs["clip"], geom)

    out["extract"] = time_calls(extract, dev, warmup, reps).summary()
    log(f"  {label}: extract {out['extract']['ms']} ms")
    t = torch.tensor(999.0, device=dev)

    def cached(uncond: bool):
        def run():
            with torch.no_grad():
                text = inputs["negative"] if uncond else inputs["prompt"]
                return D._forward(tr, inputs["latents"], t, text, inputs["reference"], box["kv"], inputs["image"], geom, uncond, comps.dtype)

        return run

    out["cached_cond"] = time_calls(cached(False), dev, warmup, reps).summary()
    out["cached_uncond"] = time_calls(cached(True), dev, warmup, reps).summary()
    out["peak_gib"] = peak_gib(dev)
    log(f"  {label}: cached cond {out['cached_cond']['ms']} ms, uncond {out['cached_uncond']['ms']} ms, peak {out['peak_gib']} GiB")
    return out, box["kv"]


def _kv_paths(comps: Any, geom: Any, kv: Any, inputs: dict[str, Any], warmup: int, reps: int, tmp: Path, log: Log) -> dict[str, Any]:
    """Measured K/V bytes and the cache-hit paths: an LRU hit, the cached forward reading FP8 K/V
    (``kv`` is quantized in place: the device never holds both copies), and the FP8 file read
    back. At the largest shapes the file holds ``FILE_LAYERS`` layers (host memory and disk);
    its per-layer read time is scaled to all layers and labelled so."""
    import torch

    from newsmotion_engine.bench.common import drop_from_page_cache
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2 import kv as K

    dev = comps.device
    cfg = comps.transformer.config
    out: dict[str, Any] = {"bytes_model_dtype": K.kv_bytes(kv)}
    lru = K.KVLru(2**62)
    lru.put("seg", kv)
    out["lru_hit"] = time_calls(lambda: lru.get("seg"), dev, 1, max(reps, 5)).summary()
    t = torch.tensor(999.0, device=dev)

    def cached(cache: Any):
        with torch.no_grad():
            return D._forward(comps.transformer, inputs["latents"], t, inputs["prompt"], inputs["reference"], cache,
                              inputs["image"], geom, False, comps.dtype)  # fmt: skip

    ref = cached(kv).float()
    t0 = time.perf_counter()
    K.quantize_cache(kv)
    sync(dev)
    out["fp8_quantize_s"] = round(time.perf_counter() - t0, 3)
    out["bytes_fp8"] = K.kv_bytes(kv)
    out["cached_cond_fp8_kv"] = time_calls(lambda: cached(kv), dev, warmup, reps).summary()
    got = cached(kv).float()
    out["fp8_kv_output_rel_err"] = round(float((got - ref).norm() / ref.norm().clamp_min(1e-30)), 5)
    del ref, got
    n_layers = cfg.num_layers if out["bytes_fp8"] < 4 * 2**30 else min(FILE_LAYERS, cfg.num_layers)
    data, scales = K.kv_to_file(kv, range(n_layers))
    need = data.nbytes + scales.nbytes
    free = shutil.disk_usage(tmp).free
    if free < 1.5 * need:
        out["fp8_file"] = {"skipped": f"needs {gib(need)} GiB of disk, {gib(free)} GiB free"}
    else:
        np.save(tmp / "kv.npy", data)
        np.save(tmp / "kv_scale.npy", scales)
        del data, scales

        def read():
            d = np.load(tmp / "kv.npy", mmap_mode="r")
            s = np.load(tmp / "kv_scale.npy", mmap_mode="r")
            return K.kv_from_file(d, s, dev, comps.dtype)

        drop_from_page_cache(tmp)
        t0 = time.perf_counter()
        read()
        sync(dev)
        cold = (time.perf_counter() - t0) * 1e3
        warm = time_calls(read, dev, 1, reps).summary()
        scale = cfg.num_layers / n_layers
        out["fp8_file"] = {"layers_in_file": n_layers, "bytes_on_disk": need, "read_cold_ms": round(cold, 1), "read_warm": warm,
                           "all_layers_read_cold_ms_scaled": round(cold * scale, 1),
                           "all_layers_read_warm_ms_scaled": round(warm["ms"] * scale, 1),
                           "note": None if n_layers == cfg.num_layers else f"measured on {n_layers} of {cfg.num_layers} layers, scaled x{scale:g}"}  # fmt: skip
        (tmp / "kv.npy").unlink()
        (tmp / "kv_scale.npy").unlink()
    args = dict(num_layers=cfg.num_layers, dim=cfg.dim, heads=cfg.num_heads, frames=geom.segment_frames, width=geom.width, height=geom.height)
    out["analytic_this_shape"] = {"model_dtype": K.analytic_kv_bytes(**args, bytes_per_value=comps.transformer.dtype.itemsize),
                                  "fp8": K.analytic_kv_bytes(**args, bytes_per_value=1)}  # fmt: skip
    full = dict(num_layers=40, dim=5120, heads=40, frames=81, width=720, height=1280)
    out["analytic_14b_720x1280_81f"] = {"bf16": K.analytic_kv_bytes(**full, bytes_per_value=2), "fp8": K.analytic_kv_bytes(**full, bytes_per_value=1)}
    area = dict(num_layers=40, dim=5120, heads=40, frames=81, width=640, height=800)
    out["analytic_14b_640x800_81f_pipeline_default_area"] = {"bf16": K.analytic_kv_bytes(**area, bytes_per_value=2)}
    # The 14B figure from this run's measurement: bytes per (layer x token x channel) scaled.
    per_value = out["bytes_model_dtype"] / (cfg.num_layers * 2 * out["analytic_this_shape"]["model_dtype"]["tokens"] * cfg.dim)
    tokens_full = out["analytic_14b_720x1280_81f"]["bf16"]["tokens"]
    out["measured_scaled_to_14b_720x1280_81f_bf16_bytes"] = int(round(per_value / comps.transformer.dtype.itemsize * 2 * 40 * 2 * tokens_full * 5120))
    log(f"  K/V: {gib(out['bytes_model_dtype'])} GiB ({comps.dtype}), {gib(out['bytes_fp8'])} GiB FP8; "
        f"14B 720x1280 81f: {out['analytic_14b_720x1280_81f']['bf16']['gib']} GiB bf16")  # fmt: skip
    return out


def _offload_side(comps: Any, geom: Any, inputs: dict[str, Any], warmup: int, reps: int, log: Log) -> dict[str, Any]:
    """Our accelerated transformer with the K/V in FP8 in pinned host memory (``kv_offload``):
    extract ms, cached forward ms (each layer's K/V copied in as it is read), device peak."""
    import torch

    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2 import kv as K

    dev, tr = comps.device, comps.transformer
    peak_reset(dev)
    box: dict[str, Any] = {}

    def extract():
        box["kv"] = None
        with torch.no_grad():
            box["kv"] = D.extract_reference_kv(tr, inputs["driving_condition"], inputs["prompt_ref"], inputs["clip"], geom,
                                               cache=K.fp8_cache(tr.config.num_layers, offload=True))  # fmt: skip

    out: dict[str, Any] = {"extract": time_calls(extract, dev, warmup, reps).summary()}
    t = torch.tensor(999.0, device=dev)

    def cached():
        with torch.no_grad():
            return D._forward(tr, inputs["latents"], t, inputs["prompt"], inputs["reference"], box["kv"], inputs["image"], geom, False, comps.dtype)

    out["cached_cond"] = time_calls(cached, dev, warmup, reps).summary()
    out["host_bytes"] = K.kv_bytes(box["kv"]) - K.device_bytes(box["kv"])
    out["device_kv_bytes"] = K.device_bytes(box["kv"])
    out["peak_gib"] = peak_gib(dev)
    log(f"  ours + kv_offload: extract {out['extract']['ms']} ms, cached {out['cached_cond']['ms']} ms, peak {out['peak_gib']} GiB")
    del box
    return out


def _part_forward(preset: str, dev_name: str, width: int, height: int, segment_frames: int | None, accel: Mapping[str, Any],
                  warmup: int, reps: int, deadline: float, result: dict, write: Callable[[], None], log: Log) -> None:  # fmt: skip
    import torch

    from newsmotion_engine.accel.compile import uncompile_blocks
    from newsmotion_engine.accel.registry import apply_accelerations
    from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components
    from newsmotion_engine.render.backends.wan_animate_2.denoise import geometry

    opts = _options(preset, dev_name, {}, segment_frames=segment_frames)
    t0 = time.perf_counter()
    comps = load_render_components(opts)
    dev = comps.device
    geom = geometry(opts.segment_length, width, height)
    fwd: dict[str, Any] = {"load_s": round(time.perf_counter() - t0, 1), "segment_frames": geom.segment_frames,
                           "tokens_generation": geom.seq_len, "tokens_reference": geom.seq_len_ref}  # fmt: skip
    result["forward"] = fwd
    inputs = _segment_inputs(comps, geom)
    try:
        if dev.type == "cuda":
            comps.transformer.compile_repeated_blocks()  # the stock docstring: the cached pass needs compile
        fwd["stock"], kv = _forward_side(comps, geom, inputs, warmup, reps, log, "stock")
        fwd["stock"]["setup"] = "bf16, compile_repeated_blocks()" if dev.type == "cuda" else "float/bf16 eager (CPU dry run)"
        write()
        if time.perf_counter() < deadline:
            with tempfile.TemporaryDirectory(prefix="newsmotion-kv-") as tmp:
                fwd["kv"] = _kv_paths(comps, geom, kv, inputs, warmup, reps, Path(tmp), log)
            write()
        del kv
        if dev.type == "cuda":
            uncompile_blocks(comps.transformer)
        ours_opts = _options(preset, dev_name, accel, segment_frames=segment_frames)
        if time.perf_counter() < deadline:
            applied = apply_accelerations(comps, ours_opts.accelerations)
            fwd["ours"], _ = _forward_side(comps, geom, inputs, warmup, reps, log, "ours")
            fwd["ours"]["accelerations"] = applied.report
            if time.perf_counter() < deadline:
                fwd["ours_kv_offload"] = _offload_side(comps, geom, inputs, warmup, reps, log)
            for key in ("extract", "cached_cond", "cached_uncond"):
                fwd[f"{key}_speedup_vs_stock"] = round(fwd["stock"][key]["ms"] / fwd["ours"][key]["ms"], 3)
            for side in ("stock", "ours"):
                s = fwd[side]
                s["base_segment_s_estimate"] = round((s["extract"]["ms"] + 40 * (s["cached_cond"]["ms"] + s["cached_uncond"]["ms"])) / 1e3, 1)
                s["distilled_segment_s_estimate"] = round((s["extract"]["ms"] + 10 * s["cached_cond"]["ms"]) / 1e3, 1)
            fwd["estimates_note"] = "segment estimates = extract + steps x measured forwards (no VAE, no encoders); the clip part measures end to end"
        else:
            fwd["ours"] = {"skipped": "budget"}
    except Exception as exc:
        if not _is_oom(exc):
            raise
        fwd["oom"] = str(exc).splitlines()[0]
        log(f"  OOM: {fwd['oom']}")
    finally:
        del comps, inputs
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    write()


def _compile_warmup(comps: Any, geom: Any, fp8_kv: bool, kv: Any = None) -> float:
    """Compile the extract and cached graphs at the segment shape (random inputs) so the timed
    clip measures sampling, not compilation; ``fp8_kv``: the cached pass reads FP8 layer caches
    (another graph: dynamo guards on the layer cache's type). ``kv``: a filled cache to reuse
    (the LRU's, with its placement: under ``kv_offload`` the device check in ``get`` is guarded
    too); no second segment of K/V is allocated (host memory ran out at 14B with the LRU's two
    offloaded segments plus a third for the warm-up)."""
    import torch

    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2.kv import quantize_cache

    t0 = time.perf_counter()
    inputs = _segment_inputs(comps, geom)
    with torch.no_grad():
        if kv is None:
            kv = D.extract_reference_kv(comps.transformer, inputs["driving_condition"], inputs["prompt_ref"], inputs["clip"], geom)
            if fp8_kv:
                quantize_cache(kv)
        D._forward(comps.transformer, inputs["latents"], torch.tensor(999.0, device=comps.device), inputs["prompt"],
                   inputs["reference"], kv, inputs["image"], geom, False, comps.dtype)  # fmt: skip
    del kv, inputs
    sync(comps.device)
    return round(time.perf_counter() - t0, 1)


def _vae_warmup(vae: Any, width: int, height: int) -> float:
    """One short decode (two latent frames: the first-chunk and the cached path) and one short
    encode (five frames) at the clip's size, before either side's timed clip: the VAE's first-use
    costs (cuDNN's algorithm choice and kernel loading per convolution shape; on ours, the JIT
    compile of the fused norm's Triton kernels) are a cold process's, not the clip's. Both sides
    run it, so neither is timed cold. Returns seconds."""
    import torch

    t0 = time.perf_counter()
    dev = next(vae.parameters()).device
    z = vae.config.z_dim
    with torch.no_grad():
        vae.decode(torch.zeros(1, z, 2, height // 8, width // 8, device=dev, dtype=vae.dtype), return_dict=False)
        vae.encode(torch.zeros(1, 3, 5, height, width, device=dev, dtype=vae.dtype))
    sync(dev)
    return round(time.perf_counter() - t0, 1)


# -------------------------------------------------------------------------------------- attention
def _flash_lse(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """bf16 FlashAttention with its log-sum-exp (natural log -> log2 units), BSHD."""
    import torch

    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))[:2]
    return out.transpose(1, 2), lse.transpose(1, 2) / math.log(2.0)


def _part_attention(preset: str, dev: Any, width: int, height: int, segment_frames: int | None, warmup: int, reps: int,
                    result: dict, write: Callable[[], None], log: Log) -> None:  # fmt: skip
    """The cached pass's self-attention alone at the preset's shape, one layer: the stock path
    (``[generation | reference]`` packed, flex attention under the stock block mask, compiled)
    vs the split (dense generation + per-frame reference, merged by log-sum-exp) on our 8-bit
    kernel and on bf16 FlashAttention; error of each against the stock output."""
    import torch
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2Transformer3DModel
    from torch.nn.attention.flex_attention import flex_attention

    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel.attention_incontext import incontext_attention, prepare_reference, reference_incontext_attention
    from newsmotion_engine.render.backends.wan_animate_2.attention import split_cached_attention
    from newsmotion_engine.render.backends.wan_animate_2.denoise import geometry

    opts = _options(preset, str(dev), {}, segment_frames=segment_frames)
    tcfg = opts.preset_spec.transformer
    heads, head_dim = tcfg["num_heads"], tcfg["dim"] // tcfg["num_heads"]
    geom = geometry(opts.segment_length, width, height)
    hw, frames = (geom.latent_h // 2) * (geom.latent_w // 2), geom.latent_frames
    cuda = dev.type == "cuda"
    dt = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator("cpu").manual_seed(0)
    n_gen, n_ref = (frames + 1) * hw, frames * hw
    r = lambda n: torch.randn(1, n, heads, head_dim, generator=g).to(dev, dt)  # noqa: E731
    q, k, v, k_ref, v_ref = r(n_gen), r(n_gen), r(n_gen), r(n_ref), r(n_ref)
    out: dict[str, Any] = {"tokens_generation": n_gen, "tokens_reference": n_ref, "heads": heads, "head_dim": head_dim,
                           "tokens_per_frame": hw, "note": "one layer's self-attention, random q/k/v (bf16 on the GPU)"}  # fmt: skip
    result["attention"] = out
    mask = WanAnimate2Transformer3DModel.create_mask(None, frames, hw, dev)
    p_gen, p_ref = math.ceil(n_gen / 128) * 128, math.ceil(n_ref / 128) * 128
    qp = q.new_zeros(1, p_gen, heads, head_dim)
    kp, vp = (q.new_zeros(1, p_gen + p_ref, heads, head_dim) for _ in range(2))
    qp[:, :n_gen], kp[:, :n_gen], vp[:, :n_gen] = q, k, v
    kp[:, p_gen:p_gen + n_ref], vp[:, p_gen:p_gen + n_ref] = k_ref, v_ref
    flex = torch.compile(flex_attention) if cuda else flex_attention

    def stock():
        o = flex(qp.transpose(1, 2), kp.transpose(1, 2), vp.transpose(1, 2), block_mask=mask)
        return o.transpose(1, 2)[:, :n_gen]

    variants: dict[str, Callable[[], Any]] = {"stock_flex_block_mask": stock}
    # The in-context kernel's reference is converted once per segment and layer (timed apart);
    # each call then quantizes the generation Q/K/V and launches once.
    t0 = time.perf_counter()
    prepared = prepare_reference(k_ref, v_ref)
    sync(dev)
    out["prepare_reference_once_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    if cuda:
        variants["incontext_fp8_triton"] = lambda: incontext_attention(q, k, v, prepared, hw)
        variants["split_fp8_triton"] = lambda: split_cached_attention(q, k, v, k_ref, v_ref, hw, A.fp8_attention_lse)
        variants["split_flash_bf16"] = lambda: split_cached_attention(q, k, v, k_ref, v_ref, hw, _flash_lse)
    else:
        variants["incontext_reference_fp32"] = lambda: reference_incontext_attention(q, k, v, prepared, hw)
        variants["split_reference_fp32"] = lambda: split_cached_attention(q, k, v, k_ref, v_ref, hw, A.reference_attention_lse)
    ref = None
    for name, fn in variants.items():
        try:
            peak_reset(dev)
            row = time_calls(fn, dev, warmup, reps).summary()
            o = fn().float()
            row["peak_gib"] = peak_gib(dev)
            if ref is None:
                ref = o
            else:
                row["rel_err_vs_stock"] = round(float((o - ref).norm() / ref.norm()), 5)
                row["speedup_vs_stock"] = round(out["stock_flex_block_mask"]["ms"] / row["ms"], 3)
            del o
        except Exception as exc:  # one variant's failure is recorded, the others still run
            if not _is_oom(exc) and not isinstance(exc, (RuntimeError, TypeError)):
                raise
            row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        out[name] = row
        log(f"  attention {name}: {row}")
        write()


# ------------------------------------------------------------------------------------------- clip
def _clip_inputs(width: int, height: int, frames: int, root: Path):
    from benchmarks.gpu import bench_inputs

    return bench_inputs(width, height, frames, root)


def _profile_forward(comps: Any, geom: Any, kv: Any) -> dict[str, Any]:
    """One cached forward (random inputs, ``kv`` a filled segment cache) under torch.profiler:
    wall ms, the GPU's busy ms (union of kernel intervals), copy ms, and the kernels by total
    time — where a forward's time goes (the attention kernel, GEMMs, fused elementwise)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    inputs = _segment_inputs(comps, geom, seed=1)
    t = torch.tensor(999.0, device=comps.device)

    def run() -> None:
        with torch.no_grad():
            D._forward(comps.transformer, inputs["latents"], t, inputs["prompt"], inputs["reference"], kv, inputs["image"], geom, False, comps.dtype)
        sync(comps.device)

    run()
    t0 = time.perf_counter()
    run()
    plain_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
    wall_ms = (time.perf_counter() - t0) * 1e3
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    busy_ms, copy_ms = gpu_busy_and_copy_ms(kernels)  # busy: the union of the compute kernels' intervals
    top = kernel_totals(kernels)[:30]
    return {"forward_ms": round(plain_ms, 1), "profiled_wall_ms": round(wall_ms, 1), "gpu_busy_ms": round(busy_ms, 1),
            "copy_ms": round(copy_ms, 1),
            "kernels": [{"name": n, "ms": round(ms, 2), "count": c} for n, (ms, c) in top]}  # fmt: skip


def _part_clip_ours(preset: str, dev_name: str, width: int, height: int, frames: int, segment_frames: int | None,
                    accel: Mapping[str, Any], result: dict, write: Callable[[], None], log: Log, *,
                    fit_segments: bool = False, kv_offload: bool = False, cold_loop: bool = True,
                    profile: bool = False) -> None:  # fmt: skip
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.backends.wan_animate_2.backend import WanAnimate2Backend

    opts = _options(preset, dev_name, accel, segment_frames=segment_frames, fit_segments=fit_segments, reference_kv="gpu-lru",
                    kv_fp8=True, kv_lru_gib=200.0, kv_offload=kv_offload)  # fmt: skip
    backend = WanAnimate2Backend(opts)
    length = backend.plan(frames).segment_frames
    side: dict[str, Any] = {"options": {k: str(v) for k, v in opts.as_mapping().items()},
                            "segment_frames": length, "kv_offload": kv_offload,
                            "fit_segments": (f"{frames} frames in segments of {length}" + (
                                f" (the preset's {opts.segment_length} would render whole segments past the clip's end)"
                                if length < opts.segment_length else ", as the preset's")) if fit_segments else None}  # fmt: skip
    result["ours"] = side
    spec = RenderSpec(width=width, height=height)
    with tempfile.TemporaryDirectory(prefix="newsmotion-clip-") as tmp:
        loop, persona = _clip_inputs(width, height, frames, Path(tmp))
        t0 = time.perf_counter()
        backend.load()
        dev = backend.components.device
        side["load_s"] = round(time.perf_counter() - t0, 1)
        side["accelerations"] = backend.accel_report
        t0 = time.perf_counter()
        backend.prepare_guidance(loop, spec)
        side["prepare_guidance_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        backend.prepare_persona(persona, spec)
        side["prepare_persona_s"] = round(time.perf_counter() - t0, 1)
        write()
        log(f"  ours: load {side['load_s']} s, Tier 1 {side['prepare_guidance_s']} s, Tier 2 {side['prepare_persona_s']} s")
        # Warm the K/V LRU (what a warm renderer holds after the loop's first persona) and the compile.
        plan = backend.plan(frames)
        g = backend.load_guidance(loop, spec, frames)
        source = backend.reference_kv_source(loop, g, spec, plan)
        t0 = time.perf_counter()
        for k in range(plan.segments):
            source(k)
        sync(dev)
        side["kv_extract_all_segments_s"] = round(time.perf_counter() - t0, 1)
        side["kv_bytes_per_segment"] = [e["bytes"] for e in backend._kv_log]
        log(f"  ours: K/V of {plan.segments} segments extracted into the LRU in {side['kv_extract_all_segments_s']} s (incl. compile)")
        if dev.type == "cuda":  # the cached graph (FP8 K/V) compiled before the timed clip
            side["compile_warmup_s"] = _compile_warmup(backend.components, backend.geometry(spec, plan), fp8_kv=True, kv=source(0)[0])
        side["vae_warmup_s"] = _vae_warmup(backend.components.vae, width, height)

        arrivals: list[float] = []

        def timed_clip() -> tuple[float, int, float | None]:
            # arrivals: when each composited frame reached this consumer (seconds since the
            # clip's start), set beside the render's own timeline (last_render["timeline"]).
            peak_reset(dev)
            arrivals.clear()
            t0 = time.perf_counter()
            for _ in backend.frames(loop, persona, loop.keypoints, spec):
                arrivals.append(round(time.perf_counter() - t0, 3))
            sync(dev)
            return round(time.perf_counter() - t0, 2), len(arrivals), peak_gib(dev)

        side["clip_s"], n, side["peak_gib"] = timed_clip()
        side["frame_arrival_s"] = list(arrivals)
        side["frames"] = n
        side["last_render"] = backend.last_render
        result["animate2_clip_s"] = side["clip_s"]
        log(f"  ours: {n} frames in {side['clip_s']} s, peak {side['peak_gib']} GiB")
        write()
        if profile and dev.type == "cuda":
            side["profile_one_forward"] = _profile_forward(backend.components, backend.geometry(spec, plan), source(0)[0])
            prof = side["profile_one_forward"]
            log(f"  ours, one cached forward profiled: {prof['forward_ms']} ms, GPU busy {prof['gpu_busy_ms']} ms; "
                + ", ".join(f"{k['name'][:40]} {k['ms']}" for k in prof["kernels"][:8]))
            write()
        if backend.kv_lru is not None and cold_loop:
            # The same clip for a loop the renderer has not seen: the LRU emptied, so each segment's
            # extract pass runs inside the timed clip (graphs already compiled, as in a warm renderer).
            backend.kv_lru.clear()
            side["clip_cold_loop_s"], n, side["clip_cold_loop_peak_gib"] = timed_clip()
            side["clip_cold_loop_last_render"] = backend.last_render
            log(f"  ours, K/V not cached (extract inside the clip): {n} frames in {side['clip_cold_loop_s']} s, "
                f"peak {side['clip_cold_loop_peak_gib']} GiB")
        backend.close()
    write()


def _part_clip_stock(preset: str, dev_name: str, width: int, height: int, frames: int, segment_frames: int | None,
                     steps: int | None, result: dict, write: Callable[[], None], log: Log) -> None:  # fmt: skip
    import PIL.Image
    import torch
    from diffusers.modular_pipelines import WanAnimate2DistilledBlocks

    from newsmotion_engine.accel.fp8 import module_weight_gib
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2.components import load_image_encoder, load_render_components, load_text_encoder

    opts = _options(preset, dev_name, {}, segment_frames=segment_frames)
    side: dict[str, Any] = {"pipeline": "WanAnimate2DistilledModularPipeline", "steps": steps or 10}
    result["stock"] = side
    t0 = time.perf_counter()
    comps = load_render_components(opts)
    dev = comps.device
    tok, te = load_text_encoder(opts, dev)
    pipe = WanAnimate2DistilledBlocks().init_pipeline()
    pipe.update_components(transformer=comps.transformer, vae=comps.vae, image_encoder=load_image_encoder(opts, dev),
                           text_encoder=te, tokenizer=tok, scheduler=comps.new_scheduler())  # fmt: skip
    side["load_s"] = round(time.perf_counter() - t0, 1)
    side["weight_gib"] = round(module_weight_gib(comps.transformer), 3)
    geom = D.geometry(opts.segment_length, width, height)
    if dev.type == "cuda":
        comps.transformer.compile_repeated_blocks()  # the stock docstring: the cached pass needs compile
        side["compile_warmup_s"] = _compile_warmup(comps, geom, fp8_kv=False)
    side["vae_warmup_s"] = _vae_warmup(comps.vae, width, height)
    write()
    with tempfile.TemporaryDirectory(prefix="newsmotion-stock-") as tmp:
        loop, persona = _clip_inputs(width, height, frames, Path(tmp))
        from newsmotion_engine.guidance.driver import ensure_driving_clip

        # The same real driving frames the backend's Tier 1 is built from (the loop's 24 fps clip).
        clip, _ = ensure_driving_clip(loop, width, height)
        driving = [PIL.Image.fromarray(np.asarray(f)) for f in clip.frames]
        image = PIL.Image.fromarray(persona.portrait)
        peak_reset(dev)
        t0 = time.perf_counter()
        out = pipe(prompt="a news anchor waves to the camera", image=image, driving_video=driving, height=height, width=width,
                   segment_frame_length=opts.segment_length, num_inference_steps=steps or 10,
                   generator=torch.Generator().manual_seed(0), output_type="np")  # fmt: skip
        sync(dev)
        side["clip_s"] = round(time.perf_counter() - t0, 2)
        side["frames"] = int(np.asarray(out.get("videos")[0]).shape[0])
        side["peak_gib"] = peak_gib(dev)
    result["animate2_clip_s_stock"] = side["clip_s"]
    log(f"  stock: {side['frames']} frames in {side['clip_s']} s, peak {side['peak_gib']} GiB")
    write()


def _child(args: list[str], json_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "benchmarks.animate2", *args, "--json", str(json_path)]
    return subprocess.Popen(cmd, env={**os.environ, **(env or {})})


def _part_clip(preset: str, dev_name: str, width: int, height: int, frames: int, segment_frames: int | None,
               accel: Mapping[str, Any], budget_s: float, result: dict, write: Callable[[], None], log: Log) -> None:  # fmt: skip
    import torch

    n_gpu = torch.cuda.device_count() if dev_name in ("auto", "cuda") else 0
    common = ["--preset", preset, "--width", str(width), "--height", str(height), "--frames", str(frames),
              "--accel", json.dumps(dict(accel)), "--budget-s", str(budget_s)]  # fmt: skip
    if segment_frames:
        common += ["--segment-frames", str(segment_frames)]
    out: dict[str, Any] = {"layout": "two GPUs, concurrently" if n_gpu >= 2 else "one device, one after the other"}
    result["clip"] = out
    with tempfile.TemporaryDirectory(prefix="newsmotion-clip-json-") as tmp:
        paths = {side: Path(tmp) / f"{side}.json" for side in ("ours", "stock")}
        sides = []
        for i, side in enumerate(("ours", "stock")):
            device = f"cuda:{i}" if n_gpu >= 2 else dev_name
            sides.append((side, ["--part", f"clip-{side}", "--device", device]))
        deadline = time.perf_counter() + budget_s

        def wait(proc: subprocess.Popen) -> int | str:
            try:
                return proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child, past the budget: what it measured so far is in its JSON
                proc.wait()
                return "killed at the budget"

        if n_gpu >= 2:
            procs = [(s, _child([*a, *common], paths[s])) for s, a in sides]
            codes = {s: wait(p) for s, p in procs}
        else:
            codes = {s: wait(_child([*a, *common], paths[s])) for s, a in sides}
        for side, path in paths.items():
            out[side] = read_lab_data(path) if path.is_file() else {"error": f"exit {codes[side]}, no result"}
            out[side]["exit_code"] = codes[side]
    ours, stock = out["ours"].get("animate2_clip_s"), out["stock"].get("animate2_clip_s_stock")
    if ours is not None:
        result["animate2_clip_s"] = ours
    if stock is not None:
        result["animate2_clip_s_stock"] = stock
    if ours and stock:
        result["animate2_clip_speedup_vs_stock"] = round(stock / ours, 3)
        log(f"clip: ours {ours} s, stock {stock} s -> {result['animate2_clip_speedup_vs_stock']}x")
    for side, key in (("ours", "ours"), ("stock", "stock")):
        peak = out[side].get(key, {}).get("peak_gib") if isinstance(out[side].get(key), dict) else None
        result[f"animate2_clip_peak_gib_{side}"] = peak
    write()


# ------------------------------------------------------------------------------------ multistream
def _ms_backend(preset: str, dev_name: str, side: str, width: int, height: int, segment_frames: int | None):
    """Side A: bf16; side B: FP8 linears (on the CPU dry run: FP8 storage). Both with the K/V of
    one segment in their LRU and one segment's conditioning prepared."""
    import torch

    from newsmotion_engine.render.backends.wan_animate_2.backend import WanAnimate2Backend

    cuda = dev_name.startswith("cuda") or (dev_name == "auto" and torch.cuda.is_available())
    accel = {"fp8": "auto"} if side == "b" else {}
    if cuda:
        accel["compile"] = "blocks"  # uncompiled flex attention would materialize the score matrix
    return WanAnimate2Backend(_options(preset, dev_name, accel, segment_frames=segment_frames))


def _ms_workload(backend: Any, width: int, height: int, seed: int):
    """A closure running ``n`` cached forwards (one segment's denoising steps) of ``backend``."""
    import torch

    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    backend.load()
    comps = backend.components
    geom = D.geometry(backend.options.segment_length, width, height)
    inputs = _segment_inputs(comps, geom, seed)
    with torch.no_grad():
        kv = D.extract_reference_kv(comps.transformer, inputs["driving_condition"], inputs["prompt_ref"], inputs["clip"], geom)
    t = torch.tensor(999.0, device=comps.device)

    def run(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                D._forward(comps.transformer, inputs["latents"], t, inputs["prompt"], inputs["reference"], kv, inputs["image"],
                           geom, False, comps.dtype)  # fmt: skip
        sync(comps.device)

    run(1)  # warm-up
    return run


def _part_multistream(preset: str, dev_name: str, width: int, height: int, segment_frames: int | None, forwards: int,
                      result: dict, write: Callable[[], None], log: Log) -> None:  # fmt: skip
    import torch

    ms: dict[str, Any] = {"preset": preset, "forwards_per_side": forwards, "a": "bf16", "b": "FP8 linears",
                          "compile": "regional on a GPU (both sides)",
                          "shape": {"width": width, "height": height, "segment_frames": segment_frames}}  # fmt: skip
    result["multistream"] = ms
    dev = torch.device("cuda" if dev_name == "auto" and torch.cuda.is_available() else ("cpu" if dev_name == "auto" else dev_name))
    a, b = (_ms_backend(preset, dev_name, s, width, height, segment_frames) for s in ("a", "b"))
    peak_reset(dev)
    run_a, run_b = _ms_workload(a, width, height, 1), _ms_workload(b, width, height, 2)
    ms["weights_peak_gib"] = peak_gib(dev)
    run_a(1), run_b(1)  # a second warm-up each (first calls are slower on some backends)

    def serial_once() -> float:
        t0 = time.perf_counter()
        run_a(forwards)
        run_b(forwards)
        return time.perf_counter() - t0

    peak_reset(dev)
    serial_runs = [serial_once(), serial_once()]
    serial = min(serial_runs)  # best of two: the reference the concurrent modes must beat
    ms["serial"] = {"wall_s": round(serial, 3), "wall_s_runs": [round(x, 3) for x in serial_runs],
                    "forwards_per_s": round(2 * forwards / serial, 4), "peak_gib": peak_gib(dev)}  # fmt: skip
    log(f"  multistream serial: {ms['serial']}")
    write()
    peak_reset(dev)
    errors: list[BaseException] = []

    def on_stream(run: Callable[[int], None]) -> None:
        try:
            if dev.type == "cuda":
                with torch.cuda.stream(torch.cuda.Stream(dev)):
                    run(forwards)
            else:
                run(forwards)
        except BaseException as exc:  # re-raised below in the main thread
            errors.append(exc)

    def streams_once() -> float:
        threads = [threading.Thread(target=on_stream, args=(r,)) for r in (run_a, run_b)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        sync(dev)
        if errors:
            raise errors[0]
        return time.perf_counter() - t0

    streams = min(streams_once(), streams_once())
    ms["two_streams"] = {"wall_s": round(streams, 3), "forwards_per_s": round(2 * forwards / streams, 4), "peak_gib": peak_gib(dev),
                         "throughput_vs_serial": round(serial / streams, 3)}  # fmt: skip
    log(f"  multistream two streams: {ms['two_streams']}")
    write()
    a.close(), b.close()
    del run_a, run_b
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory(prefix="newsmotion-ms-") as tmp:
        go = Path(tmp) / "go"
        common = ["--part", "ms-worker", "--preset", preset, "--device", str(dev) if dev.type == "cuda" else "cpu",
                  "--width", str(width), "--height", str(height), "--ms-forwards", str(forwards), "--ms-go", str(go)]  # fmt: skip
        if segment_frames:
            common += ["--segment-frames", str(segment_frames)]
        paths = {s: Path(tmp) / f"{s}.json" for s in ("a", "b")}
        procs = {s: _child([*common, "--ms-side", s], paths[s]) for s in ("a", "b")}
        ready = [Path(tmp) / f"{s}.json.ready" for s in ("a", "b")]
        deadline = time.time() + 900
        while not all(r.exists() for r in ready) and time.time() < deadline and all(p.poll() is None for p in procs.values()):
            time.sleep(0.2)
        go.write_text("go")
        codes = {s: p.wait() for s, p in procs.items()}
        workers = {s: read_lab_data(paths[s]) if paths[s].is_file() else {"exit_code": codes[s]} for s in ("a", "b")}
    if all("start" in w for w in workers.values()):
        wall = max(w["end"] for w in workers.values()) - min(w["start"] for w in workers.values())
        ms["two_processes"] = {"wall_s": round(wall, 3), "forwards_per_s": round(2 * forwards / wall, 4),
                               "peak_gib_sum": round(sum(w.get("peak_gib") or 0 for w in workers.values()), 3) if dev.type == "cuda" else None,
                               "throughput_vs_serial": round(serial / wall, 3), "workers": workers}  # fmt: skip
    else:
        ms["two_processes"] = {"error": "a worker failed", "workers": workers}
    log(f"  multistream two processes: {ms['two_processes'].get('throughput_vs_serial')}x serial")
    best = max(("two_streams", "two_processes"), key=lambda k: ms[k].get("throughput_vs_serial") or 0)
    ms["best"] = best
    result["animate2_ab_throughput_ratio"] = ms[best].get("throughput_vs_serial")
    write()


def _ms_worker(preset: str, dev_name: str, side: str, width: int, height: int, segment_frames: int | None, forwards: int,
               go: Path, result: dict, write: Callable[[], None]) -> None:  # fmt: skip
    import torch

    backend = _ms_backend(preset, dev_name, side, width, height, segment_frames)
    run = _ms_workload(backend, width, height, 1 if side == "a" else 2)
    dev = backend.components.device
    peak_reset(dev)
    Path(str(write.path) + ".ready").write_text("ready")  # type: ignore[attr-defined]
    while not go.exists():
        time.sleep(0.05)
    result["start"] = time.time()
    run(forwards)
    result["end"] = time.time()
    result["peak_gib"] = peak_gib(dev)
    write()
    del torch


# ------------------------------------------------------------------------------------------- entry
def bench_animate2(preset: str = "14b", *, part: str = "forward", width: int | None = None, height: int | None = None,
                   frames: int = 120, segment_frames: int | None = None, device: str = "auto",
                   accel: Mapping[str, Any] | None = None, warmup: int = 1, reps: int = 2, budget_s: float = 540.0,
                   ms_preset: str | None = None, ms_forwards: int = 4, ms_side: str | None = None, ms_go: str | None = None,
                   fit_segments: bool = False, kv_offload: bool = False, cold_loop: bool = True, profile: bool = False,
                   json_path: str | Path | None = None, log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run one part (see the module docstring); returns (and writes, after every measurement) the result."""
    import torch

    if part not in PARTS:
        raise ValueError(f"part {part!r}: use one of {', '.join(PARTS)}")
    tiny = preset == "tiny"
    width = width or (64 if tiny else 720)
    height = height or (128 if tiny else 1280)
    if tiny and frames == 120:
        frames = 13  # two 9-frame segments
    cuda = (device == "auto" and torch.cuda.is_available()) or device.startswith("cuda")
    accel = dict(accel) if accel is not None else _default_accel(cuda)
    dev = torch.device("cuda" if device == "auto" and cuda else ("cpu" if device == "auto" else device))
    result = _header(preset, dev, width=width, height=height, frames=frames, segment_frames=segment_frames)
    result["part"] = part
    result["budget_s"] = budget_s
    write = _Writer(result, json_path)
    deadline = time.perf_counter() + budget_s
    log(f"animate2 bench: part {part}, preset {preset} (random weights), {width}x{height}, device {dev}")
    if part == "ms-worker":
        _ms_worker(ms_preset or preset, device, ms_side or "a", width, height, segment_frames, ms_forwards, Path(ms_go or "go"), result, write)
        return result
    if part in ("forward", "all"):
        _part_forward(preset, device, width, height, segment_frames, accel, warmup, reps, deadline, result, write, log)
    if part in ("attention", "all"):
        _part_attention(preset, dev, width, height, segment_frames, warmup, max(reps, 3), result, write, log)
    if part == "clip-ours":
        _part_clip_ours(preset, device, width, height, frames, segment_frames, accel, result, write, log,
                        fit_segments=fit_segments, kv_offload=kv_offload, cold_loop=cold_loop, profile=profile)
    if part == "clip-stock":
        _part_clip_stock(preset, device, width, height, frames, segment_frames, None, result, write, log)
    if part in ("clip", "all"):
        if time.perf_counter() < deadline:
            _part_clip(preset, device, width, height, frames, segment_frames, accel, max(60.0, deadline - time.perf_counter()), result, write, log)
        else:
            result["clip"] = {"skipped": "budget"}
    if part in ("multistream", "all"):
        if time.perf_counter() < deadline:
            msp = ms_preset or ("tiny" if tiny else "1.3b")
            _part_multistream(msp, device, width, height, segment_frames if msp == preset else None, ms_forwards, result, write, log)
        else:
            result["multistream"] = {"skipped": "budget"}
    write()
    return result


def combine_clip_results(ours_path: str | Path, stock_path: str | Path) -> dict[str, Any]:
    """One clip result from a ``clip-ours`` and a ``clip-stock`` run made in two device calls
    (a 14B side does not fit a 10-minute command with the other): both sides kept whole, the
    speedup computed from their measured ``clip_s``, and the two runs' headers recorded."""
    def read(path: str | Path, label: str, key: str) -> dict[str, Any]:
        try:
            side = read_lab_data(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read the clip-{label} result ({exc})") from None
        if not isinstance(side, dict) or key not in side or not isinstance(side.get("shape"), dict):
            raise ValueError(f"{path}: no {key} in it; is it a finished clip-{label} result?")
        return side

    ours, stock = read(ours_path, "ours", "animate2_clip_s"), read(stock_path, "stock", "animate2_clip_s_stock")
    clip = lambda r: (r.get("preset"), *(r["shape"].get(k) for k in ("width", "height", "frames")))  # noqa: E731
    if clip(ours) != clip(stock):
        raise ValueError(f"{ours_path} and {stock_path} measured different clips (preset, size or frames differ)")
    our_side = ours.get("ours") or {}
    out = {k: ours[k] for k in ("bench", "weights", "note", "preset", "shape", "device", "versions")}
    out.update(part="clip", layout="one GPU; the two sides in two device calls on the same machine kind (one command is limited to 10 minutes)",
               runs={"ours": ours["created_at"], "stock": stock["created_at"]},
               clip={"ours": ours.get("ours"), "stock": stock.get("stock")},
               animate2_clip_s=ours["animate2_clip_s"], animate2_clip_s_stock=stock["animate2_clip_s_stock"],
               animate2_clip_speedup_vs_stock=round(stock["animate2_clip_s_stock"] / ours["animate2_clip_s"], 3),
               animate2_clip_segment_frames=our_side.get("segment_frames"), animate2_clip_peak_gib=our_side.get("peak_gib"),
               animate2_clip_peak_gib_stock=(stock.get("stock") or {}).get("peak_gib"))  # fmt: skip
    cold = our_side.get("clip_cold_loop_s")
    if cold:  # the same clip with each segment's extract pass inside it (a loop not yet in the LRU)
        out.update(animate2_clip_s_cold_loop=cold,
                   animate2_clip_speedup_vs_stock_cold_loop=round(stock["animate2_clip_s_stock"] / cold, 3))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.animate2", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="14b")
    p.add_argument("--part", default="forward", choices=PARTS)
    p.add_argument("--width", type=int)
    p.add_argument("--height", type=int)
    p.add_argument("--frames", type=int, default=120)
    p.add_argument("--segment-frames", type=int)
    p.add_argument("--device", default="auto")
    p.add_argument("--accel", help="JSON of flat acceleration options for our side (default FP8 + compile on a GPU)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--ms-preset")
    p.add_argument("--ms-forwards", type=int, default=4)
    p.add_argument("--ms-side", choices=("a", "b"))
    p.add_argument("--ms-go")
    p.add_argument("--fit-segments", action="store_true", help="ours: the shortest 4k+1 segments that cover the clip")
    p.add_argument("--kv-offload", action="store_true", help="ours: the K/V LRU in pinned host memory (device peak)")
    p.add_argument("--no-cold-loop", action="store_true", help="clip-ours: skip the second clip with the K/V LRU emptied")
    p.add_argument("--profile", action="store_true", help="clip-ours: profile one cached forward after the clip (GPU)")
    p.add_argument("--combine", nargs=2, metavar=("OURS_JSON", "STOCK_JSON"),
                   help="merge a clip-ours and a clip-stock result (two device calls) into --json")
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.combine:
        try:
            combined = combine_clip_results(*a.combine)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if a.json:
            _write_json(Path(a.json), combined)
        else:
            print(json.dumps(combined, indent=2, default=str))
        return 0
    bench_animate2(a.preset, part=a.part, width=a.width, height=a.height, frames=a.frames, segment_frames=a.segment_frames,
                   device=a.device, accel=json.loads(a.accel) if a.accel else None, warmup=a.warmup, reps=a.reps,
                   budget_s=a.budget_s, ms_preset=a.ms_preset, ms_forwards=a.ms_forwards, ms_side=a.ms_side, ms_go=a.ms_go,
                   fit_segments=a.fit_segments, kv_offload=a.kv_offload, cold_loop=not a.no_cold_loop, profile=a.profile,
                   json_path=a.json)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
