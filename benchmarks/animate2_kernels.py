"""Where a Wan-Animate-2 cached forward's time goes besides attention, per compile setting (GPU;
random weights). The 14B cached forward at 720x1280 x 81 frames spends ~0.8 s of its 9.25 s in
inductor's fused elementwise / reduction kernels (the FP8 linears' row quantizations with their
fused prologues: layer norm + modulation, GELU; RoPE; the attention's quantizations), several
times their memory-bound time (``cb32d61:bench/results/gpu_animate2_clip_ours_81f_kernelform_profile_14b_h200.json``).

This bench builds the 14B architecture with ``--layers`` blocks (same block, same shapes: the
compiled graph is one block's, whatever the count), applies our accelerations (FP8 linears, the
8-bit in-context attention) and, per variant of :class:`~newsmotion_engine.accel.compile.Compile`
(``tuned`` x ``gelu``), compiles afresh, extracts one segment's reference K/V, and times one cached
forward: wall ms (median of ``--reps``) and the kernels by time under torch.profiler, per block.
``--prep-only`` times ``accel/attention_prep.py``'s kernels against the torch path they replace
and counts the values that differ; ``--decode-only`` times the VAE decode of one segment per
cuDNN / memory-layout setting; ``--soak SECONDS`` calls the attention kernel back to back beside
the card's clock and power. ``--rows-sweep`` (or ``--rows-only``, no model) also times the one-pass row quantization of
``accel/fp8_rows.py`` per program shape, beside inductor's compiled quantization of the same input.

    python -m benchmarks.animate2_kernels --json $OUT/wan_animate_2_kernels_h200.json

``--preset tiny`` runs the same code eagerly on the CPU (a dry run: no compile, no profile).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from newsmotion_engine.bench.timing import sync, time_calls

from benchmarks.animate2 import _header, _options, _segment_inputs, _Writer, kernel_totals

__all__ = ["VARIANTS", "bench_decode", "bench_kernels", "bench_prep", "bench_rows", "bench_soak", "main"]

# name -> Compile kwargs, and "prep": the attention's input preparation (Attention.prep; "fused" if unset)
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "prep_torch": {"prep": "torch"},
    "gelu_sigmoid": {"gelu": "sigmoid"},
    "tuned": {"tuned": True},
    "tuned_gelu_sigmoid": {"tuned": True, "gelu": "sigmoid"},
}


def _preset_with_layers(preset: str, layers: int) -> str:
    """Register (once) a copy of ``preset`` with ``layers`` transformer blocks; returns its name."""
    from newsmotion_engine.render.backends.wan_animate_2.config import PRESETS

    if preset not in PRESETS or layers < 1:
        raise ValueError(f"preset {preset!r} with {layers} layers: use one of {', '.join(PRESETS)} and at least 1 layer")
    name = f"{preset}-{layers}layers"
    if name not in PRESETS:
        base = PRESETS[preset]
        PRESETS[name] = dataclasses.replace(base, name=name, transformer={**base.transformer, "num_layers": layers})
    return name


def _kernel_table(comps: Any, geom: Any, kv: Any, inputs: dict[str, Any], blocks: int) -> dict[str, Any]:
    """One cached forward under torch.profiler: CUDA kernels by total ms per block, top 25."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    t = torch.tensor(999.0, device=comps.device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        D._forward(comps.transformer, inputs["latents"], t, inputs["prompt"], inputs["reference"], kv, inputs["image"], geom, False, comps.dtype)
        sync(comps.device)
    totals = kernel_totals([e for e in prof.events() if e.device_type == DeviceType.CUDA], name_chars=110)
    total = sum(ms for _, (ms, _) in totals)
    top = totals[:25]
    return {"kernel_ms_per_block": round(total / blocks, 3),
            "kernels_per_block": [{"name": n, "ms": round(ms / blocks, 3), "count": c} for n, (ms, c) in top]}  # fmt: skip


