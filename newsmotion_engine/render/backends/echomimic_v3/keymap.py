"""The official EchoMimicV3 checkpoint's names -> ours (one key map, like diffusers'
``scripts/convert_wan_to_diffusers.py`` per model).

The release (``flash/transformer/diffusion_pytorch_model.safetensors``) keeps the original Wan
module names (``blocks.N.self_attn.q``, ``blocks.N.cross_attn.k_img``, ``head.head``...) and the
audio modules of ``src/wan_transformer3d_audio_2512.py`` (``audio_injection.*``,
``blocks.N.cross_attn.{q,k,v}_audio``, ``norm_k_audio``); :class:`~.model.EchoMimicV3Transformer3DModel`
is diffusers' Wan layout plus those audio modules (on ``attn2``). The original Wan config keys
(``dim``, ``in_dim``, ``num_heads``...) map onto our constructor's in :func:`transformer_kwargs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["KEY_RULES", "official_to_ours", "ours_to_official", "transformer_kwargs"]

# (official name, our name) templates: ``{i}`` a block index, ``{p}`` ``weight`` or ``bias``.
KEY_RULES: tuple[tuple[str, str], ...] = (
    ("patch_embedding.{p}", "patch_embedding.{p}"),
    ("text_embedding.0.{p}", "condition_embedder.text_embedder.linear_1.{p}"),
    ("text_embedding.2.{p}", "condition_embedder.text_embedder.linear_2.{p}"),
    ("time_embedding.0.{p}", "condition_embedder.time_embedder.linear_1.{p}"),
    ("time_embedding.2.{p}", "condition_embedder.time_embedder.linear_2.{p}"),
    ("time_projection.1.{p}", "condition_embedder.time_proj.{p}"),
    ("img_emb.proj.0.{p}", "condition_embedder.image_embedder.norm1.{p}"),
    ("img_emb.proj.1.{p}", "condition_embedder.image_embedder.ff.net.0.proj.{p}"),
    ("img_emb.proj.3.{p}", "condition_embedder.image_embedder.ff.net.2.{p}"),
    ("img_emb.proj.4.{p}", "condition_embedder.image_embedder.norm2.{p}"),
    ("head.head.{p}", "proj_out.{p}"),
    ("head.modulation", "scale_shift_table"),
    *((f"audio_injection.{m}.{{p}}", f"audio_injection.{m}.{{p}}") for m in ("proj1", "proj1_vf", "proj2", "proj3", "norm")),
    *((f"blocks.{{i}}.self_attn.{x}.{{p}}", f"blocks.{{i}}.attn1.to_{x}.{{p}}") for x in "qkv"),
    ("blocks.{i}.self_attn.o.{p}", "blocks.{i}.attn1.to_out.0.{p}"),
    *((f"blocks.{{i}}.{a}.norm_{x}.weight", f"blocks.{{i}}.attn{n}.norm_{x}.weight")
      for a, n in (("self_attn", 1), ("cross_attn", 2)) for x in "qk"),
    *((f"blocks.{{i}}.cross_attn.{x}.{{p}}", f"blocks.{{i}}.attn2.to_{x}.{{p}}") for x in "qkv"),
    ("blocks.{i}.cross_attn.o.{p}", "blocks.{i}.attn2.to_out.0.{p}"),
    *((f"blocks.{{i}}.cross_attn.{x}_img.{{p}}", f"blocks.{{i}}.attn2.add_{x}_proj.{{p}}") for x in "kv"),
    ("blocks.{i}.cross_attn.norm_k_img.weight", "blocks.{i}.attn2.norm_added_k.weight"),
    *((f"blocks.{{i}}.cross_attn.{x}_audio.{{p}}", f"blocks.{{i}}.attn2.to_{x}_audio.{{p}}") for x in "qkv"),
    ("blocks.{i}.cross_attn.norm_k_audio.weight", "blocks.{i}.attn2.norm_k_audio.weight"),
    ("blocks.{i}.norm3.{p}", "blocks.{i}.norm2.{p}"),  # the affine cross-attention norm
    ("blocks.{i}.ffn.0.{p}", "blocks.{i}.ffn.net.0.proj.{p}"),
    ("blocks.{i}.ffn.2.{p}", "blocks.{i}.ffn.net.2.{p}"),
    ("blocks.{i}.modulation", "blocks.{i}.scale_shift_table"),
)


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)"))


_FORWARD = tuple((_pattern(theirs), ours) for theirs, ours in KEY_RULES)
_BACKWARD = tuple((_pattern(ours), theirs) for theirs, ours in KEY_RULES)


def _translate(name: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str | None:
    for pattern, template in rules:
        m = pattern.fullmatch(name)
        if m:
            return template.format(**m.groupdict())
    return None


def official_to_ours(name: str) -> str | None:
    """Our parameter name for an official one, or None when no rule matches."""
    return _translate(name, _FORWARD)


def ours_to_official(name: str) -> str | None:
    """The official name of one of our parameters (None when it has none)."""
    return _translate(name, _BACKWARD)


def transformer_kwargs(official: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Our constructor kwargs from an original-layout ``config.json`` (``dim``, ``ffn_dim``,
    ``num_heads``, ``num_layers``, ``in_dim``, ``out_dim``, ``text_dim``, ``freq_dim``, ``eps``),
    on top of ``base`` (the released kwargs, for the audio keys the original config lacks)."""
    out = dict(base)
    dim = int(official.get("dim", out["num_attention_heads"] * out["attention_head_dim"]))
    heads = int(official.get("num_heads", out["num_attention_heads"]))
    if dim % heads:
        raise ValueError(f"dim {dim} is not divisible by num_heads {heads}")
    out.update(num_attention_heads=heads, attention_head_dim=dim // heads, added_kv_proj_dim=dim)
    for theirs, ours in (("ffn_dim", "ffn_dim"), ("num_layers", "num_layers"), ("in_dim", "in_channels"),
                         ("out_dim", "out_channels"), ("text_dim", "text_dim"), ("freq_dim", "freq_dim"), ("eps", "eps")):  # fmt: skip
        if theirs in official:
            out[ours] = official[theirs]
    if official.get("model_type", "i2v") != "i2v":
        raise ValueError(f"model_type {official.get('model_type')!r}: EchoMimicV3 is an i2v model")
    return out
