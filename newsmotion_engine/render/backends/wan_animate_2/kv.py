"""The reference K/V of one segment: the extract pass, FP8 packing (file cache and device
storage), the GPU-resident LRU, and byte accounting.

The stock ``WanAnimate2KVCache`` holds one ``WanAnimate2KVLayerCache`` per layer with the
*pre-RoPE* keys and values of the driving segment's tokens, ``[1, N_ref, heads, head_dim]`` in the
model dtype; the cached pass calls ``layer.get()`` once per forward. :class:`Fp8KVLayerCache`
keeps them as e4m3 with one float32 scale per (token, head) and dequantizes in ``get()``, so the
device holds half the bytes and only one layer's bf16 copy is alive at a time. Under the 8-bit
in-context attention (``attention='fp8-triton'``) each layer holds that kernel's form instead
(RoPE applied, 8-bit, same bytes): stored so by the extract pass
(:meth:`Fp8KVLayerCache.store_kernel_reference`), or converted on first use and kept
(:meth:`Fp8KVLayerCache.kernel_reference`; a cache read back from the FP8 file); offloaded layers
are copied to the GPU one layer ahead on a side stream (:class:`LayerPrefetcher`).

Bytes per segment, analytically: ``layers x 2 x N_ref x dim x bytes`` with
``N_ref = T_lat x (H/16) x (W/16)`` and ``T_lat = (frames - 1) / 4 + 1``; FP8 adds
``layers x 2 x N_ref x heads x 4`` for the scales (:func:`analytic_kv_bytes`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import torch

from newsmotion_engine.accel.attention_incontext import ReferenceKV

__all__ = [
    "Fp8KVLayerCache",
    "HostArena",
    "LayerPrefetcher",
    "device_bytes",
    "fp8_cache",
    "KVLru",
    "analytic_kv_bytes",
    "kv_bytes",
    "kv_from_file",
    "kv_to_file",
    "quantize_cache",
]

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def _new_cache(num_layers: int):
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    return WanAnimate2KVCache(num_layers)


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and float32 scales ``[..., 1]`` (absmax over head_dim per token and head)."""
    xf = x.float()
    scale = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / FP8_MAX
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