def _rows_sweep(result: dict[str, Any], write: Any, log: Any) -> None:
    """``accel/fp8_rows.py``'s kernel alone at the 14B segment's shapes, per shape of program
    (values of the row per thread) and division (IEEE, or a reciprocal multiply); next to
    inductor's row quantization of the same input (compiled) and the memory-bound floor."""
    import torch

    from newsmotion_engine.accel import fp8_rows as R

    out: dict[str, Any] = {}
    result["rows_kernel"] = out
    g = torch.Generator("cpu").manual_seed(4)
    for rows, n, gelu in ((79200, 13824, True), (79200, 5120, False)):
        x = (torch.randn(rows, n, generator=g) * 2).to("cuda", torch.bfloat16)
        key = f"{rows}x{n}{'_gelu' if gelu else ''}"
        row: dict[str, Any] = {"floor_ms_at_4_tb_s": round(x.numel() * 3 / 4e12 * 1e3, 3)}
        ref_q, ref_s = R.quantize_rows_reference(x, gelu)
        for vpt in (8, 16, 32, 64):
            for recip in (False, True):
                name = f"{vpt}_per_thread{'_reciprocal' if recip else ''}"
                t = time_calls(lambda: R.launch(x, gelu, values_per_thread=vpt, reciprocal=recip), x.device, 2, 5).summary()  # noqa: B023
                q, s = R.launch(x, gelu, values_per_thread=vpt, reciprocal=recip)
                t["differs_from_reference"] = round(float((q.float() != ref_q.float()).float().mean()), 7)
                row[name] = t
        inductor = torch.compile(lambda t: R.quantize_rows_reference(t, gelu))  # noqa: B023
        row["inductor"] = time_calls(lambda: inductor(x), x.device, 2, 5).summary()  # noqa: B023
        out[key] = row
        log(f"  rows kernel {key}: " + ", ".join(f"{k} {v['ms']}" for k, v in row.items() if isinstance(v, dict)))
        write()
        del x, ref_q, ref_s


