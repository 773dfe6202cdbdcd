"""GPU benchmark of the scail-2 backend: seconds for the reference design's clip, stock vs ours, peak VRAM.

The clip: 120 frames at 720x1280 (the model renders 704x1280, its sides multiples of 32, framed onto
the canvas), driven by the bench's 24 fps driving clip (:func:`benchmarks.gpu.bench_inputs`: the
moving astronaut photo) through the shipped path (``render_clip`` -> the backend's frames -> the
chroma composite), by one random-weight model (``--preset 14b``: the released 16.4B DiT):

- ``stock``: the official recipe (zai-org/SCAIL-2 ``SCAIL2Pipeline.generate``) re-created on our
  diffusers components in bf16: UniPC, CFG 5 with the two passes one after the other, 81-frame
  segments with a 5-frame clean history, no acceleration;
- ``ours``: each :data:`VARIANTS` entry at the same steps — the two guidance passes as one batch,
  then the registry's FP8 linears, regional compile and our 8-bit attention kernel on top
  (``...+vae``: and the Wan VAE's folded padding and fused norms, ``accel.causal_pad`` and
  ``accel.vae_norm``) — a warm-up render, then the timed one.

The driving matte of the bench's clip is the whole frame (the moving photo has no background to
key and mediapipe is not on the GPU machine); building the caches is not timed. Frames are not
encoded (no ffmpeg on the GPU machine): :class:`benchmarks.clip.FrameSink` takes them. At the
official 40 steps a 14B clip takes far longer than one device command may run; pass ``--steps``
(the same for every variant) and ``--budget-s``.

Example (from the repository root)::

    python -m benchmarks.scail2 --steps 4 --json benchmarks/results/scail2_h100.json
    python -m benchmarks.scail2 --preset tiny --sizes 64x128 --frames 13 --steps 2   # CPU check

Stock and ours of the 14B model do not fit one 10-minute device command together: run stock in one
call and ours in the next on the same warm machine, then join the two records::

    python -m benchmarks.scail2 --steps 2 --variants stock --json /tmp/scail2_stock.json
    python -m benchmarks.scail2 --steps 2 --variants batch_cfg+fp8+compile+fp8_attention --warm-up-steps 1 --json /tmp/scail2_ours.json
    python -m benchmarks.scail2 --combine /tmp/scail2_stock.json /tmp/scail2_ours.json --json benchmarks/results/scail2_h100.json

``--profile-steps N``: each row also gets a kernel breakdown of one more clip at N steps, and as its
``one_step`` one step's kernels alone (a second profiled clip at N + 1 steps less the first: the
denoise without the decode; :func:`benchmarks.clip.profile_clip_steps`, :mod:`benchmarks.kernel_profile`),
not in the timed figures::

    bash benchmarks/device_gpu.sh zoo 570 "scail2 --steps 2 --variants batch_cfg+fp8+compile+fp8_attention --warm-up-steps 1 --profile-steps 1 --budget-s 540"
"""

from __future__ import annotations

import datetime as _dt
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.budget import VariantBudget
from benchmarks.lab_record import COMBINE_HELP, combine_to_record, stock_vs_ours, top_level_figures, write_lab_result

__all__ = ["VARIANTS", "bench_scail2"]

Log = Callable[[str], None]
VARIANTS = ("stock", "batch_cfg", "batch_cfg+fp8+compile+fp8_attention", "batch_cfg+fp8+compile+fp8_attention+vae",
            "batch_cfg+fp8+compile+cudnn_fp8_attention")


def _variants(cuda: bool) -> dict[str, dict[str, Any]]:
    """Variant name -> backend options on top of the stock ones (acceleration configs go through the registry)."""
    out: dict[str, dict[str, Any]] = {"stock": {"batch_cfg": False}, "batch_cfg": {"batch_cfg": True}}
    if cuda:
        from newsmotion_engine.accel.attention import Attention
        from newsmotion_engine.accel.compile import Compile
        from newsmotion_engine.accel.fp8 import Fp8Linears

        out["batch_cfg+fp8+compile+fp8_attention"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-triton"))}
        # plus the Wan VAE's padding folded into its convolutions and its norms + SiLUs in one pass
        # (accel.causal_pad, accel.vae_norm; decode and encode ~20% faster, conv3d_h100.json)
        from newsmotion_engine.accel.causal_pad import CausalPadFold
        from newsmotion_engine.accel.vae_norm import FusedVaeNorm

        out["batch_cfg+fp8+compile+fp8_attention+vae"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-triton"),
                                                 CausalPadFold(), FusedVaeNorm())}
        # cuDNN's FP8 kernel (nvidia-cudnn-frontend): E4M3 Q/K/V/P/output, error 0.061 against BF16
        # where ours is 0.040 (attention_cudnn_h100.json), so an approximation, never the headline
        out["batch_cfg+fp8+compile+cudnn_fp8_attention"] = {
            "batch_cfg": True, "accelerations": (Fp8Linears(mode="auto", keep_original=True), Compile(), Attention(kernel="fp8-cudnn")),
            "approximate": True}
    return out


