"""Activation-memory savers: tiled VAE decode and chunked feed-forward.

- Tiled decode: the Wan VAE decodes overlapping spatial tiles (diffusers' ``enable_tiling``), so
  the decoder's activations scale with the tile, not with 720x1280. Output differs from untiled
  decode only in the blended tile seams.
- Chunked feed-forward: each block's FFN (``dim -> 13824 -> dim`` for 14B) runs over ``chunks``
  slices of the sequence, so its 2.7x-wider intermediate exists for one slice at a time
  (~2 GiB -> ~0.25 GiB per intermediate at 75.6k tokens with 8 chunks). Row-wise ops: the
  result equals the unchunked FFN up to matmul blocking.

Example::

    enable_vae_tiling(vae); chunk_feed_forward(transformer, chunks=8)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["ChunkedFeedForward", "chunk_feed_forward", "enable_vae_tiling", "unchunk_feed_forward"]


def enable_vae_tiling(vae: Any, tile: int = 256, stride: int = 192) -> dict[str, Any]:
    """Turn on tiled encode/decode with ``tile`` px tiles every ``stride`` px."""
    vae.enable_tiling(tile_sample_min_height=tile, tile_sample_min_width=tile,
                      tile_sample_stride_height=stride, tile_sample_stride_width=stride)  # fmt: skip
    return {"vae_tiling": True, "tile": tile, "stride": stride}


class ChunkedFeedForward(nn.Module):
    """Runs ``inner`` over ``chunks`` slices of dim 1 (the sequence) and concatenates."""

    def __init__(self, inner: nn.Module, chunks: int) -> None:
        super().__init__()
        if chunks < 1:
            raise ValueError(f"chunks={chunks} must be >= 1")
        self.inner = inner
        self.chunks = chunks

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.chunks == 1 or hidden_states.shape[1] < self.chunks:
            return self.inner(hidden_states, *args, **kwargs)
        return torch.cat([self.inner(part, *args, **kwargs) for part in hidden_states.chunk(self.chunks, dim=1)], dim=1)


def chunk_feed_forward(model: nn.Module, chunks: int = 8, attr: str = "ffn") -> int:
    """Wrap every block's ``attr`` feed-forward; returns how many were wrapped."""
    n = 0
    for block in getattr(model, "blocks", []):
        ff = getattr(block, attr, None)
        if ff is None or isinstance(ff, ChunkedFeedForward):
            continue
        setattr(block, attr, ChunkedFeedForward(ff, chunks))
        n += 1
    return n


def unchunk_feed_forward(model: nn.Module, attr: str = "ffn") -> None:
    """Undo :func:`chunk_feed_forward`."""
    for block in getattr(model, "blocks", []):
        ff = getattr(block, attr, None)
        if isinstance(ff, ChunkedFeedForward):
            setattr(block, attr, ff.inner)