def bench_prep(json_path: str | Path | None = None, log: Any = print, tokens: int = 79200, heads: int = 40) -> dict[str, Any]:
    """``accel/attention_prep.py``'s three passes at the 14B segment's shape (CUDA): ms beside the
    torch path compiled (what a block ran before) and eager, and how many of the kernel's 8-bit
    values and scales differ from the eager torch path's."""
    import torch

    from newsmotion_engine.accel import attention_prep as P

    if not torch.cuda.is_available():
        raise ValueError("the attention-prep check needs a CUDA GPU")
    dev = torch.device("cuda")
    result = _header("14b", dev, tokens=tokens, heads=heads)
    result.update(part="attention-prep")
    write = _Writer(result, json_path, f"wan-animate-2 14B attention prep kernel vs torch, {tokens} tokens x {heads} heads")
    g = torch.Generator("cpu").manual_seed(5)
    n, d = heads * 128, 128
    raw = (torch.randn(1, tokens, 3 * n, generator=g) * 2).to(dev, torch.bfloat16)
    q, k, v = raw.chunk(3, dim=-1)  # views of one buffer, as a fused QKV projection hands them on
    k = k + torch.randn(n, generator=g).to(dev, torch.bfloat16)  # channel offsets for the smoothing to remove
    wq, wk = ((1 + 0.1 * torch.randn(n, generator=g)).to(dev, torch.bfloat16) for _ in range(2))
    ang = torch.rand(tokens, d // 2, generator=g).to(dev) * 6
    cos, sin = ang.cos(), ang.sin()
    rks = (torch.rand(1, 1, heads, d, generator=g) * 0.05 + 0.01).to(dev)
    rkm = (torch.randn(1, 1, heads, d, generator=g) * 0.3).to(dev)
    args = (q, k, v, wq, wk, 1e-6, cos, sin, rks, rkm, heads)
    x, r = P.launch(*args)
    rx, rr = P.incontext_prep_reference(*args)
    diffs: dict[str, Any] = {}
    for name, a, b in (("q8", x.q, rx.q), ("k8", x.k, rx.k), ("vt", x.vt, rx.vt), ("reference_q8", r[0], rr[0]),
                       ("q_scale", x.q_scale, rx.q_scale), ("v_scale", x.v_scale, rx.v_scale),
                       ("reference_q_scale", r[1], rr[1]), ("delta", r[2], rr[2])):  # fmt: skip
        a, b = a.float(), b.float()
        diffs[name] = {"differ": round(float((a != b).float().mean()), 7),
                       "max_rel": float(((a - b).abs() / b.abs().clamp_min(1e-30)).max()) if name.endswith(("scale", "delta")) else None,
                       "max_abs": float((a - b).abs().max())}  # fmt: skip
    result["vs_torch"] = diffs
    del x, r, rx, rr
    compiled = torch.compile(P.incontext_prep_reference)
    result["kernels"] = time_calls(lambda: P.launch(*args), dev, 2, 10).summary()
    result["tiles"] = {}  # tokens a program x warps of the stats and quant passes (the default is P.TILE)
    for tile in ((16, 4), (32, 4), (64, 8)):
        result["tiles"][f"{tile[0]}x{tile[1]}"] = time_calls(lambda: P.launch(*args, tile=tile), dev, 2, 10).summary()  # noqa: B023
    result["stats"] = {}  # the stats pass's layout, tokens a program x warps (the default is P.STATS)
    for stats in ((64, 4), (32, 4)):  # a program walking every head of its token block was slower (2026-12-03)
        result["stats"]["{}x{}".format(*stats)] = time_calls(lambda: P.launch(*args, stats=stats), dev, 2, 10).summary()  # noqa: B023
    result["torch_compiled"] = time_calls(lambda: compiled(*args), dev, 2, 10).summary()
    result["torch_eager"] = time_calls(lambda: P.incontext_prep_reference(*args), dev, 1, 3).summary()
    moved = q.numel() * (7 * 2 + 4)  # bytes the passes move: Q, K (rstd), K, V (stats), Q, K, V (quant) read; four 8-bit outputs
    result["passes_bytes_ms_at_4_tb_s"] = round(moved / 4e12 * 1e3, 3)
    log(f"  attention prep: kernels {result['kernels']['ms']} ms, torch compiled {result['torch_compiled']['ms']} ms, "
        f"eager {result['torch_eager']['ms']} ms; tiles " + ", ".join(f"{k} {v['ms']}" for k, v in result["tiles"].items())
        + "; stats " + ", ".join(f"{k} {v['ms']}" for k, v in result["stats"].items())
        + "; differ " + ", ".join(f"{k} {v['differ']}" for k, v in diffs.items()))
    write()
    return result


def bench_decode(json_path: str | Path | None = None, log: Any = print, latent_frames: int = 21) -> dict[str, Any]:
    """The Wan VAE decode of one 81-frame 720x1280 segment (the 14B preset's VAE, random weights,
    bf16; CUDA) with torch's default conv layout ("shipped": what ran before channels-last became
    the CUDA default in ``build_vae``) and with cuDNN's algorithm search and / or channels-last weights:
    ms (median of 2 after a warm-up) and the largest pixel difference from the shipped decode."""
    import torch

    from newsmotion_engine.render.backends.wan.components import build_vae, channels_last_convs
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    if not torch.cuda.is_available():
        raise ValueError("the decode bench needs a CUDA GPU")
    dev = torch.device("cuda")
    opts = _options("14b", "auto", {})
    vae = build_vae(opts, dev, torch.bfloat16)
    result = _header("14b", dev, width=720, height=1280, latent_frames=latent_frames)
    result.update(part="decode", variants={})
    write = _Writer(result, json_path, f"wan-animate-2 VAE decode settings, 720x1280, {latent_frames} latent frames")
    g = torch.Generator("cpu").manual_seed(6)
    latents = torch.randn(16, 1 + latent_frames, 160, 90, generator=g).to(dev)  # reference slot first, as a segment's
    shipped = None
    for name, bench, channels_last in (("shipped", False, False), ("cudnn_benchmark", True, False),
                                       ("channels_last_3d", False, True), ("channels_last_3d_cudnn_benchmark", True, True)):  # fmt: skip
        torch.backends.cudnn.benchmark = bench
        channels_last_convs(vae, channels_last)
        with torch.no_grad():
            row = time_calls(lambda: D.decode_segment(vae, latents), dev, 1, 2).summary()
            out = D.decode_segment(vae, latents).float()
        shipped = out if shipped is None else shipped
        row["max_abs_diff_vs_shipped"] = float((out - shipped).abs().max())
        row["mean_abs_diff_vs_shipped"] = float((out - shipped).abs().mean())
        result["variants"][name] = row
        log(f"  decode {name}: {row['ms']} ms, max |diff| {row['max_abs_diff_vs_shipped']:.4f}")
        write()
        del out
    torch.backends.cudnn.benchmark = False
    return result


def bench_soak(json_path: str | Path | None = None, log: Any = print, seconds: float = 90.0) -> dict[str, Any]:
    """The in-context attention kernel alone at the 14B cached pass's shape (79200 generation
    tokens, 21 x 3600 reference, 40 heads), called back to back for ``seconds`` as a clip calls
    it (CUDA): each call's ms next to the card's SM clock, power and temperature (``nvidia-smi``
    once a second) — whether the 171–180 ms a layer spread between runs is the card's state."""
    import subprocess
    import threading

    import torch

    from newsmotion_engine.accel import attention_prep as P
    from newsmotion_engine.accel.attention_incontext import _kernel_op, prepare_reference

    if not torch.cuda.is_available():
        raise ValueError("the attention soak needs a CUDA GPU")
    dev = torch.device("cuda")
    S, hw, H, D = 79200, 3600, 40, 128
    result = _header("14b", dev, tokens=S, reference_tokens=S - hw, heads=H)
    result.update(part="attention-soak", seconds=seconds)
    write = _Writer(result, json_path, f"wan-animate-2 14B in-context attention kernel under a {seconds:g} s soak")
    g = torch.Generator("cpu").manual_seed(7)
    q, k, v = ((torch.randn(1, S, H * D, generator=g) * 2).to(dev, torch.bfloat16) for _ in range(3))
    w = torch.ones(H * D, device=dev, dtype=torch.bfloat16)
    ang = torch.rand(S, D // 2, generator=g).to(dev) * 6
    ref = prepare_reference(*((torch.randn(1, S - hw, H, D, generator=g)).to(dev, torch.bfloat16) for _ in range(2)))
    x, (rq, rqs, delta) = P.incontext_prep(q, k, v, w, w, 1e-6, ang.cos(), ang.sin(), ref.k_scale, ref.k_mean, H)
    del q, k, v
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def poll() -> None:
        t0 = time.perf_counter()
        while not stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.split(",")  # fmt: skip
            if len(out) == 3:
                samples.append({"t_s": round(time.perf_counter() - t0, 1), "sm_mhz": float(out[0]), "power_w": float(out[1]),
                                "temp_c": float(out[2])})  # fmt: skip
            stop.wait(1.0)

    poller = threading.Thread(target=poll, daemon=True)
    calls: list[dict[str, float]] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _kernel_op(*x, rq, rqs, delta, ref.k, ref.vt, ref.v_scale, hw, "int8qk-fp8pv")  # compile
    torch.cuda.synchronize()
    poller.start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        start.record()
        _kernel_op(*x, rq, rqs, delta, ref.k, ref.vt, ref.v_scale, hw, "int8qk-fp8pv")
        end.record()
        end.synchronize()
        calls.append({"t_s": round(time.perf_counter() - t0, 2), "ms": round(start.elapsed_time(end), 2)})
    stop.set()
    poller.join()
    result["calls"], result["smi"] = calls, samples
    ms = [c["ms"] for c in calls]
    tenth = max(1, len(ms) // 10)
    result["first_tenth_ms"] = round(sorted(ms[:tenth])[tenth // 2], 2)
    result["last_tenth_ms"] = round(sorted(ms[-tenth:])[tenth // 2], 2)
    log(f"  attention soak: {len(ms)} calls, median of the first tenth {result['first_tenth_ms']} ms, of the last "
        f"{result['last_tenth_ms']} ms; SM clock {min(s['sm_mhz'] for s in samples):.0f}-{max(s['sm_mhz'] for s in samples):.0f} MHz, "
        f"power up to {max(s['power_w'] for s in samples):.0f} W, up to {max(s['temp_c'] for s in samples):.0f} C")
    write()
    return result


def bench_rows(json_path: str | Path | None = None, log: Any = print) -> dict[str, Any]:
    """Only the row-quantization sweep (:func:`_rows_sweep`; CUDA)."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError("the row-quantization sweep needs a CUDA GPU")
    result = _header("14b", torch.device("cuda"), rows=79200)
    result.update(part="rows-kernel")
    write = _Writer(result, json_path, "FP8 row quantization kernel vs inductor, 79200 rows")
    _rows_sweep(result, write, log)
    write()
    return result


def bench_kernels(preset: str = "14b", *, layers: int = 2, width: int = 720, height: int = 1280, variants: tuple[str, ...] = tuple(VARIANTS),
                  reps: int = 3, rows_sweep: bool = False, json_path: str | Path | None = None,
                  log: Any = print) -> dict[str, Any]:  # fmt: skip
    import torch

    from newsmotion_engine.accel.compile import Compile, compile_blocks, uncompile_blocks
    from newsmotion_engine.accel.registry import apply_accelerations
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components
    from newsmotion_engine.render.backends.wan_animate_2.denoise import geometry
    from newsmotion_engine.render.backends.wan_animate_2.kv import quantize_cache

    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}: use {', '.join(VARIANTS)}")
    cuda = torch.cuda.is_available()
    name = _preset_with_layers(preset, layers)
    accel = {"fp8": "auto", "attention": "fp8-triton"} if cuda else {}
    opts = _options(name, "auto", accel)
    comps = load_render_components(opts)
    dev = comps.device
    geom = geometry(opts.segment_length, width, height)
    result = _header(preset, dev, width=width, height=height, segment_frames=geom.segment_frames)
    result.update(part="kernels", layers=layers, tokens_generation=geom.seq_len, variants={})
    write = _Writer(result, json_path, f"wan-animate-2 {preset} block forward per compile setting ({layers} layers, {width}x{height}), kernels by time")
    result["accelerations"] = apply_accelerations(comps, opts.accelerations).report
    inputs = _segment_inputs(comps, geom)
    t = torch.tensor(999.0, device=dev)
    ref = None
    for v in variants:
        settings = dict(VARIANTS[v])
        prep = settings.pop("prep", "fused")
        row: dict[str, Any] = {"compile": settings, "prep": prep}
        result["variants"][v] = row
        t0 = time.perf_counter()
        uncompile_blocks(comps.transformer)
        for block in comps.transformer.blocks:  # read when a block is traced: set before compiling
            if hasattr(block.self_attn.processor, "prep"):
                block.self_attn.processor.prep = prep
        if cuda:
            row["report"] = compile_blocks(comps.transformer, Compile(fullgraph=False, **settings))
        with torch.no_grad():
            kv = quantize_cache(D.extract_reference_kv(comps.transformer, inputs["driving_condition"], inputs["prompt_ref"], inputs["clip"], geom))

            def forward() -> Any:
                return D._forward(comps.transformer, inputs["latents"], t, inputs["prompt"], inputs["reference"], kv, inputs["image"], geom, False, comps.dtype)

            first = forward()
            sync(dev)
            row["compile_and_first_call_s"] = round(time.perf_counter() - t0, 1)
            row["forward"] = time_calls(forward, dev, 1, reps).summary()
            row["forward_ms_per_block"] = round(row["forward"]["ms"] / layers, 2)
            out = forward().float()
            ref = out if ref is None else ref
            row["rel_diff_vs_first_variant"] = round(float((out - ref).norm() / ref.norm()), 6)
            del first, out
        if cuda:
            row.update(_kernel_table(comps, geom, kv, inputs, layers))
        del kv
        log(f"  {v}: forward {row['forward']['ms']} ms ({row['forward_ms_per_block']} ms a block), "
            f"compile + first call {row['compile_and_first_call_s']} s, diff vs {variants[0]} {row['rel_diff_vs_first_variant']}")
        write()
    uncompile_blocks(comps.transformer)
    if rows_sweep and cuda:
        _rows_sweep(result, write, log)
    write()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.animate2_kernels", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="14b")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=720)
    p.add_argument("--height", type=int, default=1280)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rows-sweep", action="store_true", help="also time accel/fp8_rows.py's kernel per program shape (GPU)")
    p.add_argument("--rows-only", action="store_true", help="only the row-quantization sweep (GPU)")
    p.add_argument("--prep-only", action="store_true", help="only the attention-prep kernels vs the torch path (GPU)")
    p.add_argument("--decode-only", action="store_true", help="only the VAE decode of one segment per cuDNN / layout setting (GPU)")
    p.add_argument("--soak", type=float, metavar="SECONDS", help="only the attention kernel back to back, with the card's clock and power (GPU)")
    p.add_argument("--json")
    a = p.parse_args(argv)
    try:
        if a.prep_only:
            bench_prep(a.json)
            return 0
        if a.decode_only:
            bench_decode(a.json)
            return 0
        if a.soak:
            bench_soak(a.json, seconds=a.soak)
            return 0
        if a.rows_only:
            bench_rows(a.json)
            return 0
        res = bench_kernels(a.preset, layers=a.layers, width=a.width, height=a.height, variants=tuple(a.variants.split(",")),
                            reps=a.reps, rows_sweep=a.rows_sweep,
                            json_path=a.json)  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not a.json:
        print(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