class Fp8KVLayerCache:
    """A drop-in for ``WanAnimate2KVLayerCache`` holding FP8 keys/values; ``get()`` returns them
    dequantized to ``dtype`` on ``device``. With ``offload`` the FP8 tensors live in (pinned) host
    memory and ``get()`` copies the one layer the attention is about to read: the device then holds
    one layer's K/V instead of all of them (``kv_offload=True``)."""

    def __init__(self, key: torch.Tensor | None, key_scale: torch.Tensor | None, value: torch.Tensor | None,
                 value_scale: torch.Tensor | None, dtype: torch.dtype, *, device: Any = None, offload: bool = False,
                 arena: HostArena | None = None) -> None:  # fmt: skip
        self.key, self.key_scale, self.value, self.value_scale, self.dtype = key, key_scale, value, value_scale, dtype
        self.device = device if device is not None else (key.device if key is not None else None)
        self.offload = offload
        self.arena = arena if arena is not None or not offload else HostArena()
        # The kernel's form of these K/V (kernel_reference), which replaces them once built.
        self.prepared: ReferenceKV | None = None
        self.prepared_for: Hashable = None
        self.prefetcher: LayerPrefetcher | None = None  # set by the cache that holds this layer (offload)
        self.index = 0
        # The extract pass stores the kernel's form directly (store_kernel_reference), never the raw K/V.
        self.kernel_form = False

    @classmethod
    def empty(cls, *, offload: bool = False, arena: HostArena | None = None) -> Fp8KVLayerCache:
        """A layer cache the extract pass fills through :meth:`store` (quantized as it arrives, so
        the model-dtype K/V of all layers never coexist); offloaded layers of one segment share
        ``arena``."""
        return cls(None, None, None, None, torch.bfloat16, offload=offload, arena=arena)

    @classmethod
    def from_tensors(cls, key: torch.Tensor, value: torch.Tensor, *, offload: bool = False) -> Fp8KVLayerCache:
        layer = cls.empty(offload=offload)
        layer.store(key, value)
        return layer

    def store(self, key: torch.Tensor, value: torch.Tensor) -> None:
        k, ks = _quantize(key)
        v, vs = _quantize(value)
        self.dtype, self.device = key.dtype, key.device
        if self.offload:
            k, ks, v, vs = (_to_host(t, self.arena) for t in (k, ks, v, vs))
        self.key, self.key_scale, self.value, self.value_scale = k, ks, v, vs

    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.key is None and self.prepared is not None:
            raise RuntimeError("this layer's reference K/V were converted for the 8-bit in-context attention "
                               "(attention='fp8-triton'); only that processor can read them now")  # fmt: skip
        if self.key is None:
            raise RuntimeError("The KV cache is empty. Run the reference pass before the generation pass.")
        k, ks, v, vs = self.key, self.key_scale, self.value, self.value_scale
        if self.device is not None and k.device != self.device:
            k, ks, v, vs = _to_device((k, ks, v, vs), self.device)
        return (k.float() * ks).to(self.dtype), (v.float() * vs).to(self.dtype)

    def clear(self) -> None:
        self.key = self.value = self.key_scale = self.value_scale = None
        self.prepared = self.prepared_for = None

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.key, self.key_scale, self.value, self.value_scale, *(self.prepared or ())) if t is not None]

    def kernel_reference(self, make: Callable[[torch.Tensor, torch.Tensor], ReferenceKV], token: Hashable) -> ReferenceKV:
        """These K/V in the in-context kernel's form on the device: ``make(k, v)`` (from
        :meth:`get`) builds it on the first call and it replaces the FP8 K/V, in their own host
        memory when offloaded (same bytes), so a segment's steps never convert again.
        ``token`` names what ``make`` depends on (RoPE grid, variant); another one is an error."""
        if self.prepared is None:
            made = make(*self.get())
            self._adopt(made, token)
            return made  # on the device already
        if token != self.prepared_for:
            raise RuntimeError(f"reference K/V converted for {self.prepared_for}, asked for {token}")
        if not self.offload or self.device is None or torch.device(self.device).type == "cpu":
            return self.prepared
        if self.prefetcher is None:
            return ReferenceKV(*_to_device(tuple(self.prepared), self.device))
        return self.prefetcher.fetch(self.index, self.device)

    def store_kernel_reference(self, ref: ReferenceKV, token: Hashable) -> None:
        """Keep ``ref`` (built by the extract pass from its own RoPE-rotated K/V) as this layer's
        K/V: what :meth:`kernel_reference` returns for ``token``, with no raw K/V stored at all."""
        self.device = ref.k.device
        self._adopt(ref, token)

    def _adopt(self, ref: ReferenceKV, token: Hashable) -> None:
        if self.offload:
            # The large tensors go to the host, into the FP8 K/V's own buffers where they fit (the
            # offloaded K/V of a 14B segment are 32 GB: a second copy would not fit a host); the
            # per-channel scales (KiB) stay on the device.
            k = _host_into(ref.k, self.key, self.arena)
            vt = _host_into(ref.vt, self.value, self.arena)
            ref = ref._replace(k=k, vt=vt)
        self.key = self.value = self.key_scale = self.value_scale = None
        self.prepared, self.prepared_for = ref, token


