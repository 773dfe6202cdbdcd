"""GPU benchmark of the video models' 3-D convolutions: where SVD's temporal decode and UNet
forward spend their time, what running the 3-D convolutions as 2-D ones
(:mod:`newsmotion_engine.accel.conv3d`) and channels-last weights
(:mod:`newsmotion_engine.accel.memory_format`) change, and the same for the Wan VAE.

Random weights in the released architectures (SVD-xt-1.1 for mimicmotion, Wan-Animate-2's VAE), at
the reference clip's shapes (SVD: 576x1024, latents 72x128, bf16; Wan: 720x1280). Parts, run in the
order given (``--parts``, default ``wan_decode,convs,decode,unet``):

- ``wan_decode``: the Wan VAE (a causal 3-D VAE whose convolutions span space and time) decoding 5
  latent frames (17 frames): float32 channels-last-3d as the Wan backends load it, with
  ``..._pad_fold`` (the spatial padding done by the convolution, :mod:`newsmotion_engine.accel.causal_pad`),
  ``..._fused_norm`` (the RMS norms and their SiLU in one Triton pass, :mod:`newsmotion_engine.accel.vae_norm`),
  ``..._as_2d`` (each 3-D convolution as one 2-D convolution per temporal tap, summed) and both,
  float32 contiguous, and bf16 with and without ``..._as_2d``; each with its FLOPs counted
  (``torch.utils.flop_counter``) and the rate they imply; then (``encode``) the encode of 17
  frames, as the continuation runs it, float32 channels-last stock, ``_pad_fold``, ``_pad_fold_fused_norm``
  and ``_pad_fold_as_2d``;
- ``wan_continuation``: the encode a Wan continuation runs (1 frame, then 80 zero frames) with
  the VAE as the clip bench's "ours" loads it (float32, channels-last, ``causal_pad_fold``,
  ``fused_vae_norm``): the plain encode against :func:`~newsmotion_engine.render.backends.wan.zero_tail.encode_then_zeros`,
  its first call at the size (it keeps each unit's steady frame) apart from later ones, with the
  FLOPs each runs, the unit calls skipped and the largest difference;
- ``convs``: one convolution per (channels, size) alone: SVD's time-only ``(3, 1, 1)`` ones (bf16),
  then Wan's causal ``(3, 3, 3)`` ones as its decoder runs them (float32 and bf16), each as 3-D and
  as 2-D, contiguous and channels-last, with its rate;
- ``decode``: SVD's temporal decoder on one official chunk of 8 frames (``decode_chunk``), and on a GPU also
  with its mid and up blocks compiled (``compile_vae``, :mod:`newsmotion_engine.accel.compile_vae`; its first call apart);
- ``unet``: one SVD UNet forward on a 72-frame window with both guidance halves batched (batch 2);
  on a GPU also with its repeated blocks compiled (as ``-o compile=blocks``), profiled.

Each variant: the median of ``--repeats`` timed calls after a warm-up, and the largest absolute
difference from the stock output relative to the stock output's largest magnitude. The stock
decode and UNet forward are also run once under the profiler (:func:`benchmarks.kernel_profile.profile_call`).

Example (device, repository root; nothing is compiled)::

    python -m benchmarks.conv3d --json $OUT/conv3d_h100.json
    python -m benchmarks.conv3d --device cpu --small   # CPU check of the code path
"""

from __future__ import annotations

import argparse
import datetime as _dt
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.lab_record import top_level_figures, write_lab_result

__all__ = ["bench_conv3d"]

Log = Callable[[str], None]
VARIANTS = ("stock", "channels_last", "conv3d_as_2d", "channels_last+conv3d_as_2d")


