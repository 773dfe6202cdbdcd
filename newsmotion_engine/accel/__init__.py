"""Accelerations for the diffusion backends, one concern per module, each a removable add-on
applied to stock diffusers components (the model code is never forked):

- :mod:`.fp8`: FP8 (e4m3) linear layers with rowwise scales, FP8 compute via ``torch._scaled_mm``.
- :mod:`.compile`: regional ``torch.compile`` of the repeated blocks (optionally CUDA graphs).
- :mod:`.teacache`: TeaCache as a diffusers ``ModelHook`` (skip denoiser calls).
- :mod:`.cfg`: CFG window and one-pass CFG with guidance momentum.
- :mod:`.memory`: tiled VAE decode, chunked feed-forward.
- :mod:`.attention`: attention kernel choice and an FP8 Triton self-attention kernel.

Modules import torch (and diffusers / triton where needed); import them only where used.
"""
