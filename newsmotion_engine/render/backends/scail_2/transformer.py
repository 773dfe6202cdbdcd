"""The SCAIL-2 in-context DiT, built from diffusers' Wan pieces (``WanTransformerBlock``,
``WanTimeTextImageEmbedding``), with SCAIL-2's own embeddings, token layout and RoPE.

Architecture (zai-org/SCAIL-2, ``wan/modules/model_scail2.py``, ``SCAIL2Model``): a Wan2.1 I2V 14B
DiT whose token sequence is ``[reference | video | driving]``:

- reference: the reference image's latents (+ 4 ones) through ``patch_embedding`` — one latent
  frame, concatenated in time before the noisy video so both go through the same convolution;
- video: the noisy latents (+ 4 mask channels: zeros, or the clean-history mask of a continued
  segment) through ``patch_embedding``; the reference mask latents (28 channels over the
  reference frame, zeros over the video) go through ``patch_embedding_mask`` and are added to both;
- driving: the driving video's latents at **half** the spatial size (+ 4 ones) through
  ``patch_embedding_pose``, plus the driving masks (28 channels) through the same
  ``patch_embedding_mask``.

RoPE is mode-specific (:func:`scail_rope`): the reference sits at time 0 and the video and driving
tokens start at time 1 (animation), or all start at time 0 with the reference moved 120 rows down
(replacement); the driving tokens are shifted 120 columns right, and their rotations are the 2x2
averages of the full-resolution grid's (complex averages, as the official ``rope_apply_pose``).
Only the video tokens are decoded by the head.

The blocks, the time/text/image embedder and the output head are diffusers' Wan modules, so the
acceleration registry (FP8 linears, the attention kernel on ``blocks[i].attn1``, regional compile
over ``_repeated_blocks``) applies unchanged. Official checkpoint names map onto these modules with
:func:`official_to_ours`.
"""

from __future__ import annotations

import math
import re

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.normalization import FP32LayerNorm
from diffusers.models.transformers.transformer_wan import WanTimeTextImageEmbedding, WanTransformerBlock
from torch import nn

__all__ = ["HISTORY_MASK_CHANNELS", "POSE_SHIFT_W", "REPLACE_SHIFT_H", "SCAIL2Transformer3DModel", "official_to_ours", "scail_rope"]

HISTORY_MASK_CHANNELS = 4  # the i2v mask channels stacked on every latent input
POSE_SHIFT_W = 120  # official kwargs["rope_W_shift"]["pose"]
REPLACE_SHIFT_H = 120  # official kwargs["rope_H_shift"]["ref"] in replacement mode
ROPE_POSITIONS = 8192  # official rope_params(8192, ...)


def _angles(positions: int, dim: int, theta: float = 10000.0) -> torch.Tensor:
    """``[positions, dim // 2]`` rotation angles (float64), as Wan's ``rope_params``."""
    inv = 1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.outer(torch.arange(positions, dtype=torch.float64), inv)


