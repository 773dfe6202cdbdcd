"""The self-attention of Wan-Animate-2 on our 8-bit kernel (``attention='fp8-triton'``).

The stock cached pass packs ``[generation | reference]`` tokens into one buffer and runs flex
attention under a block mask: every generation token sees every generation token, and a token of
generation frame ``f >= 1`` also sees reference frame ``f - 1`` (frame 0, the persona's image
latent, sees none). Here that is one launch of the 8-bit kernel with an in-context reference
(:mod:`newsmotion_engine.accel.attention_incontext`): each query tile walks all generation keys,
then its own frame's reference keys, in one online softmax. The extract pass (plain dense
attention, :func:`fp8_attention`) stores each layer's reference K/V in the kernel's form
(:func:`store_reference`, from the keys it has just rotated with the same RoPE the cached pass
applies); a cache that holds them otherwise is converted on first use (:func:`cached_reference`).

:func:`split_cached_attention` is the earlier path (a dense attention and a per-frame one,
merged by log-sum-exp), kept as the bench's comparison and as an exact float32 check in tests.

RoPE: the stock ``rope_apply`` rotates in complex128 (inductor cannot generate code for complex
ops, so every block leaves the compiled graph for it); :func:`rope_fp32` applies the same
rotation with the angles' cos/sin in float32 (differences at float32 rounding, far below bf16),
computing the angles once per call for Q and K.

Shapes the split does not cover (a segment smaller than the grid the stock mask was built for,
padded query rows) fall back to the stock processor, which gives the stock result.
"""

from __future__ import annotations

from typing import Any

import torch

from newsmotion_engine.accel import attention as A
from newsmotion_engine.accel import attention_cudnn as C
from newsmotion_engine.accel.attention_incontext import ReferenceKV, incontext_attention, prepare_reference
from newsmotion_engine.accel.attention_prep import prepared_incontext_attention
from newsmotion_engine.accel.attention_prep import supported as prep_supported
from newsmotion_engine.render.backends.wan_animate_2.kv import Fp8KVLayerCache

__all__ = ["CudnnAnimate2AttnProcessor", "Fp8Animate2AttnProcessor", "cudnn_cached_attention", "prepare_cudnn_reference", "apply_rope", "merge_split", "rope_angles", "rope_fp32", "split_cached_attention"]


def rope_angles(grid_sizes: torch.Tensor, freqs: torch.Tensor, time_stride: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sample, the float32 ``(cos, sin)`` ``[seq, 1, head_dim / 2]`` of the stock
    ``rope_apply``'s angles (complex ``freqs`` split over time / height / width): computed once
    and applied to Q and K by :func:`apply_rope`."""
    c = freqs.shape[1]
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    out = []
    for f, h, w in grid_sizes.tolist():
        angles = torch.cat(
            [parts[0][: f * time_stride : time_stride].view(f, 1, 1, -1).expand(f, h, w, -1),
             parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
             parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)],
            dim=-1,
        ).reshape(f * h * w, 1, -1)  # fmt: skip
        out.append((angles.real.to(torch.float32), angles.imag.to(torch.float32)))
    return out


def apply_rope(x: torch.Tensor, angles: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Rotate BSHD ``x`` by :func:`rope_angles` in float32; tokens past each sample's grid pass
    through. Returns float32."""
    n = x.size(2)
    out = []
    for i, (cos, sin) in enumerate(angles):
        seq = cos.shape[0]
        xi = x[i, :seq].float().reshape(seq, n, -1, 2)
        re, im = xi[..., 0], xi[..., 1]
        rotated = torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(2)
        out.append(torch.cat([rotated, x[i, seq:].float()]))
    return torch.stack(out)


def rope_fp32(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor, time_stride: int = 1) -> torch.Tensor:
    """The stock ``rope_apply`` with real float32 arithmetic (one tensor; the processor computes
    the angles once for Q and K)."""
    return apply_rope(x, rope_angles(grid_sizes, freqs, time_stride))


def split_cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_ref: torch.Tensor, v_ref: torch.Tensor,
                           hw: int, attend_lse: Any) -> torch.Tensor:  # fmt: skip
    """The cached pass's masked attention as two dense ones merged by log-sum-exp (module
    docstring). ``q, k, v`` BSHD over ``frames * hw`` generation tokens; ``k_ref, v_ref`` over
    ``(frames - 1) * hw`` reference tokens; ``attend_lse(q, k, v) -> (out, lse)``."""
    H, D = q.shape[2:]
    per_frame = lambda t: t.reshape(-1, hw, H, D)  # noqa: E731
    return merge_split(q, hw, attend_lse(q, k, v), lambda q_frames: attend_lse(q_frames, per_frame(k_ref), per_frame(v_ref)))


