"""GPU benchmark of the echomimic-v3 backend: seconds for a talking clip, stock vs ours, peak VRAM.

Per render size (default 768x768, the release's largest, and 720x1280, which the model renders at
576x1024 and frames onto the canvas), one speech of ``seconds`` seconds (random features of the
release's shape, ``[25 fps x seconds, 5, 12, 768]``: with random weights only speed and memory
mean anything) is rendered through the shipped path (``render_clip`` -> the backend's frames ->
the chroma composite) by the same random-weight flash-pro model:

- ``stock``: the official flash-pro recipe re-created on our diffusers components in bf16: 8 UniPC
  steps, the audio pass and the zero-audio pass one after the other (``batch_cfg=False``), no
  acceleration; 81-frame segments overlapping by 8 (the official long-video loop), each seam's
  frames VAE-encoded as released, the zero frames too (``zero_tail.released_encodes``);
- ``ours``: each :data:`VARIANTS` entry (the two guidance passes as one batch, then the registry's
  FP8 linears, regional compile and attention kernel on top) — a warm-up render, then the timed one.
  ``batch_cfg+teacache`` (the release's TeaCache coefficients and threshold) skips calls, an
  approximation: reported beside the others, never the headline. ``...+pad_fold`` adds the Wan
  VAE's spatial padding done by its convolutions (``accel.causal_pad``; exact); ``...+fused_norm``
  also its RMS norms and SiLUs in one Triton pass (``accel.vae_norm``).

Frames are not encoded (no ffmpeg on the GPU machine): :class:`benchmarks.clip.FrameSink` takes them.

Example (from the repository root)::

    python -m benchmarks.echomimic_v3 --json benchmarks/results/echomimic_v3_h100.json
    python -m benchmarks.echomimic_v3 --preset tiny --sizes 64x128 --seconds 0.6 --steps 2   # CPU check

``--profile-steps N``: each row also gets a kernel breakdown of one more clip at N steps, and as its
``one_step`` one step's kernels alone (a second profiled clip at N + 1 steps less the first: the
denoise without the decode; :func:`benchmarks.clip.profile_clip_steps`, :mod:`benchmarks.kernel_profile`),
not in the timed figures::

    bash benchmarks/device_gpu.sh zoo 570 "echomimic_v3 --sizes 768x768 --variants stock,batch_cfg+fp8+compile+fp8_attention --profile-steps 1 --budget-s 450"
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.budget import VariantBudget
from benchmarks.lab_record import stock_vs_ours, top_level_figures, write_lab_result

__all__ = ["VARIANTS", "bench_echomimic"]

Log = Callable[[str], None]


def _variants(cuda: bool) -> dict[str, dict[str, Any]]:
    """Variant name -> backend options on top of the stock ones (the acceleration configs through the registry)."""
    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.causal_pad import CausalPadFold
    from newsmotion_engine.accel.compile import Compile
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.vae_norm import FusedVaeNorm

    from newsmotion_engine.accel.teacache import TeaCache
    from newsmotion_engine.render.backends.echomimic_v3.config import released

    tc = released()["teacache"]
    teacache = TeaCache(threshold=tc["threshold"], warmup_steps=tc["skip_start_steps"], coefficients=tuple(tc["coefficients"]))
    out: dict[str, dict[str, Any]] = {"stock": {"batch_cfg": False}, "batch_cfg": {"batch_cfg": True},
                                      # an approximation (skips calls): reported beside, never the headline
                                      "batch_cfg+teacache": {"batch_cfg": True, "accelerations": (teacache,), "approximate": True}}
    if cuda:
        out["batch_cfg+fp8+compile"] = {"batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile())}
        out["batch_cfg+fp8+compile+fp8_attention"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-triton"))}
        # the Wan VAE's spatial padding done by its convolutions (accel.causal_pad; exact)
        out["batch_cfg+fp8+compile+fp8_attention+pad_fold"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-triton"),
                                                 CausalPadFold())}
        # and its RMS norms + SiLUs in one Triton pass (accel.vae_norm)
        out["batch_cfg+fp8+compile+fp8_attention+pad_fold+fused_norm"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-triton"),
                                                 CausalPadFold(), FusedVaeNorm())}
        # cuDNN's FP8 kernel (nvidia-cudnn-frontend): E4M3 Q/K/V/P/output, error 0.061 against BF16
        # where ours is 0.040 (attention_cudnn_h100.json), so an approximation, never the headline
        out["batch_cfg+fp8+compile+cudnn_fp8_attention"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-cudnn")),
            "approximate": True}
    return out


VARIANTS = ("stock", "batch_cfg", "batch_cfg+teacache", "batch_cfg+fp8+compile", "batch_cfg+fp8+compile+fp8_attention",
            "batch_cfg+fp8+compile+fp8_attention+pad_fold", "batch_cfg+fp8+compile+fp8_attention+pad_fold+fused_norm",
            "batch_cfg+fp8+compile+cudnn_fp8_attention")


def bench_echomimic(preset: str = "flash-pro", *, sizes: Sequence[tuple[int, int]] = ((768, 768), (720, 1280)),
                    seconds: float = 10.0, steps: int = 8, variants: Sequence[str] | None = None, device: str = "auto",
                    budget_s: float | None = None, profile_steps: int | None = None, json_path: str | Path | None = None,
                    log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every measurement.

    Keys: ``rows`` (size -> variant -> seconds, peak VRAM, segments, model size), and per size
    ``clip_{W}x{H}_s_stock``, ``clip_{W}x{H}_s`` (the fastest "ours") and ``speedup_{W}x{H}``.
    ``profile_steps``: each row's ``profile`` (a clip at this many steps under the profiler, after the timed one).
    """
    import diffusers
    import torch

    from benchmarks.clip import FrameSink, profile_clip_steps
    from benchmarks.gpu import bench_inputs
    from newsmotion_engine.accel import registry
    from newsmotion_engine.bench.timing import peak_gib, peak_reset
    from newsmotion_engine.render.backends.echomimic_v3.audio import SpeechAudio
    from newsmotion_engine.render.backends.echomimic_v3.backend import EchoMimicV3Backend
    from newsmotion_engine.render.backends.echomimic_v3.config import RANDOM_WEIGHTS_LABEL, EchoMimicV3Options
    from newsmotion_engine.render.backends.wan.zero_tail import released_encodes
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.clip import render_clip

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    table = _variants(cuda)
    names = [n for n in (variants or VARIANTS) if n in table]
    unknown = set(variants or ()) - set(VARIANTS)
    if unknown:
        raise ValueError(f"variants {sorted(unknown)}: use {', '.join(VARIANTS)}")
    t_start = time.perf_counter()
    budget = VariantBudget(budget_s)
    result: dict[str, Any] = {"bench": "echomimic_v3", "weights": RANDOM_WEIGHTS_LABEL, "preset": preset,
                              "note": "random weights and random audio features: speed and memory only; frames not encoded",
                              "shape": {"seconds": seconds, "steps": steps, "model_fps": 25, "sizes": [list(s) for s in sizes]},
                              "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
                              "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__},
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "rows": {}}  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            write_lab_result(json_path, result, title=f"echomimic-v3 {preset}: a {seconds:g} s talking clip, stock vs ours",
                             headline=top_level_figures(result))  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="newsmotion-echomimic-") as tmp_dir:
        tmp = Path(tmp_dir)
        base = EchoMimicV3Options(preset=preset, device=device, steps=steps, cache_root=str(tmp / "caches"))
        backend = EchoMimicV3Backend(base)
        backend.load()
        comps = backend.components
        shape = backend._audio_shape()
        frames25 = round(seconds * 25)
        rng = np.random.default_rng(0)
        feats = rng.standard_normal((frames25, shape["window"], shape["layers"], shape["channels"])).astype(np.float32)
        speech = SpeechAudio("bench", feats, seconds, "random-features")
        for width, height in sizes:
            key = f"{width}x{height}"
            rows = result["rows"].setdefault(key, {})
            loop, persona = bench_inputs(width, height, 13, tmp / key)
            spec = RenderSpec(width=width, height=height)
            for name in names:
                if why := budget.next_variant():
                    rows[name] = {"skipped": why}
                    continue
                options = {k: v for k, v in table[name].items() if k != "approximate"}
                backend.options = EchoMimicV3Options(**{**base.as_mapping(), **options})
                backend.use_speech_audio(speech)
                row: dict[str, Any] = {"model_size": list(backend.options.model_size(width, height)),
                                       "approximate": bool(table[name].get("approximate")),
                                       "settings": [c.describe() for c in backend.options.accelerations]}  # fmt: skip
                applied = None
                # Stock encodes its seams as the released code does: every frame, the zeros too (ours
                # skips what the zeros alone make: render/backends/wan/zero_tail.py).
                encodes = released_encodes() if name == "stock" else contextlib.nullcontext()
                row["continuation_encode"] = "released" if name == "stock" else "zero-tail"
                try:
                    backend.prepare_persona(persona, spec)
                    applied = registry.apply_accelerations(comps, backend.options.accelerations)
                    if name != "stock":  # warm-up (compiles); stock runs once, as the official script does
                        render_clip(loop, persona, backend, spec, tmp / "clip.mp4", sink=FrameSink)
                    peak_reset(comps.device)
                    t0 = time.perf_counter()
                    with encodes:
                        tele = render_clip(loop, persona, backend, spec, tmp / "clip.mp4", sink=FrameSink)
                    stats = tele.backend_info.get("last_render", {})
                    row.update(end_to_end_s=round(time.perf_counter() - t0, 2), peak_vram_gib=peak_gib(comps.device),
                               frames_out=tele.frames, segments=stats.get("segments"), denoise_s=stats.get("denoise_s"),
                               decode_s=stats.get("decode_s"), teacache_skipped=stats.get("teacache_skipped"))  # fmt: skip
                    if profile_steps:  # after the timed clip, accelerations still applied; not in the timed figures
                        row["profile"] = profile_clip_steps(backend, loop, persona, spec, tmp / "clip.mp4", profile_steps)
                except Exception as exc:  # one failing variant is a result; the others still run
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                finally:
                    if applied is not None:
                        registry.remove_accelerations(comps, applied)
                rows[name] = row
                log(f"{key} {name}: {row}")
                write()
            stock_vs_ours(result, key, rows)  # approximate rows are left out there: the headline is exact
            write()
        backend.close()
    write()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="flash-pro")
    parser.add_argument("--sizes", default="768x768,720x1280", help="comma-separated WxH render sizes")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", default=None, help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--profile-steps", type=int, default=None,
                        help="after each timed clip, one more at N steps under torch.profiler (the row's kernel breakdown)")
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    bench_echomimic(a.preset, sizes=sizes, seconds=a.seconds, steps=a.steps,  # type: ignore[arg-type]
                    variants=a.variants.split(",") if a.variants else None, budget_s=a.budget_s,
                    profile_steps=a.profile_steps, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
