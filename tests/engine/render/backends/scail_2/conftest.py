"""Fixtures of the scail-2 tests: the official DiT's state-dict layout, written from the official
module structure (zai-org/SCAIL-2 ``wan/modules/model_scail2.py``, ``SCAIL2Model`` with
``model_type="i2v"``), and a tiny random checkpoint in that layout (``official``)."""

from __future__ import annotations

import json
import types

import pytest

OFFICIAL_TINY = dict(dim=24, ffn_dim=32, freq_dim=32, in_dim=20, mask_dim=28, out_dim=16, num_heads=2, num_layers=2,
                     text_len=512, eps=1e-6)  # fmt: skip
TINY_TEXT_DIM = 32

def official_shapes(c: dict, text_dim: int = 4096, image_dim: int = 1280) -> dict[str, tuple[int, ...]]:
    """Every parameter of the official SCAIL2Model (model_type "i2v") and its shape."""
    d, f = c["dim"], c["ffn_dim"]
    s: dict[str, tuple[int, ...]] = {}

    def lin(name, i, o):
        s[f"{name}.weight"], s[f"{name}.bias"] = (o, i), (o,)

    for name, cin in (("patch_embedding", c["in_dim"]), ("patch_embedding_pose", c["in_dim"]), ("patch_embedding_mask", c["mask_dim"])):
        s[f"{name}.weight"], s[f"{name}.bias"] = (d, cin, 1, 2, 2), (d,)
    lin("text_embedding.0", text_dim, d), lin("text_embedding.2", d, d)
    lin("time_embedding.0", c["freq_dim"], d), lin("time_embedding.2", d, d)
    lin("time_projection.1", d, 6 * d)
    for i in range(c["num_layers"]):
        b = f"blocks.{i}"
        for p in "qkvo":
            lin(f"{b}.self_attn.{p}", d, d)
        for p in ("q", "k", "v", "o", "k_img", "v_img"):
            lin(f"{b}.cross_attn.{p}", d, d)
        for n in ("self_attn.norm_q", "self_attn.norm_k", "cross_attn.norm_q", "cross_attn.norm_k", "cross_attn.norm_k_img"):
            s[f"{b}.{n}.weight"] = (d,)
        s[f"{b}.norm3.weight"], s[f"{b}.norm3.bias"] = (d,), (d,)  # cross_attn_norm=True: the only affine block norm
        lin(f"{b}.ffn.0", d, f), lin(f"{b}.ffn.2", f, d)
        s[f"{b}.modulation"] = (1, 6, d)
    lin("head.head", d, c["out_dim"] * 4)
    s["head.modulation"] = (1, 2, d)
    s["img_emb.proj.0.weight"], s["img_emb.proj.0.bias"] = (image_dim,), (image_dim,)
    lin("img_emb.proj.1", image_dim, image_dim), lin("img_emb.proj.3", image_dim, d)
    s["img_emb.proj.4.weight"], s["img_emb.proj.4.bias"] = (d,), (d,)
    return s


def write_official_checkpoint(folder, seed=0):
    """A tiny random checkpoint in the official layout: config.json + safetensors, official names."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    sd = {k: torch.randn(shape, generator=g) * (0.5 if len(shape) == 1 else 0.2) for k, shape in official_shapes(OFFICIAL_TINY, TINY_TEXT_DIM).items()}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"_class_name": "WanSCAILModel", "model_type": "i2v", "text_dim": TINY_TEXT_DIM, **OFFICIAL_TINY}))
    half = len(sd) // 2  # two shards, as large checkpoints come
    keys = sorted(sd)
    save_file({k: sd[k] for k in keys[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({k: sd[k] for k in keys[half:]}, str(folder / "model-00002-of-00002.safetensors"))
    return sd


@pytest.fixture
def official():
    """``shapes(config)``: the official parameters and shapes; ``write(folder)``: the tiny random
    checkpoint (config.json + two safetensors shards, official names) -> its state dict."""
    return types.SimpleNamespace(shapes=official_shapes, write=write_official_checkpoint, tiny=OFFICIAL_TINY, text_dim=TINY_TEXT_DIM)
