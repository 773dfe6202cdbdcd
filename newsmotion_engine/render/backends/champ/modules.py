"""Champ's own modules on diffusers components: the guidance encoder, the reference attention
(how the reference UNet's features reach the denoising UNet) and the guidance features' entry
into the denoising UNet.

- :class:`GuidanceEncoder` re-creates ``models/guidance_encoder.py`` of the official code with
  the same parameter names (so its checkpoints load as they are): a 3x3 conv, six 3x3 convs (three
  of them stride 2: 1/8 of the input size, the latent size), a spatial transformer per conv, one
  more at the end, and a zero-initialised 3x3 conv out to the UNet's first width. The official
  forward uses only the last of those transformers ("FIXME: Temporarily only use the last
  attention"); all are built so the checkpoint's keys match, and the forward is the official one.
  Every op is per frame, so frames may be encoded in any chunks (the official
  ``guidance_process_size``).
- Reference attention (``models/mutual_self_attention.py``, ``fusion_blocks="full"``): every
  spatial self-attention of the reference UNet records its input (the normalised hidden states)
  in a bank (:class:`ReferenceWriter`); the same self-attention of the denoising UNet attends over
  its own frame's tokens followed by the reference's (:class:`ReferenceReader`), paired by module
  path (the official code pairs them by sorting both UNets' blocks the same way: the same pairs).
  Under classifier-free guidance the official reader overwrites the unconditional half with plain
  self-attention (its ``uc_mask``), so the unconditional half never sees the reference; we do the
  same, which also makes the reference pass of the unconditional half (zero CLIP embedding) dead
  work: we run the reference UNet once, conditional only.
- Guidance features: the official UNet adds them to ``conv_in``'s output
  (``sample = self.conv_in(sample); sample = sample + guidance_fea``); :class:`GuidanceInjection`
  does the same with a forward hook on diffusers' ``UNetMotionModel.conv_in``, so the model code
  stays stock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GuidanceEncoder",
    "GuidanceInjection",
    "ReferenceReader",
    "ReferenceState",
    "ReferenceWriter",
    "install_reference_attention",
    "reference_attention_names",
]


class GuidanceEncoder(nn.Module):
    """One guidance type's encoder (official ``GuidanceEncoder``): RGB map frames
    ``[N, 3, H, W]`` in 0..1 -> ``[N, embedding_channels, H/8, W/8]``."""

    def __init__(self, guidance_embedding_channels: int, guidance_input_channels: int = 3,
                 block_out_channels: tuple[int, ...] = (16, 32, 96, 256), attention_num_heads: int = 8,
                 norm_num_groups: int = 32) -> None:  # fmt: skip
        from diffusers.models.transformers.transformer_2d import Transformer2DModel

        super().__init__()

        def attention(channels: int, groups: int) -> nn.Module:
            return Transformer2DModel(num_attention_heads=attention_num_heads, attention_head_dim=channels // attention_num_heads,
                                      in_channels=channels, norm_num_groups=groups)  # fmt: skip

        self.guidance_input_channels = guidance_input_channels
        self.conv_in = nn.Conv2d(guidance_input_channels, block_out_channels[0], kernel_size=3, padding=1)
        self.blocks = nn.ModuleList()
        self.attentions = nn.ModuleList()
        for c_in, c_out in zip(block_out_channels[:-1], block_out_channels[1:]):
            self.blocks.append(nn.Conv2d(c_in, c_in, kernel_size=3, padding=1))
            self.attentions.append(attention(c_in, 1))
            self.blocks.append(nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, stride=2))
            self.attentions.append(attention(c_out, norm_num_groups))
        self.guidance_attention = attention(block_out_channels[-1], norm_num_groups)
        self.conv_out = nn.Conv2d(block_out_channels[-1], guidance_embedding_channels, kernel_size=3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, condition: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.conv_in(condition))
        for block in self.blocks:
            x = F.silu(block(x))
        x = self.attentions[-1](x).sample
        return self.conv_out(x)


def reference_attention_names(unet: Any) -> list[str]:
    """The spatial self-attention modules of a UNet (``...attentions.N.transformer_blocks.M.attn1``):
    what the official ``ReferenceAttentionControl`` hooks (motion modules excluded)."""
    return [name[: -len(".processor")] for name in unet.attn_processors
            if ".attentions." in name and name.endswith(".attn1.processor")]  # fmt: skip


@dataclass
class ReferenceState:
    """The reference bank (module path -> ``[1, L, C]``) and what the reader needs to know about the
    current call: frames per batch row and how many leading rows are unconditional."""

    bank: dict[str, torch.Tensor] = field(default_factory=dict)
    frames: int = 1
    uncond_rows: int = 0
    # True: the official order of work (the reference pass at batch 2, every row attends over the
    # bank, then the unconditional rows are recomputed without it); same result, more work.
    official: bool = False

    def clear(self) -> None:
        self.bank.clear()


class ReferenceWriter:
    """Self-attention processor of the reference UNet: records its input, attends as usual."""

    def __init__(self, name: str, state: ReferenceState) -> None:
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.name, self.state, self.inner = name, state, AttnProcessor2_0()

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states=None, attention_mask=None,
                 temb=None, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        self.state.bank[self.name] = hidden_states.detach()
        return self.inner(attn, hidden_states, None, attention_mask, temb)


class ReferenceReader:
    """Self-attention processor of the denoising UNet: conditional rows attend over their own
    tokens then the reference's; unconditional rows (the leading ``uncond_rows``) over their own only."""

    def __init__(self, name: str, state: ReferenceState) -> None:
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.name, self.state, self.inner = name, state, AttnProcessor2_0()

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states=None, attention_mask=None,
                 temb=None, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        ref = self.state.bank.get(self.name)
        if ref is None:
            return self.self_attend(attn, hidden_states, attention_mask, temb)
        u = self.state.uncond_rows
        if self.state.official:
            bank = ref.to(hidden_states.dtype).repeat_interleave(self.state.frames, dim=0)  # "b t l c -> (b t) l c"
            out = self.inner(attn, hidden_states, torch.cat([hidden_states, bank], dim=1), attention_mask, temb)
            if u:
                out = torch.cat([self.inner(attn, hidden_states[:u], None, attention_mask, temb), out[u:]], dim=0)
            return out
        cond = hidden_states[u:]
        out = self.attend_with_reference(attn, cond, ref.to(cond.dtype), attention_mask, temb)
        if u:
            out = torch.cat([self.self_attend(attn, hidden_states[:u], attention_mask, temb), out], dim=0)
        return out

    def self_attend(self, attn: Any, hidden_states: torch.Tensor, attention_mask: Any, temb: Any) -> torch.Tensor:
        """Plain self-attention (rows that do not see the reference)."""
        return self.inner(attn, hidden_states, None, attention_mask, temb)

    def attend_with_reference(self, attn: Any, cond: torch.Tensor, ref: torch.Tensor, attention_mask: Any, temb: Any) -> torch.Tensor:
        """Each row of ``cond`` ``[(B F), L, C]`` attends over its own tokens then the reference
        ``ref`` ``[B, L_ref, C]`` (one per video: each frame row of it sees the same tokens)."""
        bank = ref.repeat_interleave(cond.shape[0] // ref.shape[0], dim=0)
        return self.inner(attn, cond, torch.cat([cond, bank], dim=1), attention_mask, temb)


def install_reference_attention(reference_unet: Any, denoising_unet: Any, state: ReferenceState) -> int:
    """Put writers on the reference UNet's and readers on the denoising UNet's spatial
    self-attentions (all other processors kept); returns the number of pairs.

    Raises:
        ValueError: the two UNets' spatial self-attentions differ (they must share SD1.5's layout).
    """
    names = reference_attention_names(reference_unet)
    if names != reference_attention_names(denoising_unet):
        raise ValueError("the reference and denoising UNets' spatial self-attentions differ; they must share one layout")
    for unet, proc in ((reference_unet, ReferenceWriter), (denoising_unet, ReferenceReader)):
        procs = dict(unet.attn_processors)
        for n in names:
            procs[f"{n}.processor"] = proc(n, state)
        unet.set_attn_processor(procs)
    return len(names)


class GuidanceInjection:
    """Adds the current guidance features (``[(B F), C, h, w]``) to ``unet.conv_in``'s output."""

    def __init__(self, unet: Any) -> None:
        self.features: torch.Tensor | None = None
        self.handle = unet.conv_in.register_forward_hook(self._add)

    def _add(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        if self.features is None:
            return output
        if self.features.shape != output.shape:
            raise ValueError(f"guidance features {list(self.features.shape)} do not match conv_in's output {list(output.shape)}")
        return output + self.features.to(output.dtype)

    def remove(self) -> None:
        self.handle.remove()
