"""The MuseTalk lip-sync stage's speed on a 720x1280 render: frames per second of the stage (UNet
at timestep 0 + VAE decode of 256x256 faces, batches of 8, + the paste into the frame), the avatar
preparation per frame, and the audio tokens per second of speech.

The frames are noise and the face is a synthetic 68-point layout at a presenter's face size
(about 160 px wide at 720x1280): the stage's cost does not depend on the pixels. Random weights
(the released architecture), so timing only; fp16 on a GPU as the official ``--use_float16``,
float32 on the CPU.

    python -m benchmarks.musetalk --json benchmarks/results/musetalk_cpu.json --frames 16
    python -m benchmarks.musetalk --device cuda --frames 480 --json $OUT/musetalk_h100.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks.lab_record import write_lab_result

FACE_WIDTH_PX = 160


def synthetic_faces(frames: int, width: int, height: int) -> np.ndarray:
    """``[T, 68, 2]``: a face centred at a presenter's head position, nodding a few pixels."""
    cx, cy, w = width / 2, height * 0.28, FACE_WIDTH_PX
    ang = np.linspace(np.pi * 0.05, np.pi * 0.95, 17)
    jaw = np.stack([cx - w / 2 * np.cos(ang), cy + 0.6 * w * np.sin(ang)], 1)
    rng = np.random.default_rng(0)
    rest = np.array([cx, cy]) + rng.uniform(-w / 4, w / 4, (51, 2))
    face = np.concatenate([jaw, rest])
    face[29] = [cx, cy - 0.1 * w]
    nod = 4 * np.sin(np.arange(frames) / 8.0)
    return face[None] + np.stack([np.zeros(frames), nod], 1)[:, None]


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(device: str, frames: int, width: int, height: int, batch: int, preset: str) -> dict[str, Any]:
    import torch

    from newsmotion_engine.render.musetalk.audio import audio_tokens, whisper_hidden_states
    from newsmotion_engine.render.musetalk.avatar import prepare_avatar
    from newsmotion_engine.render.musetalk.components import load_components
    from newsmotion_engine.render.musetalk.config import MuseTalkOptions
    from newsmotion_engine.render.musetalk.stage import StageStats, lip_sync_frames

    opts = MuseTalkOptions(preset=preset, device=device, batch_size=batch)
    t0 = time.perf_counter()
    comps = load_components(opts)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(comps.device) if comps.device.type == "cuda" else "cpu",
                           "weights": comps.weights_label, "preset": preset, "dtype": str(comps.dtype).removeprefix("torch."),
                           "width": width, "height": height, "frames": frames, "batch_size": batch,
                           "load_s": round(time.perf_counter() - t0, 2),
                           "note": "random weights: timing only; the frames are noise with a synthetic face layout"}  # fmt: skip
    rng = np.random.default_rng(1)
    render = (rng.random((min(frames, 60), height, width, 3)) * 255).astype(np.uint8)
    faces = synthetic_faces(len(render), width, height)
    prepare_avatar(render[:batch], faces[:batch], comps, opts)  # warm-up
    t0 = time.perf_counter()
    avatar = prepare_avatar(render, faces, comps, opts)
    _sync(comps.device)
    out["avatar_ms_per_frame"] = round((time.perf_counter() - t0) * 1e3 / len(render), 2)
    seconds = frames / 30.0
    samples = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
    t0 = time.perf_counter()
    tokens = audio_tokens(whisper_hidden_states(samples, comps), seconds, 30, comps.inference)
    out["audio_tokens_ms_per_speech_s"] = round((time.perf_counter() - t0) * 1e3 / seconds, 2)
    list(lip_sync_frames(render, avatar, tokens[: 2 * batch], comps, batch_size=batch))  # warm-up
    stats = StageStats()
    t0 = time.perf_counter()
    n = sum(1 for _ in lip_sync_frames(render, avatar, tokens, comps, batch_size=batch, stats=stats))
    wall = time.perf_counter() - t0
    out.update(stage_frames=n, stage_wall_s=round(wall, 3), stage_fps=round(n / wall, 2),
               models_fps=round(n / stats.model_s, 2), paste_ms_per_frame=round(stats.paste_s * 1e3 / max(1, stats.redrawn), 2),
               peak_vram_gib=round(torch.cuda.max_memory_allocated(comps.device) / 2**30, 2) if comps.device.type == "cuda" else None)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--width", type=int, default=720)
    p.add_argument("--height", type=int, default=1280)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--preset", default="v15")
    p.add_argument("--json")
    a = p.parse_args(argv)
    result = bench(a.device, a.frames, a.width, a.height, a.batch, a.preset)
    print(result)
    if a.json:
        write_lab_result(a.json, result, title=f"MuseTalk lip-sync stage at {a.width}x{a.height} ({result['device']}, {result['preset']}, random weights)",
                         headline={"stage fps": result["stage_fps"], "models fps": result["models_fps"],
                                   "paste (ms/frame)": result["paste_ms_per_frame"]})  # fmt: skip


if __name__ == "__main__":
    main()