def bench_scail2(preset: str = "14b", *, sizes: Sequence[tuple[int, int]] = ((720, 1280),), frames: int = 120, steps: int = 40,
                 variants: Sequence[str] | None = None, device: str = "auto", budget_s: float | None = None,
                 warm_up_steps: int | None = None, profile_steps: int | None = None, json_path: str | Path | None = None,
                 log: Log = print) -> dict[str, Any]:  # fmt: skip
    """Run the benchmark (module docstring); the JSON is rewritten after every measurement.
    ``warm_up_steps``: ours' warm-up render takes this many steps instead of ``steps`` (it only
    has to compile every segment's shapes, which the step count does not change).
    ``profile_steps``: after each timed clip, one more at this many steps under the profiler
    (the row's ``profile``; module docstring).

    Keys: ``rows`` (size -> variant -> seconds, peak VRAM, segments, passes), and per size
    ``clip_{W}x{H}_s_stock``, ``clip_{W}x{H}_s`` (the fastest "ours"), ``fastest_{W}x{H}`` and
    ``speedup_{W}x{H}``.
    """
    import diffusers
    import torch

    from benchmarks.clip import timed_variant
    from benchmarks.gpu import bench_inputs
    from newsmotion_engine.render.backends.scail_2 import masks
    from newsmotion_engine.render.backends.scail_2.backend import Scail2Backend
    from newsmotion_engine.render.backends.scail_2.config import RANDOM_WEIGHTS_LABEL, Scail2Options, model_size
    from newsmotion_engine.render.base import RenderSpec

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    table = _variants(cuda)
    unknown = set(variants or ()) - set(VARIANTS)
    if unknown:
        raise ValueError(f"variants {sorted(unknown)}: use {', '.join(VARIANTS)}")
    names = [n for n in (variants or VARIANTS) if n in table]
    t_start = time.perf_counter()
    budget = VariantBudget(budget_s)
    result: dict[str, Any] = {"bench": "scail2", "weights": RANDOM_WEIGHTS_LABEL, "preset": preset,
                              "note": "random weights: speed and memory only; frames not encoded; driving matte = whole frame",
                              "shape": {"frames": frames, "steps": steps, "model_fps": 24, "sizes": [list(s) for s in sizes]},
                              "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
                              "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__},
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "rows": {}}  # fmt: skip

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        if json_path is not None:
            write_lab_result(json_path, result, title=f"scail-2 {preset}: a {frames}-frame clip, stock vs ours",
                             headline=top_level_figures(result))  # fmt: skip

    original_matte = masks.driving_matte
    masks.driving_matte = lambda clip: np.full(np.asarray(clip.frames).shape[:3], 255, np.uint8)  # see the module docstring
    try:
        with tempfile.TemporaryDirectory(prefix="newsmotion-scail2-") as tmp_dir:
            tmp = Path(tmp_dir)
            base = Scail2Options(preset=preset, device=device, steps=steps, cache_root=str(tmp / "caches"))
            backend = Scail2Backend(base)
            backend.load()
            for width, height in sizes:
                key = f"{width}x{height}"
                rows = result["rows"].setdefault(key, {})
                loop, persona = bench_inputs(width, height, frames, tmp / key)
                spec = RenderSpec(width=width, height=height)
                backend.prepare_guidance(loop, spec)
                backend.prepare_persona(persona, spec)
                for name in names:
                    if why := budget.next_variant():
                        rows[name] = {"skipped": why}
                        continue
                    options = {k: v for k, v in table[name].items() if k != "approximate"}
                    backend.options = Scail2Options(**{**base.as_mapping(), **options})
                    row: dict[str, Any] = {"model_size": list(model_size(width, height)),
                                           "approximate": bool(table[name].get("approximate")),
                                           "settings": [c.describe() for c in backend.options.accelerations]}  # fmt: skip
                    # a warm-up for ours (compiles); stock runs once, as the official script does
                    warm = {"steps": warm_up_steps} if warm_up_steps and name != "stock" else None
                    row.update(timed_variant(backend, loop, persona, spec, tmp / "clip.mp4", warm_up=name != "stock",
                                             warm_up_options=warm,
                                             profile_options={"steps": profile_steps} if profile_steps else None))  # fmt: skip
                    if warm:
                        row["warm_up_steps"] = warm_up_steps
                    rows[name] = row
                    log(f"{key} {name}: {row}")
                    write()
                stock_vs_ours(result, key, rows)
                write()
            backend.close()
    finally:
        masks.driving_matte = original_matte
    write()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="14b")
    parser.add_argument("--sizes", default="720x1280", help="comma-separated WxH render sizes")
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--variants", default=None, help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--warm-up-steps", type=int, default=None, help="ours' warm-up render's steps (it only compiles)")
    parser.add_argument("--profile-steps", type=int, default=None,
                        help="after each timed clip, one more at N steps under torch.profiler (the row's kernel breakdown)")
    parser.add_argument("--combine", nargs="+", metavar="RUN_JSON", help=COMBINE_HELP)
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    if a.combine:
        combine_to_record(a.combine, a.json, bench="scail-2")
        return
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    bench_scail2(a.preset, sizes=sizes, frames=a.frames, steps=a.steps,  # type: ignore[arg-type]
                 variants=a.variants.split(",") if a.variants else None, budget_s=a.budget_s, warm_up_steps=a.warm_up_steps,
                 profile_steps=a.profile_steps, json_path=a.json)  # fmt: skip


if __name__ == "__main__":
    main()
