"""The Triton kernel of :mod:`.vae_norm`: ``silu(x / max(||x||_C, eps) * scale * gamma + bias)``
over the channels of each (frame, row, column) position of a 5-D ``[N, C, T, H, W]`` tensor, in
one read and one write. Imported only on a GPU (Triton is not needed elsewhere).

A program takes ``BLOCK_P`` positions of one batch item and all their channels (``BLOCK_C``, the
channel count rounded up to a power of two; the Wan VAE has 96 to 384): positions step by
``stride_p`` (channels-last-3d: C; contiguous: 1) and channels by ``stride_c``, so both layouts
load whole cache lines along one axis of the tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["rms_norm_silu_cuda"]

# F.normalize's default eps (the norm is clamped to at least this before dividing).
EPS = 1e-12
# Elements per program: enough work per program at 96 channels, few enough registers at 384.
_TILE = 8192


@triton.jit
def _rms_norm_silu_kernel(x_ptr, y_ptr, gamma_ptr, bias_ptr, n_pos, n_ch, stride_n, stride_c, stride_p, scale, eps,
                          HAS_BIAS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    item = tl.program_id(1).to(tl.int64)
    pos = pid.to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P).to(tl.int64)
    ch = tl.arange(0, BLOCK_C)
    mask = (pos[:, None] < n_pos) & (ch[None, :] < n_ch)
    offs = item * stride_n + pos[:, None] * stride_p + ch[None, :].to(tl.int64) * stride_c
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, axis=1))
    y = x / tl.maximum(norm, eps)[:, None]
    gamma = tl.load(gamma_ptr + ch, mask=ch < n_ch, other=0.0).to(tl.float32)
    y = y * scale * gamma[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + ch, mask=ch < n_ch, other=0.0).to(tl.float32)[None, :]
    y = y * tl.sigmoid(y)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm_silu_cuda(x: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None, scale: float, stride_p: int) -> torch.Tensor:
    """The fused norm and SiLU of a 5-D CUDA ``x`` whose positions step by ``stride_p``; the
    output has ``x``'s shape, dtype and layout."""
    n, c, t, h, w = x.shape
    y = torch.empty_like(x)  # same strides (dense tensors keep their layout)
    n_pos = t * h * w
    block_c = max(16, triton.next_power_of_2(c))
    block_p = max(1, _TILE // block_c)
    grid = (triton.cdiv(n_pos, block_p), n)
    _rms_norm_silu_kernel[grid](x, y, gamma, bias if bias is not None else gamma, n_pos, c, x.stride(0), x.stride(1), stride_p,
                                scale, EPS, HAS_BIAS=bias is not None, BLOCK_P=block_p, BLOCK_C=block_c,
                                num_warps=8 if block_c >= 256 else 4)  # fmt: skip
    return y