def _sync(dev: Any) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time(fn: Callable[[], Any], dev: Any, repeats: int) -> tuple[float, Any]:
    out = fn()  # warm-up (cuDNN picks its algorithms here)
    _sync(dev)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _tflop(fn: Callable[[], Any]) -> float:
    """TFLOP of one ``fn()`` as ``torch.utils.flop_counter`` counts them (convolutions, matmuls,
    and SDPA where its CUDA kernels run)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return round(counter.get_total_flops() / 1e12, 3)


def _rel_diff(a: Any, ref: Any) -> float:
    return float((a.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-12))


def _variants(module: Any, fn: Callable[[], Any], dev: Any, repeats: int, log: Log, what: str) -> dict[str, Any]:
    from newsmotion_engine.accel.conv3d import set_conv3d_as_2d
    from newsmotion_engine.accel.memory_format import set_conv_format

    rows: dict[str, Any] = {}
    ref = None
    for name in VARIANTS:
        set_conv_format(module, "channels_last" in name)
        n = set_conv3d_as_2d(module, "conv3d_as_2d" in name)
        s, out = _time(fn, dev, repeats)
        ref = out if ref is None else ref
        rows[name] = {"ms": round(s * 1000, 2), "max_rel_diff": _rel_diff(out, ref), "convs_as_2d": n if "conv3d_as_2d" in name else 0}
        log(f"  {what} {name}: {rows[name]['ms']} ms (max rel diff {rows[name]['max_rel_diff']:.2e})")
        del out
    set_conv_format(module, False)
    set_conv3d_as_2d(module, False)
    return rows


def _compiled(fn: Callable[[], Any], dev: Any, repeats: int, compile_: Callable[[], Any], uncompile: Callable[[], Any],
              profile: bool = False) -> tuple[dict[str, Any], Any]:  # fmt: skip
    """``fn`` timed with its module compiled: the first call (it compiles) apart, then the median
    of ``repeats`` (and, with ``profile``, its kernel profile); the module eager again after.
    ``(row, output)``."""
    from benchmarks.kernel_profile import profile_call

    compile_()
    try:
        t0 = time.perf_counter()
        fn()
        first_s = time.perf_counter() - t0
        s, out = _time(fn, dev, repeats)
        row = {"ms": round(s * 1000, 2), "first_call_s": round(first_s, 1)}
        if profile:
            _, row["profile"] = profile_call(fn, top=20)
    finally:
        uncompile()
    return row, out


def bench_conv3d(*, device: str = "auto", small: bool = False, repeats: int = 5, parts: tuple[str, ...] = ("wan_decode", "convs", "decode", "unet"),
                        json_path: str | Path | None = None, log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every part."""
    import diffusers
    import torch
    from diffusers import AutoencoderKLTemporalDecoder, UNetSpatioTemporalConditionModel

    from benchmarks.kernel_profile import profile_call
    from newsmotion_engine.accel.conv3d import conv3d_as_2d
    from newsmotion_engine.render.backends.mimicmotion.config import released_component

    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    h, w, frames, window = (72, 128, 8, 72) if not small else (12, 16, 4, 4)
    result: dict[str, Any] = {
        "bench": "conv3d",
        "weights": "random weights",
        "note": "random weights (the released SVD-xt-1.1 and Wan-Animate-2 VAE architectures): speed only",
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "dtype": str(dtype).replace("torch.", ""),
        "latent": [h, w],
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__, "cudnn": torch.backends.cudnn.version()},
    }

    def write() -> None:
        if json_path:
            headline = top_level_figures(result) or {"parts": len(parts)}
            write_lab_result(json_path, result, title="3-D convolutions (SVD's temporal layers, the Wan VAE): as 2-D, channels-last, padding folded",
                             headline=headline)  # fmt: skip

    def config(name: str, small_channels: list[int]) -> dict[str, Any]:
        cfg = {k: v for k, v in released_component(name).items() if not k.startswith("_")}
        if small:
            cfg["block_out_channels"] = small_channels
            if "num_attention_heads" in cfg:
                cfg["num_attention_heads"] = [2] * len(small_channels)
        return cfg

    gen = torch.Generator("cpu").manual_seed(0)
    unknown = set(parts) - {"convs", "decode", "unet", "wan_decode", "wan_continuation"}
    if unknown:
        raise ValueError(f"parts {sorted(unknown)}: use convs, decode, unet, wan_decode, wan_continuation")
    for part in parts:  # in the order given
        if part == "convs":
            # (channels, frames in, height, width, kernel, padding, dtype): SVD's time-only ones in bf16
            # (decoder chunk of 8, UNet window of 2 x 72), then Wan's causal (3, 3, 3) ones as its decoder
            # runs them (6 frames in: 2 cached + 4 new, time padded already) in float32 and bf16.
            t3, p3, tw, pw_ = (3, 1, 1), (1, 0, 0), (3, 3, 3), (0, 1, 1)
            shapes = [(128, 8, 8 * h, 8 * w, t3, p3, dtype), (256, 8, 4 * h, 4 * w, t3, p3, dtype), (512, 8, 2 * h, 2 * w, t3, p3, dtype),
                      (320, 2 * window, h, w, t3, p3, dtype), (640, 2 * window, h // 2, w // 2, t3, p3, dtype)]  # fmt: skip
            for wdt in (torch.float32, torch.bfloat16):
                shapes += [(96, 6, 720, 1280, tw, pw_, wdt), (192, 6, 360, 640, tw, pw_, wdt), (384, 3, 180, 320, tw, pw_, wdt)]
            if small:
                shapes = [(8, 4, 8, 8, t3, p3, dtype), (8, 6, 8, 8, tw, pw_, dtype)]
            rows = {}
            for c, t, hh, ww, kernel, pad, cdt in shapes:
                conv = torch.nn.Conv3d(c, c, kernel, padding=pad).to(dev, cdt).requires_grad_(False)
                x = torch.randn(1, c, t, hh, ww, generator=gen).to(dev, cdt)
                row: dict[str, Any] = {"dtype": str(cdt).replace("torch.", "")}
                s, ref = _time(lambda: conv(x), dev, repeats)
                row["conv3d_ms"] = round(s * 1000, 3)
                s, out = _time(lambda: conv3d_as_2d(x, conv.weight, conv.bias, conv.padding), dev, repeats)
                row["as_conv2d_ms"], row["as_conv2d_max_rel_diff"] = round(s * 1000, 3), _rel_diff(out, ref)
                xl = x.contiguous(memory_format=torch.channels_last_3d)
                conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last_3d)
                s, _ = _time(lambda: conv(xl), dev, repeats)
                row["conv3d_channels_last_ms"] = round(s * 1000, 3)
                s, out = _time(lambda: conv3d_as_2d(xl, conv.weight, conv.bias, conv.padding), dev, repeats)
                row["as_conv2d_channels_last_ms"], row["as_conv2d_channels_last_max_rel_diff"] = round(s * 1000, 3), _rel_diff(out, ref)
                t_out = t + 2 * pad[0] - kernel[0] + 1
                flops = 2 * c * c * kernel[0] * kernel[1] * kernel[2] * t_out * hh * ww
                for k in ("conv3d", "as_conv2d", "conv3d_channels_last", "as_conv2d_channels_last"):
                    row[f"tflops_{k}"] = round(flops / row[f"{k}_ms"] / 1e9, 1)
                key = f"C{c}_T{t}_{hh}x{ww}_k{''.join(map(str, kernel))}_{row['dtype']}"
                rows[key] = row
                log(f"  conv {key}: {row}")
                del conv, x, xl, out, ref
            result["convs"] = rows
            write()
        elif part == "decode":
            with torch.device(dev):
                vae = AutoencoderKLTemporalDecoder.from_config(config("vae/config.json", [32, 64, 64, 64])).to(dtype).eval()
            z = torch.randn(frames, 4, h, w, generator=gen).to(dev, dtype)

            def decode() -> Any:
                with torch.no_grad():
                    return vae.decode(z, num_frames=frames).sample

            result["decode"] = _variants(vae, decode, dev, repeats, log, "decode")
            if dev.type == "cuda":  # the decoder's mid and up blocks compiled (accel.compile_vae); the warm-up compiles
                from newsmotion_engine.accel.compile_vae import compile_decoder_blocks, uncompile_decoder_blocks

                row, out = _compiled(decode, dev, repeats, lambda: compile_decoder_blocks(vae), lambda: uncompile_decoder_blocks(vae))
                result["decode"]["compile_vae"] = row
                with torch.no_grad():
                    eager = vae.decode(z, num_frames=frames).sample
                result["decode"]["compile_vae"]["max_rel_diff"] = _rel_diff(out, eager)
                log(f"  decode compile_vae: {result['decode']['compile_vae']}")
                del out, eager
            result["decode_ms_stock"] = result["decode"]["stock"]["ms"]
            result["decode_ms_best"] = min(r["ms"] for r in result["decode"].values())
            result["decode_tflop"] = _tflop(decode)
            result["decode_tflops_per_s_stock"] = round(result["decode_tflop"] / result["decode_ms_stock"] * 1000, 1)
            _, result["decode_profile_stock"] = profile_call(decode, top=15)
            write()
            del vae, z
        elif part == "unet":
            with torch.device(dev):
                unet = UNetSpatioTemporalConditionModel.from_config(config("unet/config.json", [32, 64, 64, 64])).to(dtype).eval()
            x = torch.randn(2, window, unet.config.in_channels, h, w, generator=gen).to(dev, dtype)
            enc = torch.randn(2, 1, unet.config.cross_attention_dim, generator=gen).to(dev, dtype)
            ids = torch.tensor([[6.0, 127.0, 0.02]] * 2).to(dev, dtype)
            t = torch.tensor([1.0], device=dev)

            def forward() -> Any:
                with torch.no_grad():
                    return unet(x, t, enc, added_time_ids=ids).sample

            result["unet"] = _variants(unet, forward, dev, max(2, repeats // 2), log, "unet")
            result["unet_ms_stock"] = result["unet"]["stock"]["ms"]
            result["unet_ms_best"] = min(r["ms"] for r in result["unet"].values())
            result["unet_tflop"] = _tflop(forward)  # SDPA counted on CUDA only
            result["unet_tflops_per_s_stock"] = round(result["unet_tflop"] / result["unet_ms_stock"] * 1000, 1)
            _, result["unet_profile_stock"] = profile_call(forward, top=15)
            if dev.type == "cuda":  # the repeated blocks compiled, as the mimicmotion backend's compile option does
                from newsmotion_engine.accel.compile import Compile, compile_blocks, uncompile_blocks
                from newsmotion_engine.render.backends.mimicmotion.components import REPEATED_BLOCKS

                unet._repeated_blocks = list(REPEATED_BLOCKS)
                # with its profile: where a compiled UNet's time goes
                result["unet"]["compile"], _ = _compiled(forward, dev, max(2, repeats // 2), lambda: compile_blocks(unet, Compile()),
                                                         lambda: uncompile_blocks(unet), profile=True)  # fmt: skip
                log(f"  unet compile: {result['unet']['compile']['ms']} ms")
            write()
            del unet, x
        elif part == "wan_decode":
            result["wan_decode"] = _wan_decode(dev, small, repeats, log)
            write()
        elif part == "wan_continuation":
            result["wan_continuation"] = _wan_continuation(dev, small, repeats, log)
            write()
    return result


WAN_VARIANTS = (  # name, dtype, channels-last, causal_pad_fold, conv3d_as_2d, fused_vae_norm
    ("float32_channels_last", "float32", True, False, False, False),
    ("float32_channels_last_pad_fold", "float32", True, True, False, False),
    ("float32_channels_last_pad_fold_fused_norm", "float32", True, True, False, True),
    ("float32_channels_last_as_2d", "float32", True, False, True, False),
    ("float32_channels_last_pad_fold_as_2d", "float32", True, True, True, False),
    ("float32", "float32", False, False, False, False),
    ("bfloat16_channels_last", "bfloat16", True, False, False, False),
    ("bfloat16_channels_last_as_2d", "bfloat16", True, False, True, False),
)
WAN_ENCODE_VARIANTS = ("float32_channels_last", "float32_channels_last_pad_fold", "float32_channels_last_pad_fold_fused_norm",
                       "float32_channels_last_pad_fold_as_2d")


def _wan_decode(dev: Any, small: bool, repeats: int, log: Log) -> dict[str, Any]:
    """The Wan VAE's decode of 5 latent frames and encode of 17 frames (module docstring)."""
    import torch
    from diffusers import AutoencoderKLWan
    from benchmarks.kernel_profile import profile_call
    from newsmotion_engine.accel.causal_pad import set_causal_pad_fold
    from newsmotion_engine.accel.conv3d import set_conv3d_as_2d
    from newsmotion_engine.accel.memory_format import set_conv_format
    from newsmotion_engine.accel.vae_norm import set_fused_vae_norm
    from newsmotion_engine.render.backends.wan.released import component_kwargs

    cfg = component_kwargs("wan-animate-2", "vae")
    if small:
        cfg["base_dim"] = 16
    h, w = (90, 160) if not small else (8, 8)
    gen = torch.Generator("cpu").manual_seed(0)
    z = torch.randn(1, cfg.get("z_dim", 16), 5, h, w, generator=gen)
    video = torch.rand(1, 3, 17, 8 * h, 8 * w, generator=gen) * 2 - 1
    rows: dict[str, Any] = {}
    encode_rows: dict[str, Any] = {}
    ref = ref_enc = None
    for name, dtype_name, last, fold, as_2d, fused in WAN_VARIANTS:
        dtype = getattr(torch, dtype_name)
        torch.manual_seed(0)  # the same weights for every variant
        with torch.device(dev):
            vae = AutoencoderKLWan.from_config(cfg).to(dtype).eval()
        set_conv_format(vae, last)
        n_fold = set_causal_pad_fold(vae, fold)
        n2d = set_conv3d_as_2d(vae, as_2d)
        n_fused = set_fused_vae_norm(vae, fused)
        zz = z.to(dev, dtype)

        def decode() -> Any:
            with torch.no_grad():
                return vae.decode(zz).sample

        s, out = _time(decode, dev, max(2, repeats // 2))
        ref = out if ref is None else ref
        tflop = _tflop(decode)
        rows[name] = {"ms": round(s * 1000, 1), "tflop": round(tflop, 2), "tflops_per_s": round(tflop / s, 1),
                      "max_rel_diff": _rel_diff(out, ref), "frames": int(out.shape[2]),
                      "convs_pad_fold": n_fold if fold else 0, "convs_as_2d": n2d if as_2d else 0,
                      "fused_norm_blocks": n_fused if fused else 0}  # fmt: skip
        if name == "float32_channels_last":
            _, rows["profile_" + name] = profile_call(decode, top=12)
        log(f"  wan decode {name}: {rows[name]}")
        del out
        if name in WAN_ENCODE_VARIANTS:  # the continuation of wan-animate-2 encodes its previous frames
            vv = video.to(dev, dtype)

            def encode() -> Any:
                with torch.no_grad():
                    return vae.encode(vv).latent_dist.mean

            s, enc = _time(encode, dev, max(2, repeats // 2))
            ref_enc = enc if ref_enc is None else ref_enc
            encode_rows[name] = {"ms": round(s * 1000, 1), "max_rel_diff": _rel_diff(enc, ref_enc), "frames": int(video.shape[2])}
            log(f"  wan encode {name}: {encode_rows[name]}")
            del enc, vv
        del vae, zz
    rows["encode"] = encode_rows
    return rows


def _wan_continuation(dev: Any, small: bool, repeats: int, log: Log) -> dict[str, Any]:
    """The continuation's encode, plain vs :func:`encode_then_zeros` (module docstring)."""
    import torch
    from diffusers import AutoencoderKLWan

    from newsmotion_engine.accel.causal_pad import set_causal_pad_fold
    from newsmotion_engine.accel.memory_format import set_conv_format
    from newsmotion_engine.accel.vae_norm import set_fused_vae_norm
    from newsmotion_engine.render.backends.wan.encoders import vae_encode
    from newsmotion_engine.render.backends.wan.released import component_kwargs
    from newsmotion_engine.render.backends.wan.zero_tail import encode_then_zeros, steady_plan

    cfg = component_kwargs("wan-animate-2", "vae")
    if small:
        cfg["base_dim"] = 16
    frames, (height, width) = 81, ((64, 64) if small else (1280, 720))
    torch.manual_seed(0)
    with torch.device(dev):
        vae = AutoencoderKLWan.from_config(cfg).to(torch.float32).eval()
    set_conv_format(vae, True)
    set_causal_pad_fold(vae, True)
    set_fused_vae_norm(vae, True)
    head = (torch.rand(1, 3, 1, height, width, generator=torch.Generator("cpu").manual_seed(0)) * 2 - 1).to(dev)

    def plain() -> Any:
        with torch.no_grad():
            return vae_encode(vae, torch.cat([head, head.new_zeros(1, 3, frames - 1, height, width)], dim=2), dev)

    stats: dict[str, int] = {}

    def skipping() -> Any:
        return encode_then_zeros(vae, head, frames, dev, stats=stats)

    t0 = time.perf_counter()
    plans = steady_plan(vae, frames, 1)
    probe_s = time.perf_counter() - t0
    s_plain, ref = _time(plain, dev, max(2, repeats // 2))
    _sync(dev)
    t0 = time.perf_counter()
    first = skipping()
    _sync(dev)
    first_s, first_stats = time.perf_counter() - t0, dict(stats)
    s_warm, out = _time(skipping, dev, max(2, repeats // 2))
    row = {"frames": frames, "size": [width, height], "probe_s": round(probe_s, 3),
           "steady_from_call": {p.name: p.first_steady for p in plans or ()},
           "plain_ms": round(s_plain * 1000, 1), "plain_tflop": _tflop(plain),
           "first_call_ms": round(first_s * 1000, 1), "first_call_units": first_stats,
           "warm_ms": round(s_warm * 1000, 1), "warm_units": dict(stats), "warm_tflop": _tflop(skipping),
           "speedup_warm": round(s_plain / s_warm, 2),
           "max_rel_diff_first": _rel_diff(first, ref), "max_rel_diff_warm": _rel_diff(out, ref)}  # fmt: skip
    log(f"  wan continuation encode: {row}")
    del vae
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conv3d", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--small", action="store_true", help="tiny channels and shapes (a CPU check of the code path)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parts", default="wan_decode,convs,decode,unet", help="in this order")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    bench_conv3d(device=args.device, small=args.small, repeats=args.repeats, parts=tuple(args.parts.split(",")),
                        json_path=args.json)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
