"""The encoders both Wan backends build their caches with: the VAE (distribution mode, normalized
latents), UMT5 (the stock 512-token layout), CLIP (Wan's whole-frame preprocessing), and the
4-channel i2v mask their conditioning stacks on the latents."""

from __future__ import annotations

from typing import Any

import numpy as np

from newsmotion_engine.render.backends.wan.segments import VAE_SCALE_TEMPORAL

__all__ = ["TEXT_TOKENS", "encode_image_tokens", "encode_prompts", "i2v_mask", "to_video_tensor", "vae_encode"]

TEXT_TOKENS = 512


def i2v_mask(latent_t: int, h: int, w: int, mask_len: int, torch_mod: Any = None):
    """The 4-channel i2v mask ``[1, 4, latent_t, h, w]``: the first ``mask_len`` pixel frames are
    known (1), the rest generated (0); pixel frame 0 counts four times (Wan's first latent frame)."""
    import torch

    pix = torch.zeros(1, 1, (latent_t - 1) * VAE_SCALE_TEMPORAL + 1, h, w)
    pix[:, :, :mask_len] = 1
    first = pix[:, :, :1].repeat_interleave(VAE_SCALE_TEMPORAL, dim=2)
    pix = torch.cat([first, pix[:, :, 1:]], dim=2)
    return pix.view(1, latent_t, VAE_SCALE_TEMPORAL, h, w).transpose(1, 2).contiguous()


def to_video_tensor(frames: np.ndarray):
    """uint8 ``[T, H, W, 3]`` -> float32 ``[1, 3, T, H, W]`` in [-1, 1]."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(frames)).float().div_(127.5).sub_(1.0)
    return t.permute(3, 0, 1, 2).unsqueeze(0)


def vae_encode(vae: Any, video, device: Any):
    """VAE latents (distribution mode, as the stock pipeline's ``argmax``), normalized with the
    VAE's latents mean/std. ``video`` float ``[1, 3, T, H, W]`` in [-1, 1] -> float32 on CPU."""
    import torch

    with torch.no_grad():
        lat = vae.encode(video.to(device=device, dtype=vae.dtype)).latent_dist.mode().float()
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32, device=lat.device).view(1, z, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32, device=lat.device).view(1, z, 1, 1, 1)
    return ((lat - mean) / std).cpu()


def encode_prompts(tokenizer: Any, text_encoder: Any, texts: list[str], device: Any):
    """UMT5 last hidden states, trimmed to each prompt's length and zero-padded to 512 tokens
    (the stock pipeline's layout) -> float32 ``[len(texts), 512, D]`` on CPU."""
    import torch

    tok = tokenizer(texts, padding="max_length", max_length=TEXT_TOKENS, truncation=True,
                    add_special_tokens=True, return_attention_mask=True, return_tensors="pt")  # fmt: skip
    ids, mask = tok["input_ids"].to(device), tok["attention_mask"].to(device)
    with torch.no_grad():
        out = text_encoder(ids, mask).last_hidden_state.float()
    lens = mask.sum(dim=1)
    for i, n in enumerate(lens.tolist()):
        out[i, n:] = 0
    return out.cpu()


def encode_image_tokens(image_encoder: Any, frame: np.ndarray, device: Any):
    """CLIP penultimate hidden states of one uint8 RGB frame -> float32 ``[1, N, D]`` on CPU.

    Preprocessed as Wan does (its ``CLIPModel.visual``): the whole frame stretched to 224 x 224
    (bicubic), then CLIP's mean / std; not ``CLIPImageProcessor``'s resize-and-centre-crop, which
    keeps only the middle of a portrait frame. Through diffusers' ``clip_visual_encode``, the
    function wan-animate-2's caches use."""
    import torch
    from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode

    pixels = to_video_tensor(frame[None])[0, :, 0].to(device)  # [3, H, W] in [-1, 1]
    with torch.no_grad():
        return clip_visual_encode(image_encoder, pixels, device, image_encoder.dtype).float().cpu()