def merge_split(q: torch.Tensor, hw: int, dense: tuple[torch.Tensor, torch.Tensor], reference_lse: Any) -> torch.Tensor:
    """The split's merge: ``dense`` the generation attention of ``q`` and its log2-sum-exp;
    ``reference_lse(q_frames) -> (out, lse)`` each frame's reference attention for the queries of
    frames 1.. as ``[B * (frames - 1), hw, H, D]``."""
    B, S, H, D = q.shape
    ref_frames = S // hw - 1
    out, lse_dense = dense
    ref, lse_ref = reference_lse(q[:, hw:].reshape(B * ref_frames, hw, H, D))
    merged = A.merge_attention(out[:, hw:], lse_dense[:, hw:], ref.reshape(B, ref_frames * hw, H, D),
                               lse_ref.reshape(B, ref_frames * hw, H))  # fmt: skip
    return torch.cat([out[:, :hw], merged.to(out.dtype)], dim=1)


class Fp8Animate2AttnProcessor:
    """``WanAnimate2Attention`` self-attention (``block.self_attn``) with our 8-bit kernel: same
    projections, QK-norms and output projection as diffusers' ``WanAnimate2AttnProcessor``."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, variant: str | None = None, prep: str = "fused") -> None:
        self.variant, _ = A._variant(variant)
        if prep not in A.ATTENTION_PREPS:
            raise ValueError(f"attention prep {prep!r}: use one of {', '.join(A.ATTENTION_PREPS)}")
        self.prep = prep
        self.stats = {"incontext": 0, "fallback": 0}

    def _count(self, path: str) -> None:
        # Eager calls only: under torch.compile a Python counter is a guarded constant, and every
        # increment recompiled the block (measured on the H200: the recompile limit, then eager).
        if not torch.compiler.is_compiling():
            self.stats[path] += 1

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return A.fp8_attention(q, k, v, variant=self.variant)

    def attend_reference(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: ReferenceKV, hw: int) -> torch.Tensor:
        return incontext_attention(q, k, v, ref, hw, variant=self.variant)

    def _stock(self, attn: Any, hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2AttnProcessor

        self._count("fallback")
        return WanAnimate2AttnProcessor()(attn, hidden_states, **kwargs)

    def __call__(self, attn: Any, hidden_states: torch.Tensor, rotary_emb: torch.Tensor, grid_sizes: torch.Tensor,
                 kv_cache: Any, kv_cache_mode: str, rope_stride: int = 1, reference_rotary_emb: torch.Tensor | None = None,
                 reference_grid_sizes: torch.Tensor | None = None, reference_rope_stride: int = 1,
                 attention_mask: Any = None, origin_latent_frames: int | None = None,
                 origin_latent_hw: int | None = None) -> torch.Tensor:  # fmt: skip
        if kv_cache_mode == "cached":
            grid, ref_grid = grid_sizes.tolist(), reference_grid_sizes.tolist()  # one sync each, as stock's rope_apply
            (frames, h, w), (ref_frames, rh, rw) = grid[0], ref_grid[0]
            hw = h * w
            covered = (frames == (origin_latent_frames or 0) + 1 and hw == origin_latent_hw and ref_frames == frames - 1
                       and rh * rw == hw and hidden_states.shape[1] == frames * hw
                       and all(g == grid[0] for g in grid) and all(g == ref_grid[0] for g in ref_grid))  # fmt: skip
            if not covered:
                return self._stock(attn, hidden_states, rotary_emb=rotary_emb, grid_sizes=grid_sizes, kv_cache=kv_cache,
                                   kv_cache_mode=kv_cache_mode, rope_stride=rope_stride, reference_rotary_emb=reference_rotary_emb,
                                   reference_grid_sizes=reference_grid_sizes, reference_rope_stride=reference_rope_stride,
                                   attention_mask=attention_mask, origin_latent_frames=origin_latent_frames,
                                   origin_latent_hw=origin_latent_hw)  # fmt: skip
        elif kv_cache_mode != "extract":
            raise ValueError(f"`kv_cache_mode` must be either 'extract' or 'cached', got {kv_cache_mode}.")
        if kv_cache_mode == "cached" and self.prep == "fused":
            q, k, v = _project_raw(attn, hidden_states)
            if prep_supported(q, self.variant):
                out = self._fused_cached(attn, q, k, v, rotary_emb, grid_sizes, rope_stride, kv_cache, reference_grid_sizes,
                                         reference_rotary_emb, reference_rope_stride, ref_frames * hw, hw)  # fmt: skip
                self._count("incontext")
                return attn.to_out[1](attn.to_out[0](out.flatten(2, 3)))
        q, k, v = A.project_qkv(attn, hidden_states)
        kernel_form = kv_cache_mode == "extract" and getattr(kv_cache, "kernel_form", False)
        if kv_cache_mode == "extract" and not kernel_form:
            kv_cache.store(k, v)  # pre-RoPE, as the stock cache holds them
        angles = rope_angles(grid_sizes, rotary_emb, rope_stride)
        q, k = apply_rope(q, angles).type_as(v), apply_rope(k, angles).type_as(v)
        if kv_cache_mode == "extract":
            if kernel_form:  # the extract pass's RoPE is the cached pass's reference RoPE (same grid, freqs, stride)
                store_reference(kv_cache, k, v, grid_sizes, rope_stride, self.variant)
            out = self.attend(q, k, v)
        else:
            ref = cached_reference(kv_cache, reference_grid_sizes, reference_rotary_emb, reference_rope_stride,
                                   ref_frames * hw, v.dtype, self.variant)  # fmt: skip
            out = self.attend_reference(q, k, v, ref, hw)
            self._count("incontext")
        out = out.flatten(2, 3).type_as(q)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


    def _fused_cached(self, attn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, freqs: torch.Tensor,
                      grid_sizes: torch.Tensor, stride: int, kv_cache: Any, ref_grid_sizes: torch.Tensor,
                      ref_freqs: torch.Tensor, ref_stride: int, n_ref: int, hw: int) -> torch.Tensor:  # fmt: skip
        """The cached pass from the raw projections ``[B, S, H * D]``: norms, RoPE and the 8-bit
        quantizations in :mod:`~newsmotion_engine.accel.attention_prep`'s kernels, then the
        in-context kernel. BSHD bf16 out."""
        cos, sin = rope_angles(grid_sizes[:1], freqs, stride)[0]  # every sample has this grid (checked by the caller)
        ref = cached_reference(kv_cache, ref_grid_sizes, ref_freqs, ref_stride, n_ref, v.dtype, self.variant)
        return prepared_incontext_attention(q, k, v, _norm_weight(attn.norm_q, q), _norm_weight(attn.norm_k, k),
                                            _norm_eps(attn.norm_q), cos[:, 0], sin[:, 0], ref, hw, attn.heads, self.variant)  # fmt: skip


def _project_raw(attn: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V projections before the QK-norms, ``[B, S, H * D]`` each (views of one buffer when fused)."""
    if getattr(attn, "fused_projections", False):
        return attn.to_qkv(hidden_states).chunk(3, dim=-1)
    return attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)