def _grid_angles(head_dim: int, f: int, h: int, w: int, t0: int, h0: int, w0: int) -> torch.Tensor:
    """Angles ``[f, h, w, head_dim // 2]`` of a token grid starting at (t0, h0, w0)."""
    d = head_dim
    dt, dh = d - 4 * (d // 6), 2 * (d // 6)
    at = _angles(t0 + f, dt)[t0:]
    ah = _angles(h0 + h, dh)[h0:]
    aw = _angles(w0 + w, dh)[w0:]
    return torch.cat([at[:, None, None].expand(f, h, w, -1), ah[None, :, None].expand(f, h, w, -1),
                      aw[None, None, :].expand(f, h, w, -1)], dim=-1)  # fmt: skip


def scail_rope(head_dim: int, frames: int, h: int, w: int, *, replace: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(cos, sin)`` tables ``[1, S, 1, head_dim]`` (diffusers' interleaved layout) of the
    sequence ``[reference (1 x h x w) | video (frames x h x w) | driving (frames x h/2 x w/2)]``,
    ``h``, ``w`` in tokens. ``replace``: replacement mode's shifts (see the module docstring)."""
    t_video = 0 if replace else 1
    ref = _grid_angles(head_dim, 1, h, w, 0, REPLACE_SHIFT_H if replace else 0, 0)
    video = _grid_angles(head_dim, frames, h, w, t_video, 0, 0)
    pose = _grid_angles(head_dim, frames, h, w, t_video, 0, POSE_SHIFT_W)
    parts = []
    for a in (ref, video):
        parts.append((torch.cos(a).reshape(-1, a.shape[-1]), torch.sin(a).reshape(-1, a.shape[-1])))
    # The driving tokens sit on a half-size grid: the average of each 2x2 cell's unit rotations.
    pooled = [nn.functional.avg_pool2d(fn(pose).permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1) for fn in (torch.cos, torch.sin)]
    parts.append(tuple(p.reshape(-1, p.shape[-1]) for p in pooled))
    cos = torch.cat([c for c, _ in parts]).repeat_interleave(2, dim=-1)
    sin = torch.cat([s for _, s in parts]).repeat_interleave(2, dim=-1)
    return cos.float()[None, :, None], sin.float()[None, :, None]


class SCAIL2Transformer3DModel(ModelMixin, ConfigMixin):
    """SCAIL-2's DiT (see the module docstring). Config names follow the official ``config.json``
    (``dim``, ``ffn_dim``, ``in_dim``, ``mask_dim``...)."""

    _repeated_blocks = ["WanTransformerBlock"]
    _no_split_modules = ["WanTransformerBlock"]
    _keep_in_fp32_modules = ["time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"]

    @register_to_config
    def __init__(self, dim: int = 5120, ffn_dim: int = 13824, freq_dim: int = 256, in_dim: int = 20, mask_dim: int = 28,
                 out_dim: int = 16, num_heads: int = 40, num_layers: int = 40, text_dim: int = 4096, image_dim: int = 1280,
                 text_len: int = 512, eps: float = 1e-6, patch_size: tuple[int, int, int] = (1, 2, 2)) -> None:  # fmt: skip
        super().__init__()
        p = tuple(patch_size)
        self.patch_embedding = nn.Conv3d(in_dim, dim, kernel_size=p, stride=p)
        self.patch_embedding_pose = nn.Conv3d(in_dim, dim, kernel_size=p, stride=p)
        self.patch_embedding_mask = nn.Conv3d(mask_dim, dim, kernel_size=p, stride=p)
        self.condition_embedder = WanTimeTextImageEmbedding(dim=dim, time_freq_dim=freq_dim, time_proj_dim=dim * 6,
                                                            text_embed_dim=text_dim, image_embed_dim=image_dim)  # fmt: skip
        self.blocks = nn.ModuleList(
            [WanTransformerBlock(dim, ffn_dim, num_heads, "rms_norm_across_heads", cross_attn_norm=True, eps=eps,
                                 added_kv_proj_dim=dim) for _ in range(num_layers)]  # fmt: skip
        )
        self.norm_out = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.proj_out = nn.Linear(dim, out_dim * math.prod(p))
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, dim) / dim**0.5)

    def forward(self, latents: torch.Tensor, timestep: torch.Tensor, *, text: torch.Tensor, image: torch.Tensor,
                reference: torch.Tensor, reference_mask: torch.Tensor, pose: torch.Tensor, driving_mask: torch.Tensor,
                history_mask: torch.Tensor | None = None, replace: bool = False) -> torch.Tensor:  # fmt: skip
        """One denoiser call -> the flow prediction of the video latents ``[B, 16, T, h, w]``.

        Args:
            latents: noisy video latents ``[B, 16, T, h, w]``.
            timestep: ``[B]``.
            text: UMT5 embeddings ``[B, 512, text_dim]`` (zero-padded, as Wan pads them).
            image: CLIP features of the reference image ``[B, 257, image_dim]``.
            reference: the reference image's latents ``[B, 16, 1, h, w]``.
            reference_mask: its mask latents ``[B, 28, 1, h, w]`` (zeros are added over the video).
            pose: the driving video's latents at half size ``[B, 16, T, h/2, w/2]``.
            driving_mask: their mask latents ``[B, 28, T, h/2, w/2]``.
            history_mask: ``[B, 4, T, h, w]`` (1 over the clean history latent frames of a continued
                segment), or None (zeros: nothing known).
            replace: replacement mode's RoPE (else animation).
        """
        b, _, frames, h, w = latents.shape
        p_t, p_h, p_w = self.config.patch_size
        dtype = self.patch_embedding.weight.dtype
        ones = lambda x: torch.ones_like(x[:, :HISTORY_MASK_CHANNELS])  # noqa: E731
        if history_mask is None:
            history_mask = torch.zeros_like(latents[:, :HISTORY_MASK_CHANNELS])
        x = torch.cat([torch.cat([reference, ones(reference)], 1), torch.cat([latents, history_mask.to(latents)], 1)], dim=2)
        mask = torch.cat([reference_mask, reference_mask.new_zeros(b, reference_mask.shape[1], frames, h, w)], dim=2)
        x = self.patch_embedding(x.to(dtype)) + self.patch_embedding_mask(mask.to(dtype))
        y = self.patch_embedding_pose(torch.cat([pose, ones(pose)], 1).to(dtype)) + self.patch_embedding_mask(driving_mask.to(dtype))
        hidden = torch.cat([x.flatten(2).transpose(1, 2), y.flatten(2).transpose(1, 2)], dim=1)

        head_dim = self.config.dim // self.config.num_heads
        cos, sin = scail_rope(head_dim, frames // p_t, h // p_h, w // p_w, replace=replace)
        rotary = (cos.to(hidden.device), sin.to(hidden.device))
        temb, tproj, context, context_img = self.condition_embedder(timestep, text.to(dtype), image.to(dtype))
        tproj = tproj.unflatten(1, (6, -1))
        context = torch.cat([context_img, context], dim=1)
        for block in self.blocks:
            hidden = block(hidden, context, tproj, rotary)

        shift, scale = (self.scale_shift_table.to(temb.device) + temb.unsqueeze(1)).chunk(2, dim=1)
        hidden = (self.norm_out(hidden.float()) * (1 + scale) + shift).type_as(hidden)
        ref_tokens = (h // p_h) * (w // p_w)
        video = self.proj_out(hidden[:, ref_tokens : ref_tokens * (1 + frames // p_t)])
        video = video.reshape(b, frames // p_t, h // p_h, w // p_w, p_t, p_h, p_w, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return video.flatten(6, 7).flatten(4, 5).flatten(2, 3)


# Official (wan/modules/model_scail2.py) parameter names -> ours; first match wins.
_KEY_MAP: tuple[tuple[str, str], ...] = (
    (r"^text_embedding\.0\.", "condition_embedder.text_embedder.linear_1."),
    (r"^text_embedding\.2\.", "condition_embedder.text_embedder.linear_2."),
    (r"^time_embedding\.0\.", "condition_embedder.time_embedder.linear_1."),
    (r"^time_embedding\.2\.", "condition_embedder.time_embedder.linear_2."),
    (r"^time_projection\.1\.", "condition_embedder.time_proj."),
    (r"^img_emb\.proj\.0\.", "condition_embedder.image_embedder.norm1."),
    (r"^img_emb\.proj\.1\.", "condition_embedder.image_embedder.ff.net.0.proj."),
    (r"^img_emb\.proj\.3\.", "condition_embedder.image_embedder.ff.net.2."),
    (r"^img_emb\.proj\.4\.", "condition_embedder.image_embedder.norm2."),
    (r"^head\.head\.", "proj_out."),
    (r"^head\.modulation$", "scale_shift_table"),
    (r"^blocks\.(\d+)\.self_attn\.([qkv])\.", r"blocks.\1.attn1.to_\2."),
    (r"^blocks\.(\d+)\.self_attn\.o\.", r"blocks.\1.attn1.to_out.0."),
    (r"^blocks\.(\d+)\.self_attn\.norm_([qk])\.", r"blocks.\1.attn1.norm_\2."),
    (r"^blocks\.(\d+)\.cross_attn\.([qkv])\.", r"blocks.\1.attn2.to_\2."),
    (r"^blocks\.(\d+)\.cross_attn\.o\.", r"blocks.\1.attn2.to_out.0."),
    (r"^blocks\.(\d+)\.cross_attn\.([kv])_img\.", r"blocks.\1.attn2.add_\2_proj."),
    (r"^blocks\.(\d+)\.cross_attn\.norm_k_img\.", r"blocks.\1.attn2.norm_added_k."),
    (r"^blocks\.(\d+)\.cross_attn\.norm_([qk])\.", r"blocks.\1.attn2.norm_\2."),
    (r"^blocks\.(\d+)\.norm3\.", r"blocks.\1.norm2."),  # the official affine cross-attention norm
    (r"^blocks\.(\d+)\.ffn\.0\.", r"blocks.\1.ffn.net.0.proj."),
    (r"^blocks\.(\d+)\.ffn\.2\.", r"blocks.\1.ffn.net.2."),
    (r"^blocks\.(\d+)\.modulation$", r"blocks.\1.scale_shift_table"),
    (r"^(patch_embedding(?:_pose|_mask)?\.(?:weight|bias))$", r"\1"),
)


def official_to_ours(name: str) -> str | None:
    """Our parameter name for an official checkpoint key (a ``model.`` / ``module.`` prefix is
    dropped), or None when the key is not a parameter of the model."""
    name = re.sub(r"^(?:module\.|model\.)+", "", name)
    for pattern, repl in _KEY_MAP:
        if re.match(pattern, name):
            return re.sub(pattern, repl, name)
    return None