class LayerPrefetcher:
    """Copies the next offloaded layer's kernel-form reference to the GPU on a side stream while
    the current layer computes (the copy engine works beside the attention kernel): a 14B 720p
    layer is 0.77 GB, and copied on the compute stream it stalled every layer. After the last
    layer the first one is fetched for the next step. At most one layer is in flight in the
    whole process besides the one in use (a segment's cache that is not read again soon must not
    keep a layer on the GPU)."""

    _in_flight: LayerPrefetcher | None = None  # the one prefetcher with a pending copy

    def __init__(self, layers: list[Fp8KVLayerCache]) -> None:
        self.layers = layers
        self.stream: Any = None
        self.pending: dict[int, tuple[ReferenceKV, Any]] = {}

    def fetch(self, index: int, device: Any) -> ReferenceKV:
        dev = torch.device(device)
        main = torch.cuda.current_stream(dev)
        item = self.pending.pop(index, None)
        other = LayerPrefetcher._in_flight
        if other is not None and other is not self:
            other._drop(main)
        self._drop(main)
        if item is None:
            item = self._issue(index, dev, main)
        main.wait_event(item[1])
        nxt = (index + 1) % len(self.layers)
        if self.layers[nxt].prepared is not None:
            self.pending[nxt] = self._issue(nxt, dev, main)
            LayerPrefetcher._in_flight = self
        return item[0]

    def _drop(self, main: Any) -> None:
        for _, event in self.pending.values():  # a copy not used: its memory is main's again only after it lands
            main.wait_event(event)
        self.pending.clear()
        if LayerPrefetcher._in_flight is self:
            LayerPrefetcher._in_flight = None

    def _issue(self, index: int, dev: torch.device, main: Any) -> tuple[ReferenceKV, Any]:
        if self.stream is None:
            self.stream = torch.cuda.Stream(dev)
        ref = self.layers[index].prepared
        # Allocated on the compute stream (which frees them after use, in its own order); the side
        # stream first waits for the work already queued there, which may have used this memory.
        out = [torch.empty_like(t, device=dev) if t.device.type == "cpu" else t for t in ref]
        self.stream.wait_stream(main)
        with torch.cuda.stream(self.stream):
            for d, h in zip(out, ref):
                if d is not h:
                    d.copy_(h, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return ReferenceKV(*out), event


class HostArena:
    """Pinned host memory handed out from ``chunk_bytes`` blocks (a bump allocator; a tensor's
    view keeps its block alive). torch's pinned allocator rounds every block up to a power of two:
    a 14B layer's 295 MB FP8 keys took 512 MiB, so two offloaded 720p segments (47 GB of K/V)
    pinned ~80 GiB and, with a third, ran a 128 GB H200 host out of memory. ``pin=False`` hands
    out pageable memory (tests on machines without CUDA)."""

    ALIGN = 256

    def __init__(self, chunk_bytes: int = 2**31, *, pin: bool = True) -> None:
        self.chunk_bytes, self.pin = int(chunk_bytes), pin
        self._chunk: torch.Tensor | None = None
        self._used = 0
        self.reserved = 0  # bytes of host memory this arena allocated

    def _block(self, nbytes: int) -> torch.Tensor:
        self.reserved += nbytes
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin)

    def empty(self, shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
        n = math.prod(shape) * dtype.itemsize
        if n > self.chunk_bytes:
            buf = self._block(n)  # larger than a block: its own (rounded) allocation
        else:
            if self._chunk is None or self._used + n > self.chunk_bytes:
                self._chunk, self._used = self._block(self.chunk_bytes), 0
            buf = self._chunk[self._used:self._used + n]
            self._used += -(-n // self.ALIGN) * self.ALIGN
        return buf.view(dtype).view(shape)


@torch.compiler.disable  # a host copy into pinned memory cannot be traced (runs between compiled graphs)
def _to_host(t: torch.Tensor, arena: HostArena) -> torch.Tensor:
    if t.device.type == "cpu":
        return t
    out = arena.empty(t.shape, t.dtype)
    out.copy_(t)
    return out


@torch.compiler.disable  # copies of pinned host tensors: outside the compiled graphs, like _to_host
def _to_device(tensors: tuple[torch.Tensor, ...], device: Any) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device, non_blocking=True) for t in tensors)


def _host_into(t: torch.Tensor, old: torch.Tensor | None, arena: HostArena) -> torch.Tensor:
    """``t`` copied to host memory: into ``old``'s bytes when it is a contiguous host tensor at
    least as large (its contents are no longer needed), else a new arena tensor."""
    if old is not None and old.device.type == "cpu" and old.is_contiguous() and old.numel() * old.element_size() >= t.numel() * t.element_size():
        out = old.view(torch.uint8).reshape(-1)[: t.numel() * t.element_size()].view(t.dtype).view(t.shape)
    else:
        out = arena.empty(t.shape, t.dtype)
    out.copy_(t)  # synchronous: once per segment and layer
    return out


def fp8_cache(num_layers: int, *, offload: bool = False, kernel_form: bool = False) -> Any:
    """An empty ``WanAnimate2KVCache`` of FP8 layers for the extract pass to fill; with
    ``kernel_form`` (the 8-bit in-context attention reads it, no file is written from it) the
    extract pass stores each layer straight in that kernel's form."""
    cache = _new_cache(num_layers)
    arena = HostArena() if offload else None
    cache.layer_caches = [Fp8KVLayerCache.empty(offload=offload, arena=arena) for _ in range(num_layers)]
    for layer in cache.layer_caches:
        layer.kernel_form = kernel_form
    return _link(cache)


def _link(cache: Any) -> Any:
    """Give offloaded layers their index and one shared :class:`LayerPrefetcher`."""
    layers = cache.layer_caches
    if layers and all(isinstance(layer, Fp8KVLayerCache) and layer.offload for layer in layers):
        prefetcher = LayerPrefetcher(layers)
        for i, layer in enumerate(layers):
            layer.index, layer.prefetcher = i, prefetcher
    return cache