def _norm_weight(norm: torch.nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    w = getattr(norm, "weight", None)
    return w if w is not None else torch.ones(x.shape[-1], device=x.device, dtype=x.dtype)


def _norm_eps(norm: torch.nn.RMSNorm) -> float:
    return float(norm.eps) if norm.eps is not None else float(torch.finfo(torch.float32).eps)  # torch's default


@torch.compiler.disable  # eager, between the compiled graphs: a cache lookup (a conversion once per segment and layer)
def cached_reference(kv_cache: Any, grid_sizes: torch.Tensor, freqs: torch.Tensor, stride: int, n_ref: int,
                     dtype: torch.dtype, variant: str) -> ReferenceKV:  # fmt: skip
    """The layer's reference K/V in the in-context kernel's form (RoPE applied as the stock
    cached pass applies it): kept by an FP8 layer cache after its first use
    (:meth:`~newsmotion_engine.render.backends.wan_animate_2.kv.Fp8KVLayerCache.kernel_reference`), built
    anew each call from a stock (model-dtype) layer cache."""

    def make(k_ref: torch.Tensor, v_ref: torch.Tensor) -> ReferenceKV:
        k_ref = rope_fp32(k_ref, grid_sizes, freqs, stride).to(dtype)
        return _prepare(k_ref[:, :n_ref], v_ref[:, :n_ref].to(dtype), variant, _frame_tokens(grid_sizes))

    if isinstance(kv_cache, Fp8KVLayerCache):
        return kv_cache.kernel_reference(make, _token(grid_sizes, stride, n_ref, variant))
    return make(*kv_cache.get())


def _frame_tokens(grid_sizes: torch.Tensor) -> int:
    """Tokens of one latent frame of the (first sample's) grid."""
    _, h, w = grid_sizes[0].tolist()
    return int(h * w)


def _token(grid_sizes: torch.Tensor, stride: int, n_ref: int, variant: str) -> tuple:
    """What a converted reference depends on besides the K/V: its RoPE grid and stride, its
    length and the kernel variant (the extract pass and the cached pass must name the same)."""
    return tuple(grid_sizes[0].tolist()), int(stride), int(n_ref), variant


@torch.compiler.disable  # eager, between the compiled graphs: once per segment and layer
def store_reference(kv_cache: Any, k: torch.Tensor, v: torch.Tensor, grid_sizes: torch.Tensor, stride: int, variant: str) -> None:
    """The extract pass's RoPE-rotated ``k`` and ``v`` stored in the in-context kernel's form."""
    kv_cache.store_kernel_reference(_prepare(k, v, variant, _frame_tokens(grid_sizes)), _token(grid_sizes, stride, k.shape[1], variant))


CUDNN_FORM = "cudnn"  # the reference token's variant when the cuDNN processor made the kernel form


def _prepare(k: torch.Tensor, v: torch.Tensor, variant: str, hw: int) -> ReferenceKV:
    """The reference K/V (RoPE applied, BSHD) in the form ``variant``'s attention reads."""
    if variant == CUDNN_FORM:
        return prepare_cudnn_reference(k, v, hw)
    return prepare_reference(k, v, variant)


def prepare_cudnn_reference(k_ref: torch.Tensor, v_ref: torch.Tensor, hw: int) -> ReferenceKV:
    """The reference for :class:`CudnnAnimate2AttnProcessor`, in :class:`ReferenceKV`'s five slots
    (the K/V caches store, offload and prefetch that tuple; the token says which form it is):
    ``k`` the keys per frame ``[B * frames, hw, H, D]`` less each frame's mean, E4M3 at one scale;
    ``vt`` the values the same way (not transposed); ``k_scale`` / ``v_scale`` their descales
    ``[1, 1, 1, 1]``; ``k_mean`` the per-frame key means ``[B * frames, 1, H, D]`` float32 (the
    log-sum-exp adds back what the smoothing took out)."""
    B, S, H, D = k_ref.shape
    kf = k_ref.reshape(B * (S // hw), hw, H, D)
    mean = kf.float().mean(dim=1, keepdim=True)
    kq = C.quantize_per_tensor(kf.float() - mean)
    vq = C.quantize_per_tensor(v_ref.reshape(B * (S // hw), hw, H, D))
    return ReferenceKV(k=kq.data, vt=vq.data, k_scale=kq.descale, k_mean=mean, v_scale=vq.descale)


def cudnn_cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: ReferenceKV, hw: int) -> torch.Tensor:
    """The cached pass's in-context attention (module docstring) on cuDNN's FP8 kernel: the split
    (:func:`merge_split`) of the dense generation attention and each frame's reference attention
    over ``ref`` from :func:`prepare_cudnn_reference`. BSHD in/out."""
    keys, values = C.Fp8Tensor(ref.k, ref.k_scale), C.Fp8Tensor(ref.vt, ref.v_scale)
    return merge_split(q, hw, C.fp8_sdpa_lse(q, k, v), lambda q_frames: C.fp8_sdpa_lse_quantized(q_frames, keys, values, ref.k_mean))


class CudnnAnimate2AttnProcessor(Fp8Animate2AttnProcessor):
    """:class:`Fp8Animate2AttnProcessor` on cuDNN's FP8 kernel (``attention='fp8-cudnn'``): the
    extract pass's dense attention and the cached pass's :func:`cudnn_cached_attention`; norms and
    RoPE in torch (compiled with the block)."""

    def __init__(self) -> None:
        self.variant = CUDNN_FORM
        self.prep = "torch"
        self.stats = {"incontext": 0, "fallback": 0}

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return C.fp8_sdpa(q, k, v)

    def attend_reference(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: ReferenceKV, hw: int) -> torch.Tensor:
        return cudnn_cached_attention(q, k, v, ref, hw)


def _factory(config: A.Attention) -> Fp8Animate2AttnProcessor:
    if config.kernel == "fp8-cudnn":
        return CudnnAnimate2AttnProcessor()
    return Fp8Animate2AttnProcessor(config.variant, config.prep or "fused")


A.register_fp8_processor("WanAnimate2Transformer3DModel", _factory, blocks_attr="self_attn")
