"""GPU benchmark of the mimicmotion backend: seconds for the reference design's clip (120 frames
for a 720x1280 canvas, rendered at the native 576x1024 and framed onto it), stock vs ours, peak VRAM.

One random-weight model (``svd-xt-1.1``: the released architecture) renders through the shipped path
(``render_clip`` -> the backend's frames -> the chroma composite):

- ``stock``: the official recipe re-created on diffusers components in bf16: 25 Euler steps, CFG
  2.0 with the unconditional and conditional passes as two UNet calls per window
  (``batch_cfg=False``), 72-frame windows overlapping by 6 with progressive latent fusion, the
  temporal decoder 8 frames at a time; no acceleration;
- ours (:data:`VARIANTS`): the two CFG passes as one batch, then regional ``torch.compile`` of the
  UNet's repeated blocks through the acceleration registry;
  ``...+channels_last`` also puts the convolution weights in NHWC order
  (:mod:`newsmotion_engine.accel.memory_format`); ``...+conv3d_as_2d`` runs the UNet's and the
  temporal decoder's time-only 3-D convolutions as 2-D ones (:mod:`newsmotion_engine.accel.conv3d`); ``+fp8`` runs the linears of the UNet's blocks
  in FP8 (:mod:`newsmotion_engine.accel.fp8`, rowwise scales, as in the Wan transformer);
  ``...+compile_vae`` also compiles the temporal decoder's blocks (:mod:`newsmotion_engine.accel.compile_vae`),
  ``...+fp8_attention`` runs the spatial self-attention on our 8-bit kernel
  (:mod:`newsmotion_engine.render.backends.mimicmotion.attention`);
  ``...+one_key_cross`` computes each cross-attention over the one-token CLIP embedding as its value
  (:mod:`newsmotion_engine.accel.one_key_cross`; exact, less work: the FLOP count says how much);
  ``...+keyframes2`` renders every 2nd frame and infills the rest (the official recipe's own
  15-fps output, ``sample_stride`` 2): an approximation, reported apart (``..._approximate``).

``--combine A.json B.json --json OUT.json`` joins runs that each measured some variants on one
warm machine (:func:`benchmarks.lab_record.combine_runs`).

Each "ours" variant renders once to warm up (compile; at 2 steps, the same shapes) and once timed; stock runs once. Frames are
not encoded (:class:`benchmarks.clip.FrameSink`). With random weights only speed and memory mean
anything.

Example (from the repository root)::

    python -m benchmarks.mimicmotion --json benchmarks/results/mimicmotion_h100.json
    python -m benchmarks.mimicmotion --preset tiny --sizes 80x128 --frames 9 --steps 2   # CPU check

``--profile-steps N``: each row also gets a kernel breakdown of one more clip at N steps, and as its
``one_step`` one step's kernels alone (a second profiled clip at N + 1 steps less the first: the
denoise without the decode; :func:`benchmarks.clip.profile_clip_steps`, :mod:`benchmarks.kernel_profile`),
not in the timed figures::

    bash benchmarks/device_gpu.sh zoo 540 "mimicmotion --variants stock,batch_cfg+compile --profile-steps 1 --budget-s 400"
"""

from __future__ import annotations

import datetime as _dt
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.budget import VariantBudget
from benchmarks.lab_record import COMBINE_HELP, combine_to_record, stock_vs_ours, top_level_figures, write_lab_result

__all__ = ["VARIANTS", "bench_mimicmotion"]

Log = Callable[[str], None]
VARIANTS = ("stock", "batch_cfg", "batch_cfg+compile", "batch_cfg+compile+channels_last", "batch_cfg+compile+conv3d_as_2d",
            "batch_cfg+compile+channels_last+conv3d_as_2d", "batch_cfg+fp8+compile", "batch_cfg+fp8+compile+channels_last",
            "batch_cfg+compile+keyframes2", "batch_cfg+compile+compile_vae", "batch_cfg+compile+compile_vae+fp8_attention",
            "batch_cfg+one_key_cross", "batch_cfg+compile+compile_vae+fp8_attention+one_key_cross",
            "batch_cfg+compile+compile_vae+fp8_attention+one_key_cross+conv3d_as_2d")