def device_bytes(cache: Any) -> int:
    """Bytes of the cache that sit on an accelerator (0 when offloaded to the host)."""
    return sum(t.numel() * t.element_size() for layer in cache.layer_caches for t in _layer_tensors(layer) if t.device.type != "cpu")


def quantize_cache(cache: Any) -> Any:
    """Replace every layer of a filled ``WanAnimate2KVCache`` by its FP8 form (in place)."""
    for i, layer in enumerate(cache.layer_caches):
        if not isinstance(layer, Fp8KVLayerCache):
            k, v = layer.get()
            layer.clear()
            cache.layer_caches[i] = Fp8KVLayerCache.from_tensors(k, v)
    return cache


def _layer_tensors(layer: Any) -> list[torch.Tensor]:
    if isinstance(layer, Fp8KVLayerCache):
        return layer.tensors()
    return [t for t in (layer.key, layer.value) if t is not None]


def kv_bytes(cache: Any) -> int:
    """Bytes a filled cache holds (all layers, keys + values, scales included)."""
    return sum(t.numel() * t.element_size() for layer in cache.layer_caches for t in _layer_tensors(layer))


def analytic_kv_bytes(*, num_layers: int, dim: int, heads: int, frames: int, width: int, height: int,
                      bytes_per_value: float) -> dict[str, Any]:  # fmt: skip
    """K/V bytes of one segment from the architecture and size (see the module docstring)."""
    t_lat = (frames - 1) // 4 + 1
    tokens = t_lat * (height // 16) * (width // 16)
    values = num_layers * 2 * tokens * dim
    scales = num_layers * 2 * tokens * heads * 4 if bytes_per_value == 1 else 0
    total = int(values * bytes_per_value + scales)
    return {"layers": num_layers, "tokens": tokens, "dim": dim, "bytes_per_value": bytes_per_value,
            "bytes": total, "gib": round(total / 2**30, 3), "gb": round(total / 1e9, 3)}  # fmt: skip


def kv_to_file(cache: Any, layers: range | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(uint8 [L, 2, N, heads, head_dim], float32 [L, 2, N, heads, 1])`` of a filled cache (batch 1);
    ``layers`` selects some (the benchmark times a few at the largest shapes)."""
    data, scales = [], []
    picked = cache.layer_caches if layers is None else [cache.layer_caches[i] for i in layers]
    for layer in picked:
        q = layer if isinstance(layer, Fp8KVLayerCache) else Fp8KVLayerCache.from_tensors(*layer.get())
        data.append(torch.stack([q.key[0], q.value[0]]).view(torch.uint8).cpu())
        scales.append(torch.stack([q.key_scale[0], q.value_scale[0]]).cpu())
    return torch.stack(data).numpy(), torch.stack(scales).numpy()


def kv_from_file(data: np.ndarray, scales: np.ndarray, device: Any, dtype: torch.dtype, *, offload: bool = False) -> Any:
    """A ``WanAnimate2KVCache`` of :class:`Fp8KVLayerCache` layers from the memory-mapped arrays of
    :func:`kv_to_file`: on ``device``, or (``offload``) in host memory, copied per layer when read."""
    cache = _new_cache(int(data.shape[0]))
    where = "cpu" if offload else device
    d = torch.from_numpy(np.array(data, copy=True)).to(where).view(FP8)
    s = torch.from_numpy(np.array(scales, copy=True)).to(where)
    if offload and torch.cuda.is_available() and getattr(device, "type", str(device)) != "cpu":
        d, s = d.pin_memory(), s.pin_memory()
    for i in range(d.shape[0]):
        cache.layer_caches[i] = Fp8KVLayerCache(d[i, 0:1], s[i, 0:1], d[i, 1:2], s[i, 1:2], dtype, device=device, offload=offload)
    return _link(cache)


class KVLru:
    """A device-resident LRU of filled reference K/V caches keyed by (loop, size, segment, model),
    bounded by bytes. Entries larger than the budget are not kept."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = int(budget_bytes)
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item[0]

    def put(self, key: Hashable, cache: Any) -> bool:
        size = kv_bytes(cache)
        if size > self.budget:
            return False
        self._items.pop(key, None)
        while self._items and self.bytes + size > self.budget:
            self._items.popitem(last=False)
            self.evictions += 1
        self._items[key] = (cache, size)
        return True

    def clear(self) -> None:
        self._items.clear()

    def stats(self) -> dict[str, int]:
        return {"entries": len(self), "bytes": self.bytes, "hits": self.hits, "misses": self.misses, "evictions": self.evictions}
