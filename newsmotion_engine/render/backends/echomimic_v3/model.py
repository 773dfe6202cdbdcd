"""The EchoMimicV3 transformer on diffusers' Wan components: the Wan 2.1 i2v backbone
(:class:`diffusers.WanTransformer3DModel`: self-attention, text + CLIP-image cross-attention, FFN)
plus the model's audio parts, written from the official definitions
(antgroup/echomimic_v3 ``src/wan_transformer3d_audio_2512.py``, the flash-pro release):

- :class:`AudioProjection` (official ``AudioProjModel``, the ``audio_injection`` module): per
  latent frame, the wav2vec2 hidden states of its video frames' audio windows -> ``32`` context
  tokens of the transformer's width. Latent frame 0 (one video frame) reads one 5-frame window;
  every later latent frame (four video frames) reads 8 windows' worth
  (:func:`latent_frame_audio`).
- Per block, an audio cross-attention inside ``attn2`` (:class:`AudioCrossAttnProcessor`): the
  block's cross-attention query attends, frame by frame, to its latent frame's audio tokens; the
  result is added to the text and image attention before the output projection, as the official
  ``WanI2VCrossAttentionAudio`` does. Its linears live on ``attn2`` (``to_q_audio``,
  ``to_k_audio``, ``to_v_audio``, ``norm_k_audio``); ``to_q_audio`` exists in the release but its
  output is never used (the official forward overwrites it), so it is loaded and skipped.

Everything else is diffusers' (rotary embedding, condition embedder, blocks, output head), so the
acceleration registry's FP8 linears, regional compile and self-attention kernel apply unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from diffusers import WanTransformer3DModel
from diffusers.configuration_utils import register_to_config
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from torch import nn

__all__ = ["AudioCrossAttnProcessor", "AudioProjection", "EchoMimicV3Transformer3DModel", "latent_frame_audio"]

TEXT_TOKENS = 512  # the UMT5 context length, as diffusers' Wan processor assumes
FRAMES_PER_LATENT = 4  # the Wan VAE's temporal stride


def latent_frame_audio(audio: torch.Tensor, window: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Split per-video-frame audio windows into what each latent frame reads (official
    ``get_ai2v_audio``).

    ``audio`` ``[B, F, window, L, C]`` (``F = 4k + 1`` video frames, each with its ``window``
    neighbouring wav2vec2 frames of ``L`` hidden layers) -> ``(first [B, 1, window, L, C],
    later [B, k, window + 3, L, C])``: latent frame 0 is video frame 0's window; each later latent
    frame covers four video frames and takes the first one's window up to its centre, the two
    middle ones' centres and the last one's window from its centre.
    """
    first = audio[:, :1]
    b, f = audio.shape[:2]
    if (f - 1) % FRAMES_PER_LATENT:
        raise ValueError(f"audio for {f} video frames; the model takes 4k+1")
    later = audio[:, 1:].reshape(b, (f - 1) // FRAMES_PER_LATENT, FRAMES_PER_LATENT, *audio.shape[2:])
    mid = window // 2
    head = later[:, :, 0, : mid + 1]
    centre = later[:, :, 1:-1, mid]
    tail = later[:, :, -1, mid:]
    return first, torch.cat([head, centre, tail], dim=2)


class AudioProjection(nn.Module):
    """Official ``AudioProjModel``: flattened audio windows -> ReLU MLP -> ``context_tokens``
    tokens of ``output_dim``, layer-normed. Parameter names are the release's (``proj1``,
    ``proj1_vf``, ``proj2``, ``proj3``, ``norm``)."""

    def __init__(self, window: int = 5, layers: int = 12, channels: int = 768, intermediate_dim: int = 512,
                 output_dim: int = 1536, context_tokens: int = 32) -> None:  # fmt: skip
        super().__init__()
        self.context_tokens, self.output_dim = context_tokens, output_dim
        self.proj1 = nn.Linear(window * layers * channels, intermediate_dim)
        self.proj1_vf = nn.Linear((window + FRAMES_PER_LATENT - 1) * layers * channels, intermediate_dim)
        self.proj2 = nn.Linear(intermediate_dim, intermediate_dim)
        self.proj3 = nn.Linear(intermediate_dim, context_tokens * output_dim)
        self.norm = nn.LayerNorm(output_dim)

    def forward(self, first: torch.Tensor, later: torch.Tensor) -> torch.Tensor:
        """``first`` ``[B, 1, w, L, C]``, ``later`` ``[B, k, w + 3, L, C]`` -> ``[B, 1 + k, tokens, dim]``."""
        h = torch.cat([torch.relu(self.proj1(first.flatten(2))), torch.relu(self.proj1_vf(later.flatten(2)))], dim=1)
        h = self.proj3(torch.relu(self.proj2(h)))
        return self.norm(h.unflatten(-1, (self.context_tokens, self.output_dim)))


class AudioCrossAttnProcessor:
    """``attn2`` of an EchoMimicV3 block: text, CLIP-image and per-frame audio attention summed
    before the output projection (official ``WanI2VCrossAttentionAudio.forward``).

    ``encoder_hidden_states`` is ``[B, 257 + 512 + T_lat * tokens, D]``: the image tokens, the
    text tokens, then each latent frame's audio tokens (``tokens`` = ``audio_tokens``); the
    queries of latent frame ``t`` attend to frame ``t``'s audio tokens only.
    """

    def __init__(self, audio_tokens: int, image_tokens: int = 257) -> None:
        self.audio_tokens, self.image_tokens = audio_tokens, image_tokens

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                 attention_mask: Any = None, rotary_emb: Any = None) -> torch.Tensor:  # fmt: skip
        b, n_q, _ = hidden_states.shape
        heads = attn.heads
        img = encoder_hidden_states[:, : self.image_tokens]
        text = encoder_hidden_states[:, self.image_tokens : self.image_tokens + TEXT_TOKENS]
        audio = encoder_hidden_states[:, self.image_tokens + TEXT_TOKENS :]
        frames = audio.shape[1] // self.audio_tokens

        q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (heads, -1))

        def attend(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
            out = F.scaled_dot_product_attention(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2))
            return out.transpose(1, 2).flatten(2).type_as(q_)

        k = attn.norm_k(attn.to_k(text)).unflatten(2, (heads, -1))
        v = attn.to_v(text).unflatten(2, (heads, -1))
        out = attend(q, k, v)
        k_img = attn.norm_added_k(attn.add_k_proj(img)).unflatten(2, (heads, -1))
        v_img = attn.add_v_proj(img).unflatten(2, (heads, -1))
        out = out + attend(q, k_img, v_img)
        # Audio: each latent frame's queries (the sequence is frame-major) against its own tokens.
        a = audio.reshape(b * frames, self.audio_tokens, -1)
        k_a = attn.norm_k_audio(attn.to_k_audio(a)).unflatten(2, (heads, -1))
        v_a = attn.to_v_audio(a).unflatten(2, (heads, -1))
        q_a = q.reshape(b * frames, n_q // frames, heads, -1)
        out = out + attend(q_a, k_a, v_a).reshape(b, n_q, -1)
        return attn.to_out[1](attn.to_out[0](out))


class EchoMimicV3Transformer3DModel(WanTransformer3DModel):
    """The EchoMimicV3 transformer: :class:`WanTransformer3DModel` (i2v: ``image_dim=1280``,
    ``added_kv_proj_dim`` = width) plus ``audio_injection`` and each block's audio attention.

    The ``audio_*`` config keys are the audio projection's (official ``AudioProjModel`` as the
    release builds it: window 5, 12 wav2vec2-base layers of 768, 512 hidden, 32 tokens).

    ``forward(hidden_states, timestep, encoder_hidden_states, encoder_hidden_states_image,
    audio_embeds)``: as diffusers' Wan forward, with ``audio_embeds`` ``[B, F, window, layers,
    channels]`` for the ``F = 4k + 1`` video frames of the latent video.
    """

    _repeated_blocks = ["WanTransformerBlock"]

    @register_to_config
    def __init__(self, patch_size: tuple[int, ...] = (1, 2, 2), num_attention_heads: int = 12, attention_head_dim: int = 128,
                 in_channels: int = 36, out_channels: int = 16, text_dim: int = 4096, freq_dim: int = 256, ffn_dim: int = 8960,
                 num_layers: int = 30, cross_attn_norm: bool = True, qk_norm: str | None = "rms_norm_across_heads",
                 eps: float = 1e-6, image_dim: int | None = 1280, added_kv_proj_dim: int | None = 1536,
                 rope_max_seq_len: int = 1024, pos_embed_seq_len: int | None = None, audio_window: int = 5,
                 audio_layers: int = 12, audio_channels: int = 768, audio_intermediate_dim: int = 512,
                 audio_context_tokens: int = 32) -> None:  # fmt: skip
        super().__init__(patch_size=patch_size, num_attention_heads=num_attention_heads, attention_head_dim=attention_head_dim,
                         in_channels=in_channels, out_channels=out_channels, text_dim=text_dim, freq_dim=freq_dim,
                         ffn_dim=ffn_dim, num_layers=num_layers, cross_attn_norm=cross_attn_norm, qk_norm=qk_norm, eps=eps,
                         image_dim=image_dim, added_kv_proj_dim=added_kv_proj_dim, rope_max_seq_len=rope_max_seq_len,
                         pos_embed_seq_len=pos_embed_seq_len)  # fmt: skip
        inner = num_attention_heads * attention_head_dim
        self.audio_injection = AudioProjection(audio_window, audio_layers, audio_channels, audio_intermediate_dim, inner,
                                               audio_context_tokens)  # fmt: skip
        for block in self.blocks:
            attn = block.attn2
            attn.to_q_audio = nn.Linear(inner, inner)  # in the release, unused by its forward
            attn.to_k_audio = nn.Linear(inner, inner)
            attn.to_v_audio = nn.Linear(inner, inner)
            attn.norm_k_audio = nn.RMSNorm(inner, eps=eps)
            attn.set_processor(AudioCrossAttnProcessor(audio_context_tokens))

    def audio_context(self, audio_embeds: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Audio windows ``[B, F, w, L, C]`` -> the flattened per-frame audio tokens ``[B, T_lat * 32, D]``."""
        first, later = latent_frame_audio(audio_embeds.to(dtype), self.config.audio_window)
        return self.audio_injection(first, later).flatten(1, 2)

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_hidden_states_image: torch.Tensor, audio_embeds: torch.Tensor, return_dict: bool = True,
                attention_kwargs: dict[str, Any] | None = None):  # fmt: skip
        b, _, frames, height, width = hidden_states.shape
        p_t, p_h, p_w = self.config.patch_size
        rotary_emb = self.rope(hidden_states)
        x = self.patch_embedding(hidden_states).flatten(2).transpose(1, 2).contiguous()
        temb, timestep_proj, text, image = self.condition_embedder(timestep, encoder_hidden_states, encoder_hidden_states_image)
        timestep_proj = timestep_proj.unflatten(1, (6, -1))
        audio = self.audio_context(audio_embeds, text.dtype)
        if audio.shape[1] != (frames // p_t) * self.config.audio_context_tokens:
            raise ValueError(f"audio for {audio.shape[1] // self.config.audio_context_tokens} latent frames, video has {frames // p_t}")
        context = torch.cat([image, text, audio], dim=1)
        for block in self.blocks:
            x = block(x, context, timestep_proj, rotary_emb)
        shift, scale = (self.scale_shift_table.to(temb.device) + temb.unsqueeze(1)).chunk(2, dim=1)
        x = (self.norm_out(x.float()) * (1 + scale) + shift).type_as(x)
        x = self.proj_out(x).reshape(b, frames // p_t, height // p_h, width // p_w, p_t, p_h, p_w, -1)
        out = x.permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(6, 7).flatten(4, 5).flatten(2, 3)
        return Transformer2DModelOutput(sample=out) if return_dict else (out,)
