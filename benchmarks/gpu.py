"""GPU benchmark of the ``wan-animate`` backend against stock diffusers (lab harness).

Parts, each fitting one 10-minute device command:

- ``part="forward"``: the engine's forward benchmark
  (:func:`newsmotion_engine.bench.gpu.bench_forward`: every acceleration alone and together, and
  the attention micro-benchmark).
- ``part="render"``: one segment end to end at ``steps`` steps and ``guidance_scale``: the stock
  ``WanAnimatePipeline`` (prompt embeddings passed in, because the pipeline's prompt cleaning needs
  ``ftfy``; the text encoding is timed separately and added to its end-to-end time) vs the shipped
  backend path: ``WanAnimateBackend`` loads the components, its ``prepare_guidance`` /
  ``prepare_persona`` build the sub-caches, the base accelerations are applied through the
  registry, and each ``RENDER_VARIANTS`` entry (TeaCache, CFG window / one-pass momentum CFG) is
  applied, rendered with ``segment.render_segment`` (the denoise ``frames()`` calls per segment, then the whole decode)
  and removed again; same inputs, same initial noise; PSNR/SSIM of our frames vs the stock frames
  (:mod:`newsmotion_engine.video.compare`), transformer forwards run / skipped, CFG passes and
  FLOPs saved.
- ``part="all"``: both, the render taking the forward part's measured attention when asked.

Also :func:`backend_smoke` (a whole clip through the backend's entry points) and
:func:`attention_config_sweep` (every autotune config of the FP8 attention kernel). JSON callers
(``benchmarks/device_gpu.sh``) may give flat option mappings, parsed by the same parser as the
CLI's ``-o``. With random weights (the presets) errors and PSNR measure numerical drift only.

    python -m benchmarks.gpu --part render --preset 14b --json OUT.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.accel.attention import Attention
from newsmotion_engine.accel.cfg import CFGSchedule
from newsmotion_engine.accel.compile import Compile
from newsmotion_engine.accel.fp8 import Fp8Linears
from newsmotion_engine.accel.memory import FfnChunks, VaeTiling
from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.accel.teacache import TeaCache
from newsmotion_engine.bench.gpu import bench_forward, result_header, token_count
from newsmotion_engine.bench.timing import peak_gib, peak_reset, rel_err, sync, time_calls

from benchmarks.lab_record import write_lab_result

__all__ = ["RENDER_VARIANTS", "attention_config_sweep", "backend_smoke", "bench_gpu", "bench_inputs", "stock_reference"]

Log = Callable[[str], None]


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
        timed = time_calls(sdpa, dev, 1, reps)
    ref = timed.output
    res: dict[str, Any] = {"shape": [1, tokens, heads, dim], "cudnn_ms": round(timed.median_ms, 2), "configs": {}}
    log(f"cudnn: {res['cudnn_ms']} ms")
    kernel = A._build_kernel(autotune=False)
    for name in variants or tuple(A.FP8_VARIANTS):
        x = A.quantize_attention_inputs(q, k, v, name)
        for bm, bn, w, st, pipe in configs or A.AUTOTUNE_CONFIGS:
            key = f"{name} {bm}x{bn} w{w} s{st}" + (" pipelined" if pipe else "")
            try:
                timed = time_calls(lambda: A.launch_kernel(kernel, x, name, BLOCK_M=bm, BLOCK_N=bn, PIPELINE_QK=pipe,
                                                           num_warps=w, num_stages=st), dev, 1, reps)  # fmt: skip
                ms, first, out = timed.median_ms, timed.first_call_ms, timed.output
                res["configs"][key] = {"kernel_ms": round(ms, 2), "tflops": round(flops / ms / 1e9, 1),
                                       "compile_ms": round(first, 1), "rel_err_vs_cudnn": round(rel_err(out, ref), 5)}  # fmt: skip
            except Exception as exc:
                res["configs"][key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            log(f"{key}: {res['configs'][key]}")
        del x
    return res



def _psnr_ssim(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean PSNR over every frame and mean luma SSIM over every 8th, the product's measures
    (:mod:`newsmotion_engine.video.compare`)."""
    from newsmotion_engine.video.compare import psnr_db, ssim_luma

    psnr = float(np.mean([psnr_db(x, y) for x, y in zip(a, b)]))
    ssim = float(np.mean([ssim_luma(x, y) for x, y in zip(a[::8], b[::8])]))
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
    from newsmotion_engine.render.backends.wan.artifacts import reference_frame
    from newsmotion_engine.render.backends.wan.encoders import encode_image_tokens

    ref = reference_frame(persona, width, height, RenderSpec(width=width, height=height).background)
    pipe.encode_image = lambda image, device=None: encode_image_tokens(image_encoder, ref, device).to(device)
    return Image.fromarray(ref)

