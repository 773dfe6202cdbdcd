"""Attention choice for the Wan transformers, and low-precision self-attention kernels in Triton.

At 720x1280 one Wan-Animate segment is 75.6k tokens and self-attention is ~72 % of the forward's
FLOPs, so the attention kernel decides the speed. The config :class:`Attention` (registry order
30; :func:`set_attention` / :func:`restore_attention`) picks, per model:

- ``"sdpa"``: PyTorch's ``scaled_dot_product_attention`` with its own backend choice (stock);
- ``"cudnn"`` / ``"flash"``: force the cuDNN or the flash SDPA backend (diffusers' dispatcher);
- ``"fp8-triton"``: the self-attention layers (``attn1``) use :func:`fp8_attention`, the kernel
  below; the small cross-attentions stay on SDPA;
- ``"fp8-cudnn"``: the self-attention layers use cuDNN's FP8 flash attention
  (:mod:`newsmotion_engine.accel.attention_cudnn`, needs the ``nvidia-cudnn-frontend`` package).

The kernel is a FlashAttention-2 style forward (Dao 2023, https://arxiv.org/abs/2307.08691) with
SageAttention's quantization ideas (Zhang et al. https://arxiv.org/abs/2410.02367 and
https://arxiv.org/abs/2411.10958). Every variant (:data:`FP8_VARIANTS`):

- smooths K by subtracting its per-channel mean over tokens (softmax is invariant to a per-query
  constant; it removes the channel offsets that 8-bit formats would spend their range on). V is
  *not* smoothed: measured at 75.6k tokens, subtracting V's (tiny) mean before rounding made the
  rounding error systematic (``Q(v - m) == v`` whenever ``m`` is under half a grid step, so the
  mean added back afterwards is counted twice) and raised the error from 0.010 to 0.104 (bf16 P V)
  and from 0.039 to 0.073 (FP8 P V);
- quantizes K with one scale per (head, channel) and folds those scales into Q
  (``q . k == (q * s) . (k / s)``), then Q with one scale per token (``QK_INT8``: int8, else
  e4m3), and runs ``Q K^T`` on the 8-bit tensor cores. What is left is one factor per query row
  (its token scale times the softmax scale times ``log2 e``), so the kernel turns a score into
  the softmax exponent with a single FFMA. Per-channel K scales give every key the same absolute
  logit error, which is what softmax feels (an earlier per-token K scale cost a second multiply
  per score);
- quantizes V per (head, channel) to e4m3 and P (produced directly in ``[0, 448]``) per element,
  and runs ``P V`` in FP8 (``PV_FP8``; else P and V in bf16).

The kernel (``attention_triton.py``) reads its tiles through TMA descriptors: Triton does not
vectorize a transposed pointer tile, so per-byte loads of K cost more instructions per score than
the math (counted in its SASS by ``python -m benchmarks.kernel_sass``). Its speed against cuDNN and
its error are benchmark records (``benchmarks/results/attention_kernel_h200.json``).

Quantization (:func:`quantize_attention_inputs`) is plain torch code, so a compiled block fuses it
with the RoPE and norms before it; only the kernel launch is an opaque ``torch.library`` op.
Accuracy is measured, not assumed: :func:`reference_attention` computes the same quantized
arithmetic in torch (CPU tests hold it against SDPA), and the GPU bench measures each variant's
error against bf16 SDPA and keeps the fastest one under its threshold.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration
from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "ATTENTION_KINDS",
    "DEFAULT_FP8_VARIANT",
    "FP8_HEAD_SIZES",
    "FP8_VARIANTS",
    "Attention",
    "AttentionUnavailableError",
    "Fp8SelfAttnProcessor",
    "Fp8Variant",
    "fp8_attention",
    "fp8_attention_lse",
    "fp8_attention_padded",
    "fp8_head_size",
    "merge_attention",
    "plain_attention_call",
    "project_attention_out",
    "project_qkv",
    "quantize_attention_inputs",
    "reference_attention",
    "reference_attention_lse",
    "register_fp8_processor",
    "restore_attention",
    "set_attention",
]

ATTENTION_KINDS = ("sdpa", "cudnn", "flash", "fp8-triton", "fp8-cudnn")
FP8_KERNELS = ("fp8-triton", "fp8-cudnn")  # the kinds that replace the self-attention processors
ATTENTION_PREPS = ("fused", "torch")
_DIFFUSERS_BACKEND = {"sdpa": "native", "cudnn": "_native_cudnn", "flash": "_native_flash"}
E4M3_MAX = 448.0
INT8_MAX = 127.0
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class Fp8Variant:
    """One kernel variant: the Q/K format (int8 or e4m3), the P/V format (e4m3 or bf16), and
    whether half the softmax's exponentials are a polynomial on the FMA pipe (``poly_exp``:
    ``attention_triton._exp2_poly``; the same quantization, so the same inputs)."""

    qk_int8: bool
    pv_fp8: bool
    poly_exp: bool = False


FP8_VARIANTS: dict[str, Fp8Variant] = {
    "fp8": Fp8Variant(qk_int8=False, pv_fp8=True),
    "int8qk-fp8pv": Fp8Variant(qk_int8=True, pv_fp8=True),
    "int8qk-bf16pv": Fp8Variant(qk_int8=True, pv_fp8=False),
    # the default's arithmetic with every other exponential on the FMA pipe: for heads whose
    # tiles are bound by the EX2 unit (SD1.5's 40-wide ones); not yet timed on a GPU, so not a default
    "int8qk-fp8pv-polyexp": Fp8Variant(qk_int8=True, pv_fp8=True, poly_exp=True),
}
# The variant "fp8-triton" uses unless told otherwise: the fastest one under the bench's 0.05
# error threshold in the kernel sweep (docs/benchmarks.md). "fp8" (e4m3 Q K) is no faster and fails
# the threshold; "int8qk-bf16pv" is the most accurate and still beats cuDNN.
DEFAULT_FP8_VARIANT = "int8qk-fp8pv"


class AttentionUnavailableError(NewsmotionError, RuntimeError):
    """The chosen attention kernel cannot run here (e.g. FP8 Triton without a Hopper GPU)."""


def fp8_attention_supported() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine"
    cap = torch.cuda.get_device_capability()
    if cap < (9, 0):
        return False, f"compute capability {cap[0]}.{cap[1]}; the FP8 kernel needs 9.0 (H100/H200)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "triton is not installed"
    return True, "ok"


def _variant(name: str | None) -> tuple[str, Fp8Variant]:
    name = name or DEFAULT_FP8_VARIANT
    if name not in FP8_VARIANTS:
        raise ValueError(f"fp8 attention variant {name!r}: use one of {', '.join(FP8_VARIANTS)}")
    return name, FP8_VARIANTS[name]


@dataclass(frozen=True)
class Attention(AccelConfig):
    """The attention kernel of the Wan transformer (registry order 30).

    Args:
        kernel: one of :data:`ATTENTION_KINDS` (``"sdpa"`` is stock); the option ``attention``.
        variant: the :data:`FP8_VARIANTS` entry for ``"fp8-triton"`` (default
            :data:`DEFAULT_FP8_VARIANT`, filled in here so reports name it); must stay unset for
            the other kernels. The option ``fp8_attention_variant``.
        prep: for ``"fp8-triton"``, how Wan-Animate-2's cached pass makes the in-context kernel's
            inputs from the Q/K/V projections (QK-norm, RoPE, 8-bit quantization): ``"fused"``
            (default; three Triton passes, :mod:`newsmotion_engine.accel.attention_prep`) or
            ``"torch"`` (torch ops that inductor fuses, the earlier path). Other processors
            ignore it; must stay unset for the other kernels.
    """

    technique: ClassVar[str] = "attention"
    kernel: str = "sdpa"
    variant: str | None = None
    prep: str | None = None

    def __post_init__(self) -> None:
        if self.kernel not in ATTENTION_KINDS:
            raise AccelConfigError(f"attention {self.kernel!r}: use one of {', '.join(ATTENTION_KINDS)}")
        if self.kernel == "fp8-triton":
            if self.variant is None:
                object.__setattr__(self, "variant", DEFAULT_FP8_VARIANT)
            elif self.variant not in FP8_VARIANTS:
                raise AccelConfigError(f"fp8 attention variant {self.variant!r}: use one of {', '.join(FP8_VARIANTS)}")
            if self.prep is None:
                object.__setattr__(self, "prep", "fused")
            elif self.prep not in ATTENTION_PREPS:
                raise AccelConfigError(f"attention prep {self.prep!r}: use one of {', '.join(ATTENTION_PREPS)}")
        elif self.variant is not None or self.prep is not None:
            raise AccelConfigError(
                f"fp8 attention variant / prep {self.variant or self.prep!r} apply to attention 'fp8-triton' only, not {self.kernel!r}"
            )


@dataclass
class PreviousAttention:
    """What :func:`set_attention` replaced: the self-attention processors (FP8 kernel), or the
    process-wide active diffusers attention backend (a diffusers backend choice)."""

    processors: list[Any] | None
    active_backend: str | None = None


# Model class name -> (factory(Attention config, the processor it replaces) -> self-attention
# processor, layers(model) -> the attention modules it replaces). Wan / Wan-Animate use
# Fp8SelfAttnProcessor on each block's ``attn1``; a model whose self-attention has another
# signature or place registers its own processor and layers (wan_animate_2.attention,
# mimicmotion.attention, champ.attention).
_FP8_PROCESSORS: dict[str, tuple[Any, Any]] = {}


def register_fp8_processor(model_class: str, factory: Any, *, blocks_attr: str | None = None, layers: Any = None,
                           wraps: bool = False) -> None:  # fmt: skip
    """Use ``factory(config)`` for ``attention='fp8-triton'`` on models of ``model_class``: on
    ``blocks[i].<blocks_attr>`` (a transformer's blocks), or on the modules ``layers(model)`` returns.
    ``wraps``: the factory is ``factory(config, previous)``, given the processor it replaces (one
    that carries per-layer state, e.g. champ's reference attention, keeps it)."""
    if (blocks_attr is None) == (layers is None):
        raise ValueError("register_fp8_processor: give exactly one of blocks_attr and layers")
    build = factory if wraps else (lambda config, previous: factory(config))
    _FP8_PROCESSORS[model_class] = (build, layers or _block_layers(blocks_attr))


def _block_layers(attr: str) -> Any:
    return lambda model: [getattr(block, attr) for block in model.blocks]


def _fp8_processor(model: Any) -> tuple[Any, Any]:
    return _FP8_PROCESSORS.get(type(model).__name__, (_default_processor, _block_layers("attn1")))


def _default_processor(config: Attention, previous: Any = None) -> Any:
    if config.kernel == "fp8-cudnn":
        from newsmotion_engine.accel.attention_cudnn import CudnnFp8SelfAttnProcessor

        return CudnnFp8SelfAttnProcessor()
    return Fp8SelfAttnProcessor(config.variant)


def kernel_supported(kernel: str) -> tuple[bool, str]:
    """Whether the 8-bit attention ``kernel`` (one of :data:`FP8_KERNELS`) can run here, and why not."""
    if kernel == "fp8-cudnn":
        from newsmotion_engine.accel.attention_cudnn import cudnn_fp8_supported

        return cudnn_fp8_supported()
    return fp8_attention_supported()


def set_attention(model: Any, config: Attention) -> tuple[dict[str, Any], PreviousAttention]:
    """Select the attention kernel of ``model`` (a Wan / Wan-Animate transformer, or a model with
    a registered FP8 processor, e.g. mimicmotion's SVD UNet) in place.
    Returns ``(report, previous)``; :func:`restore_attention` undoes it with ``previous``.

    Raises:
        AttentionUnavailableError: ``"fp8-triton"`` where the kernel cannot run (no Hopper GPU).
    """
    if config.kernel in FP8_KERNELS:
        ok, why = kernel_supported(config.kernel)
        if not ok:
            raise AttentionUnavailableError(f"attention={config.kernel!r} cannot run: {why}; use attention='sdpa' or 'cudnn'")
        factory, layers = _fp8_processor(model)
        modules = layers(model)
        previous = [m.processor for m in modules]
        for m, replaced in zip(modules, previous):
            m.set_processor(factory(config, replaced))
        processor = modules[0].processor
        report = {"attention": config.kernel, "variant": config.variant, "self_attention_layers": len(previous),
                  "processor": type(processor).__name__}  # fmt: skip
        if hasattr(processor, "prep"):
            report["prep"] = processor.prep
        return report, PreviousAttention(previous)
    # diffusers' set_attention_backend also changes its process-wide active backend, which
    # reset_attention_backend leaves alone; remember it so removal restores it too.
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    active = _AttentionBackendRegistry.get_active_backend()[0]
    model.set_attention_backend(_DIFFUSERS_BACKEND[config.kernel])
    return ({"attention": config.kernel, "diffusers_backend": _DIFFUSERS_BACKEND[config.kernel]},
            PreviousAttention(None, getattr(active, "value", str(active))))  # fmt: skip


def restore_attention(model: Any, previous: PreviousAttention) -> None:
    """Undo :func:`set_attention`: the replaced processors come back, or the diffusers attention
    backend (per layer and process-wide) is what it was before."""
    if previous.processors is not None:
        _, layers = _fp8_processor(model)
        for m, processor in zip(layers(model), previous.processors):
            m.set_processor(processor)
        return
    if previous.active_backend is not None:
        model.set_attention_backend(previous.active_backend)  # restores the process-wide choice
    model.reset_attention_backend()  # layers follow the process-wide choice again, as when loaded


def _apply(components: Any, config: Attention) -> AccelHandle:
    report, previous = set_attention(components.transformer, config)
    return AccelHandle(report=report, state=previous)


def _remove(components: Any, handle: AccelHandle) -> None:
    restore_attention(components.transformer, handle.state)


register_acceleration(Attention, order=30, apply=_apply, remove=_remove)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Wan's RoPE rotates interleaved (even, odd) channel pairs.
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2).type_as(x)


def plain_attention_call(attn: Any, hidden_states: torch.Tensor, attention_mask: Any) -> bool:
    """Whether diffusers' ``AttnProcessor2_0`` computes this call of a diffusers ``Attention`` as
    projections, softmax attention at ``1 / sqrt(head)`` and the output projection, nothing else
    (no mask, no spatial / group / QK / cross norm, the default scale, ``[B, L, C]`` input): what
    a processor swapping in our kernel must check before it does the same (mimicmotion, champ)."""
    head = attn.to_q.out_features // attn.heads
    return (attention_mask is None and hidden_states.dim() == 3 and attn.spatial_norm is None and attn.group_norm is None
            and attn.norm_q is None and attn.norm_k is None and not attn.norm_cross and math.isclose(attn.scale, head**-0.5))  # fmt: skip


def project_attention_out(attn: Any, out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The end of ``AttnProcessor2_0`` for a BSHD attention output ``out``: heads joined, the
    output projection (and dropout), the residual where the module adds one, the rescale."""
    out = attn.to_out[1](attn.to_out[0](out.flatten(2, 3).type_as(residual)))
    if attn.residual_connection:
        out = out + residual
    return out / attn.rescale_output_factor


def project_qkv(attn: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Wan self-attention's Q, K, V: projections (fused or not), QK-norms, BSHD heads."""
    if getattr(attn, "fused_projections", False):
        q, k, v = attn.to_qkv(hidden_states).chunk(3, dim=-1)
    else:
        q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
    q, k = attn.norm_q(q), attn.norm_k(k)
    return tuple(t.unflatten(2, (attn.heads, -1)) for t in (q, k, v))  # type: ignore[return-value]


class Fp8SelfAttnProcessor:
    """Self-attention (``attn1``) of a Wan block with :func:`fp8_attention`; the same projections,
    QK-norms, RoPE and output projection as diffusers' ``WanAttnProcessor`` self-attention path."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, variant: str | None = None) -> None:
        self.variant, _ = _variant(variant)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """BSHD attention after projections, norms and RoPE (subclasses change the kernel)."""
        return fp8_attention(q, k, v, variant=self.variant)

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, rotary_emb: Any = None) -> torch.Tensor:  # fmt: skip
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("Fp8SelfAttnProcessor handles unmasked self-attention only")
        q, k, v = project_qkv(attn, hidden_states)
        if rotary_emb is not None:
            q, k = _rotary(q, *rotary_emb), _rotary(k, *rotary_emb)
        group = getattr(self, "ulysses_group", None)  # set by accel.context_parallel
        if group is None:
            out = self.attend(q, k, v)
        else:
            from newsmotion_engine.accel.context_parallel import ulysses_attention

            out = ulysses_attention(q, k, v, self.attend, group)
        out = out.flatten(2, 3).type_as(q)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


# --------------------------------------------------------------------------------------------
# Quantization (torch; traceable, so compiled blocks fuse it) and its torch reference
# --------------------------------------------------------------------------------------------
class QuantizedQKV(NamedTuple):
    """The kernel's inputs; every tensor contiguous in exactly this shape (the kernel builds its
    TMA descriptors over the raw buffers: a strided view would silently read other heads' rows)."""

    q: torch.Tensor  # [B, H, S, D] int8 or e4m3: Q times K's channel scales, per-token quantized
    k: torch.Tensor  # [B, H, S, D] int8 or e4m3: K minus its per-channel mean, over its channel scales
    vt: torch.Tensor  # [B, H, D, S16] e4m3 (or bf16): V transposed (K-major for P V), S padded to 16
    q_scale: torch.Tensor  # [B, H, S] float32: Q's token scale * softmax scale * log2(e)
    v_scale: torch.Tensor  # [B, H, D] float32


def _pad16(n: int) -> int:
    return -(-n // 16) * 16  # TMA wants 16-byte row strides


def quantize_keys(k: torch.Tensor, variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BSHD keys -> ``(k8, channel scales [B, 1, H, D], channel means [B, 1, H, D])``: smoothed
    (minus the per-channel mean over tokens), over one scale per (head, channel); BSHD ``k8``."""
    _, var = _variant(variant)
    kf = k.float()
    mean = kf.mean(dim=1, keepdim=True)
    kf = kf - mean  # smoothing: softmax(q.(k - m)) == softmax(q.k)
    qmax = INT8_MAX if var.qk_int8 else E4M3_MAX
    kc = kf.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / qmax  # per (head, channel) [B, 1, H, D]
    if var.qk_int8:
        k8 = (kf / kc).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    else:
        k8 = (kf / kc).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return k8, kc, mean


def quantize_queries(q: torch.Tensor, k_scale: torch.Tensor, variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BSHD queries with the keys' channel scales folded in -> ``(q8 [B, H, S, D], per-row factor
    [B, H, S])``: the factor is Q's token scale * softmax scale * log2(e)."""
    _, var = _variant(variant)
    qmax = INT8_MAX if var.qk_int8 else E4M3_MAX
    qf = q.float() * k_scale  # K's channel scales move into Q
    qs = qf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30) / qmax  # per token [B, S, H, 1]
    if var.qk_int8:
        q8 = (qf / qs).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    else:
        q8 = (qf / qs).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    sm = LOG2E / math.sqrt(q.shape[-1])
    return q8.permute(0, 2, 1, 3).contiguous(), (qs * sm).squeeze(-1).transpose(1, 2).contiguous()


def quantize_values(v: torch.Tensor, variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BSHD values -> ``(vt [B, H, D, S16], channel scales [B, H, D])``: V transposed for ``P V``,
    e4m3 over one scale per (head, channel) (or bf16 with unit scales), S padded to 16."""
    _, var = _variant(variant)
    S = v.shape[1]
    vf = v.float()
    if var.pv_fp8:
        vs = vf.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / E4M3_MAX  # per (head, channel)
        v8 = (vf / vs).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    else:
        vs = torch.ones_like(vf[:, :1])
        v8 = vf.to(torch.bfloat16)
    vt = v8.permute(0, 2, 3, 1)
    if _pad16(S) != S:
        vt = torch.nn.functional.pad(vt.to(torch.float32) if vt.dtype == torch.float8_e4m3fn else vt, (0, _pad16(S) - S)).to(v8.dtype)
    return vt.contiguous(), vs.squeeze(1).contiguous()


def quantize_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> QuantizedQKV:
    """BSHD ``q, k, v`` -> :class:`QuantizedQKV` for ``variant`` (see the module docstring)."""
    k8, kc, _ = quantize_keys(k, variant)
    q8, q_scale = quantize_queries(q, kc, variant)
    vt, v_scale = quantize_values(v, variant)
    return QuantizedQKV(q=q8, k=k8.permute(0, 2, 1, 3).contiguous(), vt=vt, q_scale=q_scale, v_scale=v_scale)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> torch.Tensor:
    """The kernel's arithmetic in torch (float32; P quantized against the global row max, where
    the kernel uses the running max: the same rounding model, not the same bits). BSHD in/out."""
    _, var = _variant(variant)
    S = q.shape[1]
    x = quantize_attention_inputs(q, k, v, variant)
    s = (x.q.float() @ x.k.float().transpose(-1, -2)) * x.q_scale[..., :, None]
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    l = p.sum(dim=-1, keepdim=True)  # noqa: E741
    if var.pv_fp8:
        p = (p * E4M3_MAX).to(torch.float8_e4m3fn).float() / E4M3_MAX
    else:
        p = p.to(torch.bfloat16).float()
    out = (p @ x.vt[..., :S].float().transpose(-1, -2)) * x.v_scale[..., None, :] / l
    return out.transpose(1, 2).to(q.dtype)


# --------------------------------------------------------------------------------------------
# The Triton kernel (defined lazily: triton is only imported where the kernel is used).
# --------------------------------------------------------------------------------------------
_KERNEL: Any = None
# (BLOCK_M, BLOCK_N, num_warps, num_stages, PIPELINE_QK). Compiled here for sm_90 with Triton 3.6,
# none spills. Measured on the H200 at [1, 75600, 40, 128] (benchmarks/results/attention_kernel_h200.json):
# 64-row tiles with 4 warps (182 registers) fit two CTAs per SM that run out of phase, one's
# softmax over the other's tensor-core work: 148-152 ms at 3 stages (64x64: 162); 128x128 with
# 8 warps (207 registers) is one CTA per SM whose two warpgroups move in lock-step: 163 ms;
# 128x64 with 4 warps (254 registers; two CTAs of 128 rows, half the L2 traffic): 151-153 ms;
# PIPELINE_QK (the next tile's Q K^T issued before this tile's softmax; 240 registers, so 2
# stages): 155 ms. A block-wide skip of the output rescale when no row max moved was bit-exact
# but no faster (150 / 166 ms) and was dropped. The autotuner picks per (S, D, variant).
AUTOTUNE_CONFIGS = ((64, 128, 4, 3, False), (64, 128, 4, 2, True), (128, 64, 4, 3, False), (128, 128, 8, 3, False))


def _build_kernel(autotune: bool = True):
    """The kernel, autotuned over :data:`AUTOTUNE_CONFIGS`; ``autotune=False`` returns the bare
    ``triton.jit`` function (Triton's interpreter, ``TRITON_INTERPRET=1``, runs it on CPU with
    explicit ``BLOCK_M`` / ``BLOCK_N``: tests and debugging)."""
    from newsmotion_engine.accel import attention_triton as T

    return T.autotuned(AUTOTUNE_CONFIGS) if autotune else T.attention_fwd


def _head_desc(t: torch.Tensor, rows: int, cols: int, block: list[int]) -> Any:
    """A TMA descriptor over a ``[B, H, R, C]`` tensor seen as ``[B*H, rows, cols]`` (``rows`` /
    ``cols`` may be less than ``R`` / ``C``: a padded tensor's valid part)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, [t.shape[0] * t.shape[1], rows, cols], [t.shape[-2] * t.shape[-1], t.shape[-1], 1], block)


def launch_kernel(kernel: Any, x: QuantizedQKV, variant: str | None = None,
                  sparse: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None, return_lse: bool = False,
                  reference: Any = None, state: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                  **meta: Any) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Run ``kernel`` (from :func:`_build_kernel`) on quantized inputs -> bf16 BSHD output.
    ``meta`` (``BLOCK_M``, ``BLOCK_N``) is for the bare kernel; the autotuned one picks its own.
    ``sparse``: a block layout's ``(kv_idx, kv_cnt, kv_tail)`` int32 tensors on the kernel's
    device (:mod:`newsmotion_engine.accel.sparse`), built for the ``BLOCK_M`` / ``BLOCK_N`` given
    in ``meta`` (the bare kernel only: the tile sizes must not change under the layout).
    ``return_lse``: also return each row's log2-sum-exp2 of the smoothed scores, float32
    ``[B, H, S]`` (see :func:`fp8_attention_lse`, which adds the smoothing back).
    ``reference``: an in-context reference's kernel inputs
    (:class:`newsmotion_engine.accel.attention_incontext.ReferenceLaunch`): each query of frame
    ``f >= 1`` also attends to reference frame ``f - 1`` in the same softmax.
    ``state``: with a ``reference``, start each row from the online-softmax state in these float32
    buffers (accumulator ``[B*H, S, D]`` in the generation V's units, running max and sum
    ``[B*H, S]``, left by the warp-specialized kernel over the generation keys,
    :func:`launch_kernel_ws`) and run the reference keys alone."""
    _, var = _variant(variant)
    B, H, S, D = x.q.shape
    for name in QuantizedQKV._fields:
        if not getattr(x, name).is_contiguous():
            raise ValueError(f"fp8 attention: quantized {name} must be contiguous (the kernel indexes raw memory)")
    if x.vt.shape[-1] != _pad16(S):
        raise ValueError(f"fp8 attention: vt must be [B, H, D, {_pad16(S)}] (S padded to 16), got {tuple(x.vt.shape)}")
    out = torch.empty((B, S, H, D), device=x.q.device, dtype=torch.bfloat16)
    bm, bn = meta.get("BLOCK_M", 64), meta.get("BLOCK_N", 64)  # the autotuner's pre-hook resets these

    q_desc = _head_desc(x.q, S, D, [1, bm, D])
    k_desc = _head_desc(x.k, S, D, [1, bn, D])
    vt_desc = _head_desc(x.vt, D, S, [1, D, bn])

    def grid(m: dict[str, Any]) -> tuple[int, int]:
        return (math.ceil(S / m["BLOCK_M"]), B * H)

    if sparse is None:
        idx = cnt = tail = x.q_scale  # never read: SPARSE=False compiles the dense loop
        max_k = 0
    else:
        idx, cnt, tail = sparse
        max_k = idx.shape[-1]
        meta["SPARSE"] = True
    lse = torch.empty((B, H, S), device=x.q.device, dtype=torch.float32) if return_lse else x.q_scale
    if return_lse:
        meta["RETURN_LSE"] = True
    if reference is None:  # never read: REF=False compiles no reference loop
        ref_args: tuple[Any, ...] = (q_desc, k_desc, vt_desc, x.q_scale, x.q_scale, x.v_scale, 0)
    else:
        r = reference
        if sparse is not None or return_lse:
            raise ValueError("fp8 attention: an in-context reference runs neither sparse nor with an LSE output")
        s_ref = r.k.shape[2]
        if r.q.shape != x.q.shape or r.k.shape[:2] != (B, H) or r.vt.shape[-1] != _pad16(s_ref) or S % r.hw or (S // r.hw - 1) * r.hw != s_ref:
            raise ValueError(f"fp8 attention: reference of {s_ref} tokens does not fit {S} queries in frames of {r.hw}")
        ref_args = (_head_desc(r.q, S, D, [1, bm, D]), _head_desc(r.k, s_ref, D, [1, bn, D]), _head_desc(r.vt, D, s_ref, [1, D, bn]),
                    r.q_scale, r.delta, r.v_scale, r.hw)  # fmt: skip
        meta["REF"] = True
        if state is not None:
            meta.update(STATE_IN=True, ST_ACC=state[0], ST_M=state[1], ST_L=state[2])
    if state is not None and reference is None:
        raise ValueError("fp8 attention: a starting state goes with the reference part of an in-context launch")
    kernel[grid](q_desc, k_desc, vt_desc, out, x.q_scale, x.v_scale, S, H,
                 out.stride(0), out.stride(1), out.stride(2), idx, cnt, tail, max_k, lse, *ref_args, D=D,
                 QK_INT8=var.qk_int8, PV_FP8=var.pv_fp8, POLY_EXP=var.poly_exp, **meta)  # fmt: skip
    return (out, lse) if return_lse else out


# The warp-specialized kernel (attention_triton.attention_fwd_ws): (BLOCK_M, BLOCK_N, num_warps,
# num_stages); BLOCK_M 128 with 4 warps is what Triton's Hopper pass turns into a producer warp
# group and two consumer warpgroups of 64 rows (12 warps, no spills; benchmarks.attention_ws --sass).
WS_CONFIGS = ((128, 128, 4, 2), (128, 128, 4, 3), (128, 64, 4, 2), (128, 64, 4, 3))
# Whether launches take the warp-specialized kernel where it applies (ws_applies and ws_usable);
# the environment variable NEWSMOTION_ATTENTION_WS=1 asks for it in a process. Off: on an H100
# with Triton 3.6 the Hopper pass's two-consumer schedule gives a plain bf16 attention loop the
# wrong output (relative error 0.94) and hangs ours or faults it (with host descriptors it hangs
# both); the one-consumer (64-row) form is right but slower than no specialization
# (benchmarks/results/attention_ws_probe_h100.json, python -m benchmarks.attention_ws --probe).
WARP_SPECIALIZED = os.environ.get("NEWSMOTION_ATTENTION_WS", "0") == "1"
# Triton releases whose Hopper warp specialization the probe found broken: asked-for launches
# warn once and take the one-loop kernel. Re-run the probe on a newer Triton before trusting it.
WS_BROKEN_TRITON = ("3.6.",)
_WS_KERNEL: Any = None
_WS_WARNED = False


def ws_usable() -> bool:
    """Whether this process's Triton is not one of :data:`WS_BROKEN_TRITON` (warns once if not)."""
    global _WS_WARNED
    import triton

    if not triton.__version__.startswith(WS_BROKEN_TRITON):
        return True
    if not _WS_WARNED:
        _WS_WARNED = True
        warnings.warn(f"fp8 attention: the warp-specialized kernel is broken on Triton {triton.__version__} "
                      "(python -m benchmarks.attention_ws --probe); using the one-loop kernel", RuntimeWarning, stacklevel=3)  # fmt: skip
    return False


def ws_applies(x: QuantizedQKV, sparse: Any = None, return_lse: bool = False) -> bool:
    """The warp-specialized kernel takes dense launches without an LSE output whose query scales
    can go through TMA (rows of 16-byte multiples: S divisible by 4)."""
    return sparse is None and not return_lse and x.q.shape[2] % 4 == 0


def _set_scratch_allocator(device: torch.device) -> None:
    """Global memory for descriptors made inside a kernel (``tl.make_tensor_descriptor``), from
    PyTorch's caching allocator on the launch's device."""
    import triton

    def alloc(size: int, alignment: int, stream: Any) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


def launch_kernel_ws(kernel_ws: Any, kernel: Any, x: QuantizedQKV, variant: str | None = None, reference: Any = None,
                     one_loop_meta: dict[str, Any] | None = None, **meta: Any) -> torch.Tensor:  # fmt: skip
    """:func:`launch_kernel` through ``attention_triton.attention_fwd_ws`` (autotuned, or bare with
    ``BLOCK_M`` / ``BLOCK_N`` / ``MASK_TAIL`` and launch options in ``meta``). With an in-context
    ``reference`` the warp-specialized loop leaves each row's online-softmax state in float32
    buffers and ``kernel`` (:func:`_build_kernel`'s; ``one_loop_meta`` for a bare one) finishes it
    with the reference keys (``STATE_IN``): the same softmax over the same keys in the same order
    as one launch of ``kernel``."""
    _, var = _variant(variant)
    B, H, S, D = x.q.shape
    if not ws_applies(x):
        raise ValueError(f"fp8 attention: the warp-specialized kernel needs S divisible by 4, got {S}")
    out = torch.empty((B, S, H, D), device=x.q.device, dtype=torch.bfloat16)
    if reference is not None:
        state = (torch.empty((B * H, S, D), device=x.q.device, dtype=torch.float32),
                 torch.empty((B * H, S), device=x.q.device, dtype=torch.float32),
                 torch.empty((B * H, S), device=x.q.device, dtype=torch.float32))  # fmt: skip
    else:
        state = (out, out, out)  # never touched: STATE_OUT=False stores the output instead
    _set_scratch_allocator(x.q.device)
    kernel_ws[lambda m_: (math.ceil(S / m_["BLOCK_M"]), B * H)](
        x.q, x.k, x.vt, x.q_scale, out, x.v_scale, S, H,
        out.stride(0), out.stride(1), out.stride(2), *state, D=D, QK_INT8=var.qk_int8, PV_FP8=var.pv_fp8,
        STATE_OUT=reference is not None, **meta)  # fmt: skip
    if reference is None:
        return out
    return launch_kernel(kernel, x, variant, reference=reference, state=state, **(one_loop_meta or {}))


def _launch(x: QuantizedQKV, variant: str, reference: Any = None) -> torch.Tensor:
    """The production launch: the warp-specialized kernel where it is on and applies, else the
    one-loop kernel (both autotuned, built on first use)."""
    global _KERNEL, _WS_KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    if WARP_SPECIALIZED and ws_applies(x) and not FP8_VARIANTS[variant].poly_exp and ws_usable():  # no POLY_EXP there
        if _WS_KERNEL is None:
            from newsmotion_engine.accel import attention_triton as T

            _WS_KERNEL = T.autotuned_ws(WS_CONFIGS)
        return launch_kernel_ws(_WS_KERNEL, _KERNEL, x, variant, reference=reference)
    return launch_kernel(_KERNEL, x, variant, reference=reference)


@torch.library.custom_op("newsmotion::fp8_attention_kernel", mutates_args=())
def _kernel_op(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_scale: torch.Tensor, v_scale: torch.Tensor,
               variant: str) -> torch.Tensor:  # fmt: skip
    return _launch(QuantizedQKV(q, k, vt, q_scale, v_scale), variant)


@_kernel_op.register_fake
def _(q, k, vt, q_scale, v_scale, variant):  # noqa: ANN001, ANN202
    B, H, S, D = q.shape
    return q.new_empty((B, S, H, D), dtype=torch.bfloat16)


def _kernel_inputs(caller: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None) -> tuple[str, QuantizedQKV]:
    if q.device.type != "cuda":
        raise AttentionUnavailableError(f"{caller} needs CUDA tensors (Hopper GPU)")
    if q.shape != k.shape or q.shape != v.shape or q.shape[-1] not in (64, 128):
        raise ValueError(f"{caller}: q, k, v must be equal BSHD shapes with D 64 or 128, got {tuple(q.shape)}")
    name, _ = _variant(variant)
    return name, quantize_attention_inputs(q, k, v, name)


@torch.library.custom_op("newsmotion::fp8_attention_kernel_lse", mutates_args=())
def _kernel_lse_op(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_scale: torch.Tensor, v_scale: torch.Tensor,
                   variant: str) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    return launch_kernel(_KERNEL, QuantizedQKV(q, k, vt, q_scale, v_scale), variant, return_lse=True)


@_kernel_lse_op.register_fake
def _(q, k, vt, q_scale, v_scale, variant):  # noqa: ANN001, ANN202
    B, H, S, D = q.shape
    return q.new_empty((B, S, H, D), dtype=torch.bfloat16), q.new_empty((B, H, S), dtype=torch.float32)


def smoothing_shift(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q . mean_tokens(k)`` in the kernel's exponent units (``log2 e / sqrt(D)``), ``[B, S, H]``
    float32: what K's smoothing took out of every score of a row, which softmax ignores but a
    log-sum-exp must count."""
    mean = k.float().mean(dim=1, keepdim=True)
    return (q.float() * mean).sum(-1) * (LOG2E / math.sqrt(q.shape[-1]))


def fp8_attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fp8_attention` that also returns each query row's log2-sum-exp2 of its scores
    (``q . k * log2 e / sqrt(D)``), float32 ``[B, S, H]``: two attentions over disjoint key sets
    merge exactly with :func:`merge_attention`. CUDA sm_90."""
    name, x = _kernel_inputs("fp8_attention_lse", q, k, v, variant)
    out, lse = _kernel_lse_op(*x, name)
    return out.to(q.dtype), lse.transpose(1, 2) + smoothing_shift(q, k)


def reference_attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact (float32) attention and its log2-sum-exp2 in :func:`fp8_attention_lse`'s units:
    the reference for the split attention in tests and the bench's CPU dry run. BSHD in,
    ``[B, S, H]`` lse."""
    s = torch.einsum("bshd,bthd->bhst", q.float(), k.float()) * (LOG2E / math.sqrt(q.shape[-1]))
    lse = torch.logsumexp(s * math.log(2.0), dim=-1) / math.log(2.0)  # [B, H, S], log2 units
    p = torch.exp2(s - lse[..., None])
    out = torch.einsum("bhst,bthd->bshd", p, v.float())
    return out.to(q.dtype), lse.transpose(1, 2)


def merge_attention(a: torch.Tensor, lse_a: torch.Tensor, b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Attention over the union of two disjoint key sets from the two partial results (BSHD
    outputs, ``[B, S, H]`` log2-sum-exp2 each): weights ``2**lse`` normalised, in float32."""
    m = torch.maximum(lse_a, lse_b)
    wa, wb = torch.exp2(lse_a - m)[..., None], torch.exp2(lse_b - m)[..., None]
    return ((a.float() * wa + b.float() * wb) / (wa + wb)).to(a.dtype)


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> torch.Tensor:
    """Non-causal softmax attention of BSHD tensors ``[B, S, H, D]`` (D = 64 or 128) on the 8-bit
    tensor cores (``variant`` from :data:`FP8_VARIANTS`); returns BSHD in ``q``'s dtype. CUDA sm_90."""
    name, x = _kernel_inputs("fp8_attention", q, k, v, variant)
    out = _kernel_op(*x, name)
    return out.to(q.dtype)


FP8_HEAD_SIZES = (64, 128)  # the head sizes the kernel is compiled for


def fp8_head_size(d: int) -> int | None:
    """The kernel head size a head of ``d`` channels runs at, zero-padded (the least of
    :data:`FP8_HEAD_SIZES` not below ``d``); ``None`` above 128."""
    return next((p for p in FP8_HEAD_SIZES if d <= p), None)


def fp8_attention_padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None, *,
                         lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """:func:`fp8_attention` (``lse``: :func:`fp8_attention_lse`) for any head size up to 128
    (e.g. SD1.5's 40 and 80). Zero channels add nothing to ``q . k`` and come out of ``P V`` as
    zeros, sliced off; ``q`` is scaled by ``sqrt(D_pad / D)`` so the kernel's ``1 / sqrt(D_pad)``
    is the softmax's ``1 / sqrt(D)`` (the log-sum-exp is then that of the true scores). The same
    attention, up to the 8-bit rounding (a zero channel quantizes to zero)."""
    d = q.shape[-1]
    padded = fp8_head_size(d)
    if padded is None:
        raise ValueError(f"fp8_attention_padded: head size {d} (the kernel takes up to {FP8_HEAD_SIZES[-1]})")
    if padded != d:
        q = (q.float() * math.sqrt(padded / d)).to(q.dtype)
        q, k, v = (torch.nn.functional.pad(t, (0, padded - d)) for t in (q, k, v))
    if lse:
        out, rows = fp8_attention_lse(q, k, v, variant)
        return out[..., :d], rows
    return fp8_attention(q, k, v, variant)[..., :d]
