"""Parity of our EchoMimicV3 transformer with the official one: the same weights, the same inputs,
the outputs compared (CPU, float32; no GPU needed).

The official module is read from a checkout of antgroup/echomimic_v3 the caller gives
(``--official DIR``: its ``src/wan_transformer3d_audio_2512.py``, the flash-pro transformer, and the
modules it imports; ``einops`` must be importable), never copied here. Both models are built at the
release's width (1536: the official audio projection's output is fixed to it) with ``--layers``
blocks and a small FFN; every official tensor is perturbed (so no init symmetry hides a mismatch),
mapped onto ours through :mod:`newsmotion_engine.render.backends.echomimic_v3.keymap` and loaded
strictly. Inputs as the flash-pro pipeline hands them over: noise + the 20-channel condition, a
zero-padded prompt embedding, 257 CLIP tokens, audio windows ``[1, F, 5, 12, 768]`` for
``F = 4 (T - 1) + 1`` frames. Cases: with audio, with zero audio (the unconditional pass); and
the sampler: the official flow UniPC against ours over the 8 flash-pro steps.

Example::

    python -m benchmarks.echomimic_v3_parity --official ../echomimic_v3 --json benchmarks/results/echomimic_v3_parity.json
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lab_record import write_lab_result

__all__ = ["compare_with_official"]

COMMAND = "python -m benchmarks.echomimic_v3_parity --official OFFICIAL_CHECKOUT"  # recorded without a machine path


def compare_with_official(official_dir: str | Path, *, layers: int = 2, frames: int = 3, height: int = 8, width: int = 6,
                          seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """Max / mean absolute differences of our forward from the official one (see the module docstring)."""
    import torch

    from newsmotion_engine.render.backends.echomimic_v3.keymap import official_to_ours
    from newsmotion_engine.render.backends.echomimic_v3.model import EchoMimicV3Transformer3DModel

    sys.path.insert(0, str(Path(official_dir)))
    from src.wan_transformer3d_audio_2512 import WanTransformerAudioMask3DModel as Official  # the caller's checkout

    torch.manual_seed(seed)
    off = Official(model_type="i2v", in_dim=36, dim=1536, ffn_dim=256, freq_dim=256, text_dim=4096, out_dim=16, num_heads=12,
                   num_layers=layers, cross_attn_norm=True, eps=1e-6).eval()  # fmt: skip
    with torch.no_grad():
        for p in off.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ours = EchoMimicV3Transformer3DModel(num_attention_heads=12, attention_head_dim=128, in_channels=36, ffn_dim=256,
                                         num_layers=layers).eval()  # fmt: skip
    ours.load_state_dict({official_to_ours(k): v for k, v in off.state_dict().items()}, strict=True)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, 16, frames, height, width, generator=g)
    y = torch.randn(1, 20, frames, height, width, generator=g)
    prompt_tokens = 20
    text = torch.zeros(1, 512, 4096)
    text[:, :prompt_tokens] = torch.randn(1, prompt_tokens, 4096, generator=g)
    clip = torch.randn(1, 257, 1280, generator=g)
    audio = torch.randn(1, (frames - 1) * 4 + 1, 5, 12, 768, generator=g)
    t = torch.tensor([731.0])
    seq_len = frames * (height // 2) * (width // 2)
    out: dict[str, Any] = {}
    refs = {}
    with torch.no_grad():
        for case, a in (("audio", audio), ("zero_audio", torch.zeros_like(audio))):
            ref = off(x=x, t=t, context=([text[0, :prompt_tokens]], a, frames, None), seq_len=seq_len, clip_fea=clip, y=y)
            got = ours(torch.cat([x, y], 1), t, text, clip, a).sample
            err = (ref - got).abs()
            refs[case] = ref
            out[case] = {"max_abs_diff": float(err.max()), "mean_abs_diff": float(err.mean()),
                         "official_max_abs": float(ref.abs().max()), "rel_max_diff": float(err.max() / ref.abs().max())}  # fmt: skip
    out["audio_effect_max_abs"] = float((refs["audio"] - refs["zero_audio"]).abs().max())
    out["sampler"] = _compare_sampler(steps=8, seed=seed)
    return out


def _compare_sampler(*, steps: int, seed: int) -> dict[str, Any]:
    """The official flow UniPC (``src/fm_solvers_unipc.py``, ``shift=1`` at construction and
    ``set_timesteps(steps, shift=5)``, as ``infer_flash.py`` uses it) against ours (diffusers' UniPC
    with the release's config and sigmas, :meth:`~...config.EchoMimicV3Options.sampling_sigmas`):
    timesteps, sigmas, and the latents after every step on the same random velocities."""
    import dataclasses

    import numpy as np
    import torch
    from src.fm_solvers_unipc import FlowUniPCMultistepScheduler  # the caller's checkout

    from newsmotion_engine.render.backends.echomimic_v3.config import EchoMimicV3Options
    from newsmotion_engine.render.backends.wan.components import scheduler_class

    opts = dataclasses.replace(EchoMimicV3Options(), steps=steps)
    config = opts.scheduler_config()
    ours = scheduler_class(config, opts.default_scheduler).from_config(config)
    ours.set_timesteps(sigmas=np.asarray(opts.sampling_sigmas()))
    off = FlowUniPCMultistepScheduler(num_train_timesteps=1000, shift=1, use_dynamic_shifting=False)
    off.set_timesteps(steps, shift=5.0)
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(1, 16, 3, 4, 4, generator=g)
    b = a.clone()
    for t_ours, t_off in zip(ours.timesteps, off.timesteps):
        v = torch.randn(1, 16, 3, 4, 4, generator=g)
        a = ours.step(v, t_ours, a, return_dict=False)[0]
        b = off.step(v, t_off, b, return_dict=False)[0]
    return {"steps": steps, "timesteps_equal": ours.timesteps.tolist() == off.timesteps.tolist(),
            "timesteps": off.timesteps.tolist(), "max_sigma_diff": float((ours.sigmas - off.sigmas).abs().max()),
            "final_latents_max_abs_diff": float((a - b).abs().max())}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", required=True, help="a checkout of antgroup/echomimic_v3")
    parser.add_argument("--official-commit", default="unknown", help="the checkout's commit, recorded")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    result: dict[str, Any] = {"bench": "echomimic_v3_parity", "official": f"antgroup/echomimic_v3 @ {a.official_commit}",
                              "official_module": "src/wan_transformer3d_audio_2512.py", "dtype": "float32", "layers": a.layers,
                              "device": platform.processor() or "cpu", "weights": "random weights (the same in both)",
                              "versions": {"torch": torch.__version__},
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
    result.update(compare_with_official(a.official, layers=a.layers))
    print(result)
    if a.json:
        headline = {"max_abs_diff_audio": result["audio"]["max_abs_diff"], "max_abs_diff_zero_audio": result["zero_audio"]["max_abs_diff"],
                    "audio_effect_max_abs": result["audio_effect_max_abs"],
                    "sampler_latents_max_abs_diff": result["sampler"]["final_latents_max_abs_diff"]}  # fmt: skip
        write_lab_result(a.json, result, title="EchoMimicV3 transformer and sampler: ours vs the official modules, same weights (float32, CPU)",
                         headline=headline, command=COMMAND)  # fmt: skip


if __name__ == "__main__":
    main()