@dataclass
class StockInputs:
    """What the stock pipeline is given, made as ours makes it."""

    processor: Any  # the CLIP image processor
    image_encoder: Any
    prompt_embeds: Any  # [the bench prompt, the empty negative prompt]
    text_encode_s: float  # the prompt encoding's time: the stock side's end-to-end time includes it
    pose_frames: np.ndarray  # the pose video ours draws (the retargeted loop in Wan's style on the reference person)
    face_frames: np.ndarray  # the reference's face-sized image, shifted a pixel per frame


def stock_inputs(opts: Any, comps: Any, loop: Any, persona: Any, width: int, height: int, frames: int) -> StockInputs:
    """The stock side's encoders and inputs for ``frames`` frames; the text encoder is freed once
    the prompts are encoded."""
    import torch
    from PIL import Image

    from newsmotion_engine.render.backends.wan.components import load_text_encoder
    from newsmotion_engine.render.backends.wan.encoders import encode_prompts
    from newsmotion_engine.render.backends.wan_animate import caches as C
    from newsmotion_engine.render.backends.wan_animate.components import load_image_encoder
    from newsmotion_engine.render.clip import retargeted_keypoints

    device = comps.device
    processor, image_encoder = load_image_encoder(opts, device)
    image_encoder = image_encoder.to(comps.dtype)
    tokenizer, text_encoder = load_text_encoder(opts, device)
    t0 = time.perf_counter()
    emb = encode_prompts(tokenizer, text_encoder, [BENCH_PROMPT, ""], device)
    sync(device)
    text_s = time.perf_counter() - t0
    del text_encoder
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    pose = C.pose_frames(persona, retargeted_keypoints(loop, persona)[:frames], width, height)
    size = int(comps.transformer.config.motion_encoder_size)
    face_image = np.asarray(Image.fromarray(persona.portrait).resize((size, size)))
    face = np.stack([np.roll(face_image, i, axis=1) for i in range(frames)])
    return StockInputs(processor, image_encoder, emb, text_s, pose, face)


def stock_pipeline(comps: Any, processor: Any, image_encoder: Any) -> tuple[Any, dict[str, int], Any]:
    """diffusers' stock ``WanAnimatePipeline`` over the backend's loaded components (no text
    encoder: prompt embeddings are passed in), the count of its transformer forwards
    (``calls["n"]``) and the hook that counts them (``.remove()`` it after the stock run)."""
    from diffusers import WanAnimatePipeline

    pipe = WanAnimatePipeline(tokenizer=None, text_encoder=None, vae=comps.vae, scheduler=comps.new_scheduler(),
                              image_processor=processor, image_encoder=image_encoder, transformer=comps.transformer)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    calls = {"n": 0}
    hook = comps.transformer.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    return pipe, calls, hook


