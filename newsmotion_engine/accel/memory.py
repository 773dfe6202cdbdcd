"""Activation-memory savers: tiled VAE decode and chunked feed-forward.

- Tiled decode (:class:`VaeTiling`, registry order 60; option ``vae_tiling``): the Wan VAE
  decodes overlapping spatial tiles (diffusers' ``enable_tiling``), so the decoder's activations
  scale with the tile, not with 720x1280. Output differs from untiled decode only in the blended
  tile seams.
- Chunked feed-forward (:class:`FfnChunks`, registry order 20; option ``ffn_chunks``): each
  block's FFN (``dim -> 13824 -> dim`` for 14B) runs over ``chunks`` slices of the sequence, so
  its 2.7x-wider intermediate exists for one slice at a time (~2 GiB -> ~0.25 GiB per
  intermediate at 75.6k tokens with 8 chunks). Row-wise ops: the result equals the unchunked FFN
  up to matmul blocking.

Example::

    enable_vae_tiling(vae, VaeTiling()); chunk_feed_forward(transformer, FfnChunks(chunks=8))
    disable_vae_tiling(vae); unchunk_feed_forward(transformer)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = [
    "ChunkedFeedForward",
    "FfnChunks",
    "VaeTiling",
    "chunk_feed_forward",
    "disable_vae_tiling",
    "enable_vae_tiling",
    "unchunk_feed_forward",
]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class VaeTiling(AccelConfig):
    """Tiled VAE encode/decode with ``tile`` px tiles every ``stride`` px (``stride <= tile``: the
    overlap is blended)."""

    technique: ClassVar[str] = "vae_tiling"
    tile: int = 256
    stride: int = 192

    def __post_init__(self) -> None:
        if not (_positive_int(self.tile) and _positive_int(self.stride) and self.stride <= self.tile):
            raise AccelConfigError(f"VAE tiling tile={self.tile!r} stride={self.stride!r}: use integers with 1 <= stride <= tile")


@dataclass(frozen=True)
class FfnChunks(AccelConfig):
    """Each block's feed-forward over ``chunks`` slices of the sequence."""

    technique: ClassVar[str] = "ffn_chunks"
    chunks: int = 8

    def __post_init__(self) -> None:
        if not _positive_int(self.chunks):
            raise AccelConfigError(f"FFN chunks {self.chunks!r}: use an integer >= 1 (the option ffn_chunks=0 means off)")


def enable_vae_tiling(vae: Any, config: VaeTiling = VaeTiling()) -> dict[str, Any]:
    """Turn on tiled encode/decode."""
    vae.enable_tiling(tile_sample_min_height=config.tile, tile_sample_min_width=config.tile,
                      tile_sample_stride_height=config.stride, tile_sample_stride_width=config.stride)  # fmt: skip
    return {"vae_tiling": True, "tile": config.tile, "stride": config.stride}


def disable_vae_tiling(vae: Any) -> None:
    """Untiled encode/decode again."""
    vae.disable_tiling()


class ChunkedFeedForward(nn.Module):
    """Runs ``inner`` over ``chunks`` slices of dim 1 (the sequence) and concatenates."""

    def __init__(self, inner: nn.Module, chunks: int) -> None:
        super().__init__()
        self.inner = inner
        self.chunks = chunks

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.chunks == 1 or hidden_states.shape[1] < self.chunks:
            return self.inner(hidden_states, *args, **kwargs)
        return torch.cat([self.inner(part, *args, **kwargs) for part in hidden_states.chunk(self.chunks, dim=1)], dim=1)


def chunk_feed_forward(model: nn.Module, config: FfnChunks = FfnChunks(), attr: str = "ffn") -> int:
    """Wrap every block's ``attr`` feed-forward; returns how many were wrapped."""
    n = 0
    for block in getattr(model, "blocks", []):
        ff = getattr(block, attr, None)
        if ff is None or isinstance(ff, ChunkedFeedForward):
            continue
        setattr(block, attr, ChunkedFeedForward(ff, config.chunks))
        n += 1
    return n


def unchunk_feed_forward(model: nn.Module, attr: str = "ffn") -> None:
    """Undo :func:`chunk_feed_forward`."""
    for block in getattr(model, "blocks", []):
        ff = getattr(block, attr, None)
        if isinstance(ff, ChunkedFeedForward):
            setattr(block, attr, ff.inner)


def _apply_tiling(components: Any, config: VaeTiling) -> AccelHandle:
    return AccelHandle(report=enable_vae_tiling(components.vae, config))


def _remove_tiling(components: Any, handle: AccelHandle) -> None:
    disable_vae_tiling(components.vae)


def _apply_chunks(components: Any, config: FfnChunks) -> AccelHandle:
    return AccelHandle(report={"chunks": config.chunks, "blocks": chunk_feed_forward(components.transformer, config)})


def _remove_chunks(components: Any, handle: AccelHandle) -> None:
    unchunk_feed_forward(components.transformer)


register_acceleration(FfnChunks, order=20, apply=_apply_chunks, remove=_remove_chunks)
register_acceleration(VaeTiling, order=60, apply=_apply_tiling, remove=_remove_tiling)
