"""Accelerations for the diffusion backends, one concern per module, each a removable add-on
applied to stock diffusers components (the model code is never forked). Each module defines a
frozen config class and registers its apply/remove handler in :mod:`.registry`:

- :mod:`.registry`: the config base class, the registry, ``apply_accelerations`` /
  ``remove_accelerations`` (see its docstring for the API and how to add a technique).
- :mod:`.fp8`: ``Fp8Linears``, FP8 (e4m3) linear layers with rowwise scales (``torch._scaled_mm``).
- :mod:`.compile`: ``Compile``, regional ``torch.compile`` of the repeated blocks (optionally CUDA graphs).
- :mod:`.compile_vae`: ``CompileVae``, regional ``torch.compile`` of a UNet backend's VAE decoder blocks.
- :mod:`.attention`: ``Attention``, the attention kernel choice, and an FP8 Triton self-attention kernel.
- :mod:`.one_key_cross`: ``OneKeyCross``, cross-attention over a one-token context (the UNet backends' CLIP image
  embedding) computed as its value, broadcast (exact).
- :mod:`.short_attention`: ``ShortAttention``, self-attention over short sequences (AnimateDiff's 24 frames)
  packed many to a Triton program (bench-only, not yet timed).
- :mod:`.teacache`: ``TeaCache``, a diffusers ``ModelHook`` that skips denoiser calls.
- :mod:`.cfg`: ``CFGSchedule``, CFG window and one-pass CFG with guidance momentum.
- :mod:`.attention_cudnn`: cuDNN's FP8 attention (``Attention("fp8-cudnn")``, opt-in, an approximation).
- :mod:`.memory`: ``VaeTiling`` (tiled VAE decode) and ``FfnChunks`` (chunked feed-forward).
- :mod:`.memory_format`: ``ChannelsLast``, convolution weights in NHWC order (the UNet backends).
- :mod:`.conv3d`: ``Conv3dAs2d``, 3-D convolutions (SVD's temporal layers, the Wan VAE) computed by 2-D ones.
- :mod:`.causal_pad`: ``CausalPadFold``, the Wan VAE's spatial padding done by its convolutions (no ``F.pad`` copy).
- :mod:`.vae_norm`: ``FusedVaeNorm``, the Wan VAE's RMS norm and SiLU in one pass (a Triton kernel on a GPU).
- :mod:`.module_toggle`: the apply / remove pair of these settings (channels-last, 3-D as 2-D, folded padding, fused norms, one-key cross-attention) (a setting switched in named components' layers).
- :mod:`.sparse`: ``SparseAttention``, EXPERIMENTAL block-sparse attention in the FP8 kernel.
- :mod:`.pyramid`: ``PyramidCascade``, EXPERIMENTAL first denoising steps at a lower resolution.

``registry``, ``cfg`` and ``pyramid`` import no torch; the other modules import torch (and diffusers / triton
where needed): import them only where used.
"""