def _variants(cuda: bool) -> dict[str, tuple[dict[str, Any], int]]:
    """Variant name -> (backend options over the stock ones, keyframe ratio)."""
    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.compile import Compile
    from newsmotion_engine.accel.compile_vae import CompileVae
    from newsmotion_engine.accel.conv3d import Conv3dAs2d
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.memory_format import ChannelsLast
    from newsmotion_engine.accel.one_key_cross import OneKeyCross

    out: dict[str, tuple[dict[str, Any], int]] = {"stock": ({"batch_cfg": False}, 1), "batch_cfg": ({"batch_cfg": True}, 1),
                                                  "batch_cfg+one_key_cross": ({"batch_cfg": True, "accelerations": (OneKeyCross(),)}, 1)}
    if cuda:
        out["batch_cfg+compile"] = ({"batch_cfg": True, "accelerations": (Compile(),)}, 1)
        # the temporal decoder's blocks compiled too (accel.compile_vae): its eager GroupNorms lead the decode
        out["batch_cfg+compile+compile_vae"] = ({"batch_cfg": True, "accelerations": (CompileVae(), Compile())}, 1)
        # and our 8-bit attention kernel in the spatial self-attention (mimicmotion/attention.py)
        out["batch_cfg+compile+compile_vae+fp8_attention"] = (
            {"batch_cfg": True, "accelerations": (Attention(kernel="fp8-triton"), CompileVae(), Compile())}, 1)
        # and the one-token cross-attention as its value (accel.one_key_cross; exact)
        out["batch_cfg+compile+compile_vae+fp8_attention+one_key_cross"] = (
            {"batch_cfg": True, "accelerations": (Attention(kernel="fp8-triton"), OneKeyCross(), CompileVae(), Compile())}, 1)
        # and the time-only 3-D convolutions (UNet's temporal resnets, the temporal decoder's) as 2-D ones (accel.conv3d)
        out["batch_cfg+compile+compile_vae+fp8_attention+one_key_cross+conv3d_as_2d"] = (
            {"batch_cfg": True, "accelerations": (Attention(kernel="fp8-triton"), OneKeyCross(), Conv3dAs2d(), CompileVae(), Compile())}, 1)
        out["batch_cfg+compile+keyframes2"] = ({"batch_cfg": True, "accelerations": (Compile(),)}, 2)
        # the convolution weights NHWC (accel.memory_format): cuDNN's bf16 convolutions' native layout
        out["batch_cfg+compile+channels_last"] = ({"batch_cfg": True, "accelerations": (ChannelsLast(), Compile())}, 1)
        # the 3-D convolutions (UNet and temporal decoder) as 2-D ones (accel.conv3d)
        out["batch_cfg+compile+conv3d_as_2d"] = ({"batch_cfg": True, "accelerations": (Conv3dAs2d(), Compile())}, 1)
        out["batch_cfg+compile+channels_last+conv3d_as_2d"] = (
            {"batch_cfg": True, "accelerations": (ChannelsLast(), Conv3dAs2d(), Compile())}, 1)
        # the block linears FP8 (accel.fp8; originals kept, so the next variant gets the bf16 UNet back)
        fp8 = Fp8Linears(mode="compute", keep_original=True)
        out["batch_cfg+fp8+compile"] = ({"batch_cfg": True, "accelerations": (fp8, Compile())}, 1)
        out["batch_cfg+fp8+compile+channels_last"] = ({"batch_cfg": True, "accelerations": (fp8, ChannelsLast(), Compile())}, 1)
    return out