def _bench_render(opts: Any, width: int, height: int, frames: int, steps: int, log: Log, accel: Sequence[AccelConfig],
                  guidance_scale: float = 1.0, variants: Mapping[str, Sequence[AccelConfig]] | None = None,
                  warmup_steps: int = 2, deadline: float = math.inf,
                  save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Stock WanAnimatePipeline vs the shipped backend path, one segment, same inputs and noise.

    ``accel`` (FP8, attention, compile, VAE tiling, FFN chunks) is applied once after the stock
    run; then each of ``variants`` (configs applied before and removed after the variant; default:
    the ``"all"`` entry of :data:`RENDER_VARIANTS`) renders the same segment through
    :func:`~newsmotion_engine.render.backends.wan_animate.segment.render_segment`. With ``compile`` on, a
    ``warmup_steps``-step render (both CFG passes) pays compilation and autotuning first.
    """
    import torch
    from PIL import Image

    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.fp8 import module_weight_gib
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.backends.wan_animate import caches as C
    from newsmotion_engine.render.backends.wan_animate import segment as S
    from newsmotion_engine.render.backends.wan_animate.backend import WanAnimateBackend
    from newsmotion_engine.render.backends.wan.segments import plan_segments

    variants = dict(variants) if variants is not None else {"all": RENDER_VARIANTS["all"]}
    base_types = {type(c) for c in accel}
    for name, configs in variants.items():
        clash = base_types & {type(c) for c in configs}
        if clash:
            raise ValueError(f"render variant {name!r} repeats base acceleration(s) {sorted(t.__name__ for t in clash)}")
    use_cfg = guidance_scale > 1.0
    res: dict[str, Any] = {"steps": steps, "frames": frames, "size": [width, height], "guidance_scale": guidance_scale,
                           "tokens": token_count(dict(opts.preset_spec.transformer), width, height, frames)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="newsmotion-bench-") as tmp:
        bopts = dataclasses.replace(opts, steps=steps, guidance_scale=guidance_scale, segment_frames=frames, prompt=BENCH_PROMPT,
                                    negative_prompt="", accelerations=(), cache_root=str(Path(tmp) / "caches"))  # fmt: skip
        backend = WanAnimateBackend(bopts)
        t0 = time.perf_counter()
        backend.load()  # the backend's own component loading (no accelerations yet: stock runs first)
        comps = backend.components
        device, dtype = comps.device, comps.dtype
        # Inputs: a synthetic reference image and what the stock side is given of it.
        loop, persona = bench_inputs(width, height, frames, Path(tmp))
        spec = RenderSpec(width=width, height=height, seed=0)
        si = stock_inputs(bopts, comps, loop, persona, width, height, frames)
        img_enc, emb, text_s, pose_frames, face_frames = si.image_encoder, si.prompt_embeds, si.text_encode_s, si.pose_frames, si.face_frames
        log(f"render components built in {time.perf_counter() - t0:.1f}s")
        t_lat = (frames - 1) // 4 + 1
        h, w = height // 8, width // 8
        noise = torch.randn((1, 16, t_lat + 1, h, w), generator=torch.Generator("cpu").manual_seed(0))

        pipe, stock_calls, counter = stock_pipeline(comps, si.processor, img_enc)
        peak_reset(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            stock = pipe(image=stock_reference(pipe, img_enc, persona, width, height), pose_video=[Image.fromarray(f) for f in pose_frames],
                         face_video=[Image.fromarray(f) for f in face_frames], prompt_embeds=emb[0:1].to(device, dtype),
                         negative_prompt_embeds=emb[1:2].to(device, dtype) if use_cfg else None,
                         height=height, width=width, segment_frame_length=frames, num_inference_steps=steps,
                         guidance_scale=guidance_scale, latents=noise.to(device), output_type="np").frames[0]  # fmt: skip
        sync(device)
        stock_s = time.perf_counter() - t0
        counter.remove()
        stock_u8 = (np.clip(stock, 0, 1) * 255).round().astype(np.uint8)
        res["stock"] = {"pipeline_s": round(stock_s, 2), "text_encode_s": round(text_s, 2), "end_to_end_s": round(stock_s + text_s, 2),
                        "peak_vram_gib": peak_gib(device), "transformer_forwards": stock_calls["n"]}  # fmt: skip
        log(f"render stock: {res['stock']}")
        if save is not None:
            save(res)
        del pipe, img_enc, si
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

        # The backend's sub-caches, built by its own prepare_* (timed separately: not paid per render).
        t0 = time.perf_counter()
        backend.prepare_guidance(loop, spec)
        backend.prepare_persona(persona, spec)
        sync(device)
        res["cache_build_s"] = round(time.perf_counter() - t0, 2)
        g, p = backend.load_guidance(loop, spec), backend.load_persona(persona, spec)
        plan = plan_segments(frames, frames, bopts.prev_frames)

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
            peak_reset(device)
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
                   "peak_vram_gib": peak_gib(device), "psnr_vs_stock": psnr, "ssim_vs_stock": ssim,
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
    from newsmotion_engine.render.backends.wan_animate.config import parse_accelerations

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


def _headline(result: Mapping[str, Any]) -> dict[str, float]:
    figures = {}
    if result.get("forward_speedup_vs_stock") is not None:
        figures["forward speedup vs stock (x)"] = result["forward_speedup_vs_stock"]
    if result.get("render", {}).get("render_speedup_vs_stock") is not None:
        figures["render speedup vs stock (x)"] = result["render"]["render_speedup_vs_stock"]
        figures["PSNR vs stock (dB)"] = result["render"]["ours"]["psnr_vs_stock"]
    return figures


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
    import torch

    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

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
    result = result_header(preset, dev, width, height, frames)
    t0 = time.perf_counter()
    deadline = t0 + budget_s if budget_s else math.inf

    def write() -> None:
        if json_path is not None:
            result["wall_s"] = round(time.perf_counter() - t0, 1)
            write_lab_result(json_path, result, title=f"wan-animate {preset} {part}: stock vs ours, {width}x{height}x{frames}",
                             headline=_headline(result))  # fmt: skip

    def saver(key: str) -> Callable[[dict[str, Any]], None]:
        def save(partial: dict[str, Any]) -> None:
            result[key] = partial
            write()

        return save

    if part in ("forward", "all"):
        result["forward"] = bench_forward(opts, width, height, frames, warmup, reps, log, variants=forward_variants,
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("forward", "render", "all", "sweep"))
    p.add_argument("--preset", default="14b")
    p.add_argument("--kwargs", default="{}", help="JSON of further bench_gpu keyword arguments")
    p.add_argument("--json", required=True, help="where the result record goes")
    p.add_argument("--shape", action="append", default=None, metavar="TOKENS,HEADS,DIM",
                   help="sweep: an attention shape (repeatable; default the 14B Wan segment's 75600,40,128). "
                        "Champ's 40-wide heads run padded to 64: e.g. 7296,384,64 (24 frames x 2 rows x 8 heads of 7,296 tokens)")  # fmt: skip
    p.add_argument("--variants", default=None, help="sweep: comma-separated FP8 kernel variants (default all)")
    a = p.parse_args(argv)
    if a.part == "sweep":
        shapes = [tuple(int(n) for n in s.split(",")) for s in a.shape or ["75600,40,128"]]
        if any(len(s) != 3 for s in shapes):
            p.error("--shape takes TOKENS,HEADS,DIM")
        variants = tuple(a.variants.split(",")) if a.variants else None
        from newsmotion_engine.accel.attention import FP8_VARIANTS

        if variants and (unknown := sorted(set(variants) - set(FP8_VARIANTS))):
            p.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(FP8_VARIANTS)}")
        if len(shapes) == 1:  # the record's layout as before: one shape at the top level
            res = attention_config_sweep(*shapes[0], variants=variants)
            headline = {"cuDNN attention (ms)": res["cudnn_ms"]}
        else:
            res = {"shapes": {"x".join(map(str, s)): attention_config_sweep(*s, variants=variants) for s in shapes}}
            headline = {f"cuDNN attention at {k} (ms)": r["cudnn_ms"] for k, r in res["shapes"].items()}
        write_lab_result(a.json, {**res, "device": _device_name()}, title="FP8 attention kernel: every autotune config vs cuDNN",
                         headline=headline)
        return 0
    bench_gpu(a.preset, part=a.part, json_path=a.json, **json.loads(a.kwargs))
    return 0


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    raise SystemExit(main())
