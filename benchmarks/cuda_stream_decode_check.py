"""CUDA check of wan-animate's streaming decode: ``wan.decode.stream_decode`` (per latent frame, pinned
host copies one chunk ahead) against the whole ``vae.decode`` on the GPU, float32 VAE of the
``smoke`` preset at 720x1280 (the CPU tests cover the tiny preset bit for bit).

    python -m benchmarks.cuda_stream_decode_check [--json benchmarks/results/stream_decode_check_h100.json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.lab_record import running_command
from newsmotion_engine.bench.record import BenchResult, write_result

from newsmotion_engine.render.backends.wan import decode as wan_decode
from newsmotion_engine.render.backends.wan.components import VAE_DTYPE, build_vae, torch_dtype
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json")
    args = parser.parse_args()
    dev = torch.device("cuda")
    vae = build_vae(WanAnimateOptions(preset="smoke"), dev, torch_dtype(VAE_DTYPE))
    result = {"device": torch.cuda.get_device_name(dev), "vae_dtype": str(vae.dtype), "cases": []}
    for latent_frames in (1, 4, 11):
        g = torch.Generator("cpu").manual_seed(latent_frames)
        lat = torch.randn(1, 16, latent_frames + 1, 160, 90, generator=g).to(dev)
        whole = wan_decode.to_frames(wan_decode.decode_video(vae, lat))
        for lookahead in (1, 3):
            frames = np.concatenate([c.frames for c in wan_decode.stream_decode(vae, lat, lookahead=lookahead)])
            diff = int(np.abs(frames.astype(int) - whole.astype(int)).max()) if frames.shape == whole.shape else None
            result["cases"].append({"latent_frames": latent_frames, "lookahead": lookahead, "frames": int(len(frames)),
                                    "shape_equal": frames.shape == whole.shape, "max_abs_diff_u8": diff})
            print(result["cases"][-1])
    result["bit_identical"] = all(c["max_abs_diff_u8"] == 0 for c in result["cases"])
    print("bit identical:", result["bit_identical"])
    if args.json:
        diffs = [c["max_abs_diff_u8"] for c in result["cases"] if c["max_abs_diff_u8"] is not None]
        write_result(Path(args.json), BenchResult.now(
            Path(args.json).stem, device=result["device"], command=running_command(), data=result,
            weights="random weights", title="the streamed VAE decode (per latent frame) vs the whole decode, float32 VAE, 1-11 latent frames",
            headline={"max difference (of 255)": max(diffs, default=255), "cases": len(result["cases"]),
                      "bit identical": str(result["bit_identical"]).lower()},
        ))  # fmt: skip
    return 0 if result["bit_identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