def bench_mimicmotion(preset: str = "svd-xt-1.1", *, sizes: Sequence[tuple[int, int]] = ((720, 1280),), frames: int = 120,
                      steps: int = 25, variants: Sequence[str] | None = None, device: str = "auto", dtype: str = "bfloat16",
                      budget_s: float | None = None, profile_steps: int | None = None, json_path: str | Path | None = None,
                      log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every measurement.

    Keys: ``rows`` (size -> variant -> seconds, peak VRAM, windows, UNet calls, native size), and
    per size ``clip_{W}x{H}_s_stock``, ``clip_{W}x{H}_s`` (the fastest every-frame "ours"),
    ``speedup_{W}x{H}`` and, when measured, the keyframes-2 row's ``..._approximate`` figures
    (:func:`benchmarks.lab_record.stock_vs_ours`). ``profile_steps``: each
    row's ``profile`` (a clip at this many steps under the profiler, after the timed one).
    """
    import dataclasses

    import diffusers
    import torch

    from benchmarks.clip import FrameSink, options_replaced, profile_clip_steps
    from benchmarks.gpu import bench_inputs
    from newsmotion_engine.accel import registry
    from newsmotion_engine.bench.timing import peak_gib, peak_reset
    from newsmotion_engine.render.backends.mimicmotion.backend import MimicMotionBackend
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions
    from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.clip import render_clip

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    unknown = set(variants or ()) - set(VARIANTS)
    if unknown:
        raise ValueError(f"variants {sorted(unknown)}: use {', '.join(VARIANTS)}")
    table = _variants(cuda)
    names = [n for n in (variants or VARIANTS) if n in table]
    t_start = time.perf_counter()
    budget = VariantBudget(budget_s)
    result: dict[str, Any] = {"bench": "mimicmotion", "weights": RANDOM_WEIGHTS_LABEL, "preset": preset, "dtype": dtype,
                              "note": "random weights: speed and memory only; frames not encoded",
                              "shape": {"frames": frames, "steps": steps, "sizes": [list(s) for s in sizes]},
                              "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
                              "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__},
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "rows": {}}  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            write_lab_result(json_path, result, title=f"mimicmotion {preset}: a {frames}-frame clip, stock vs ours",
                             headline=top_level_figures(result))  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="newsmotion-mimicmotion-") as tmp_dir:
        tmp = Path(tmp_dir)
        base = MimicMotionOptions(preset=preset, device=device, dtype=dtype, steps=steps, cache_root=str(tmp / "caches"))
        backend = MimicMotionBackend(base)
        backend.load()
        comps = backend.components
        for width, height in sizes:
            key = f"{width}x{height}"
            rows = result["rows"].setdefault(key, {})
            loop, persona = bench_inputs(width, height, frames, tmp / key)
            for name in names:
                if why := budget.next_variant():
                    rows[name] = {"skipped": why}
                    continue
                options, ratio = table[name]
                backend.options = dataclasses.replace(base, **options)
                spec = RenderSpec(width=width, height=height, keyframes=ratio)
                # keyframes 2 infills every other frame: an approximation, beside the exact headline
                row: dict[str, Any] = {"native": list(backend.native(spec)), "keyframes": ratio, "approximate": ratio > 1,
                                       "settings": [c.describe() for c in backend.options.accelerations]}  # fmt: skip
                applied = None
                try:
                    backend.prepare_persona(persona, spec)
                    applied = registry.apply_accelerations(comps, backend.options.accelerations)
                    if name != "stock":  # warm-up (compiles) at 2 steps: the same shapes; stock runs once, as the official script does
                        with options_replaced(backend, {"steps": 2}):
                            render_clip(loop, persona, backend, spec, tmp / "clip.mp4", sink=FrameSink)
                    peak_reset(comps.device)
                    t0 = time.perf_counter()
                    tele = render_clip(loop, persona, backend, spec, tmp / "clip.mp4", sink=FrameSink)
                    stats = tele.backend_info.get("last_render", {})
                    row.update(end_to_end_s=round(time.perf_counter() - t0, 2), peak_vram_gib=peak_gib(comps.device),
                               frames_out=tele.frames, windows=stats.get("windows"), unet_calls=stats.get("unet_calls"),
                               denoise_s=stats.get("denoise_s"), decode_s=stats.get("decode_s"),
                               pose_draw_s=stats.get("pose_draw_s"))  # fmt: skip
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
            stock_vs_ours(result, key, rows)
            write()
        backend.close()
    write()
    return result


def _one_key(options: dict[str, Any]) -> bool:
    """Whether a variant's options compute the one-token cross-attention as its value (less UNet work)."""
    return any(c.technique == "one_key_cross" for c in options.get("accelerations", ()))


def count_flops(record_path: str | Path, json_path: str | Path | None = None, log: Log = print) -> dict[str, Any]:
    """The UNet work of a committed clip record, counted, and the rate each variant's denoise ran at.

    The preset's UNet is built on the meta device (no weights, no compute) and one call over a
    window (``segment_frames`` frames at the row's native size, one guidance row) is counted with
    ``torch.utils.flop_counter`` by operator; a variant's denoise did ``unet_calls`` x rows-per-call
    such windows (two rows per call where its options batch the guidance, one where not), so its
    rate is that work over its measured ``denoise_s``. Counted, not measured: the PoseNet (once per
    window per render) and element-wise work are left out, and the seconds are the record's.
    """
    import json

    import torch
    from diffusers import UNetSpatioTemporalConditionModel

    from benchmarks.flop_count import count_call, write_flops_record
    from newsmotion_engine.accel.one_key_cross import set_one_key_cross
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions

    table = _variants(cuda=True)  # every variant a record may hold
    try:
        record = json.loads(Path(record_path).read_text())
        data = record["data"]
        # a variant the budget skipped holds only its reason: nothing to count
        measured = {size: {name: v for name, v in r.items() if "skipped" not in v} for size, r in data["rows"].items()}
        if data.get("bench") != "mimicmotion" or not all(r and all("native" in v and "denoise_s" in v for v in r.values())
                                                          for r in measured.values()):
            raise ValueError("not a mimicmotion clip record (python -m benchmarks.mimicmotion --json ...)")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{record_path}: {exc}") from None
    preset = MimicMotionOptions(preset=data["preset"]).preset_spec
    frames = preset.segment_frames
    with torch.device("meta"):
        unet = UNetSpatioTemporalConditionModel(**preset.unet).to(torch.bfloat16)
    unet = unet.to("meta")  # a legacy-constructed parameter (AlphaBlender's mix_factor) starts on the CPU
    out: dict[str, Any] = {"bench": "mimicmotion", "part": "flops", "preset": data["preset"], "window_frames": frames,
                           "note": "counted on the meta device (torch.utils.flop_counter: matmuls, convolutions, attention); "
                                   "seconds from the record named in 'source'",
                           "source": {"record": Path(record_path).name, "device": record["device"], "commit": record["commit"]},
                           "rows": {}}  # fmt: skip
    for size, variants in measured.items():
        w, h = next(iter(variants.values()))["native"]
        x = torch.empty(1, frames, unet.config.in_channels, h // 8, w // 8, device="meta", dtype=torch.bfloat16)
        enc = torch.empty(1, 1, unet.config.cross_attention_dim, device="meta", dtype=torch.bfloat16)
        ids = torch.empty(1, 3, device="meta", dtype=torch.bfloat16)
        def count(one_key: bool) -> tuple[int, dict[str, float]]:
            """One window row's FLOP (an exact count; the TFLOP figures are rounded) and its split by
            operator, with the cross-attention as stock or as its one-key value (accel.one_key_cross)."""
            set_one_key_cross(unet, one_key)
            try:
                return count_call(lambda: unet(x, torch.tensor(10.0, device="meta"), enc, ids, return_dict=False))
            finally:
                set_one_key_cross(unet, False)

        per_window, by_op = count(False)
        row: dict[str, Any] = {"native": [w, h], "flop_per_window_row": per_window, "tflop_per_window_row": round(per_window / 1e12, 2),
                               "by_op_tflop": by_op, "variants": {}}  # fmt: skip
        if any(_one_key(table[name][0]) for name in variants):
            one_key_window, row["by_op_tflop_one_key_cross"] = count(True)
            row["flop_per_window_row_one_key_cross"] = one_key_window
            row["tflop_per_window_row_one_key_cross"] = round(one_key_window / 1e12, 2)
        for name, v in variants.items():
            rows_per_call = 2 if table[name][0].get("batch_cfg") else 1  # the variant's own setting
            work = v["unet_calls"] * rows_per_call * (row["flop_per_window_row_one_key_cross"] if _one_key(table[name][0]) else per_window)
            rate = work / 1e12 / v["denoise_s"]
            row["variants"][name] = {"unet_calls": v["unet_calls"], "rows_per_call": rows_per_call, "denoise_flop": work,
                                     "denoise_tflop": round(work / 1e12, 1), "denoise_s": v["denoise_s"], "denoise_tflops": round(rate, 1)}  # fmt: skip
            log(f"{size} {name}: {work / 1e12:.0f} TFLOP in {v['denoise_s']} s = {rate:.0f} TFLOP/s")
        out["rows"][size] = row
    out["device"] = f"{record['device']} (its seconds; the count ran on the CPU)"
    if json_path:
        write_flops_record(out, json_path, "mimicmotion", record_path,
                           title="mimicmotion: the UNet work of the clip, counted, and the rate each variant's denoise ran at")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="svd-xt-1.1")
    parser.add_argument("--sizes", default="720x1280", help="comma-separated WxH render sizes")
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--variants", default=None, help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--profile-steps", type=int, default=None,
                        help="after each timed clip, one more at N steps under torch.profiler (the row's kernel breakdown)")
    parser.add_argument("--combine", nargs="+", metavar="RUN_JSON", help=COMBINE_HELP)
    parser.add_argument("--count-flops", metavar="RECORD_JSON", default=None,
                        help="count the UNet work of a committed clip record on the meta device (no GPU) and each variant's rate")
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    if a.count_flops:
        try:
            count_flops(a.count_flops, a.json)
        except ValueError as exc:
            parser.error(str(exc))  # one line, exit status 2, nothing written
        return
    if a.combine:
        combine_to_record(a.combine, a.json, bench="mimicmotion")
        return
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    bench_mimicmotion(a.preset, sizes=sizes, frames=a.frames, steps=a.steps, dtype=a.dtype,  # type: ignore[arg-type]
                      variants=a.variants.split(",") if a.variants else None, budget_s=a.budget_s,
                      profile_steps=a.profile_steps, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
