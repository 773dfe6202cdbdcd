"""The Wan VAE encode of "a few real frames, then zero frames" without recomputing what the zeros
make: the same latents (float rounding aside), about 28% of the encoder's FLOPs at 720x1280
(106.3 of 381.7 TFLOP; 3326.8 -> 987.2 ms on an H100, ``benchmarks/results/wan_continuation_encode_h100.json``).

Why: a Wan segment after the first is conditioned on the VAE encoding of the previous segment's
last decoded frames followed by zero frames up to the segment's length (Wan-Animate-2: 1 real
frame and 80 zeros), in float32 at the render's size, and the next segment cannot start before it
(about 3.7 s of an H200's 720x1280 clip before this). EchoMimicV3 encodes its reference the same
way (Tier 2) and its previous segment's last 8 frames at every seam. The encoder is causal in time and runs in chunks (one frame, then four at a time),
each unit (``conv_in``, every down block, the mid block, ``conv_out``) keeping its last input
frames for the next chunk. A unit's output for a chunk far enough after the real frames no longer
depends on them: it is the unit's response to zeros, and the same frame at every later chunk. The
full-resolution units, where nearly all the work is, leave the real frames' reach after 2-4 of
the 21 chunks (the released encoder; the deep, small units stay in reach to the end, so every
latent frame still depends on the real frames, as it must).

How:
- **Which calls are steady** (:func:`steady_plan`): the encoder's architecture is run once, in
  float64 on the CPU at 16x16 with narrow channels (which calls depend on the input is a property
  of the layers' temporal reach, not of their width or weights) and fresh random weights (no layer
  zero-initialised, so no path is hidden), on two different real heads. A call is *steady* when its
  output is bit for bit the same for both heads (any reach of the head, however faint, shows: a
  tolerance let a decayed one through at narrow widths) and every one of its frames equals the
  unit's last frame (within rounding), and every later call of the unit is steady too. Widths 4,
  8 and 16 give the same plan for the released encoder (test). Cached per (encoder config, frames, real frames).
- **The render** (:func:`encode_then_zeros`): each unit's ``forward`` is wrapped for the encode.
  The first steady call of a unit runs and its last output frame is kept (per VAE, size, dtype and
  device: about 1.8 GB at 720x1280 for the released encoder, the latest size only); every later
  steady call returns that frame broadcast over its frames (no memory, no work) and advances the
  causal-cache index past the unit's convolutions, whose caches no computed call reads again.
  A call that runs gets a broadcast input materialised first. The wrappers are removed after.
- Falls back to the plain encode (:func:`..encoders.vae_encode`) where the plan does not apply:
  spatial tiling (the encoder then runs per tile), a patchified VAE, a batch, or an encoder without
  the expected units; and inside :func:`released_encodes`, where a bench re-creating a stock
  recipe wants the encode as released.

Exactness: the kept frame is the unit's own output for these inputs; the encode without it
computes each later steady frame again from the same inputs, so the two can differ only by the
rounding of a different kernel launch (tests: bit for bit on the CPU; on an H100, TF32, within
4.6e-4 of the plain encode's largest magnitude).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["UnitPlan", "encode_then_zeros", "released_encodes", "steady_plan"]

_PROBE_SIZE = 16  # the probe's frame side (the encoder's 8x spatial downsampling leaves 2x2)
_PROBE_BASE_DIM = 8  # the probe's narrowest channel count (base_dim; 4 and 16 give the same plan: test)
_STILL_TOL = 1e-9  # float64: a steady call's frames all equal the unit's last one within this fraction (rounding)


@dataclass(frozen=True)
class UnitPlan:
    """One encoder unit's calls over an encode: ``frames[i]`` output frames of call ``i``,
    ``slots`` causal-cache entries each call uses (0 for ``conv_in``/``conv_out``, whose caller
    keeps theirs), ``first_steady`` the first call of the steady tail (``len(frames)``: none)."""

    name: str
    frames: tuple[int, ...]
    slots: int
    first_steady: int

    @property
    def steady_calls(self) -> int:
        return len(self.frames) - self.first_steady


def _units(encoder: Any) -> list[tuple[str, Any]] | None:
    """The encoder's units in call order, or None when it is not the expected Wan layout."""
    names = ("conv_in", "down_blocks", "mid_block", "conv_out")
    if not all(hasattr(encoder, n) for n in names):
        return None
    return ([("conv_in", encoder.conv_in)] + [(f"down_blocks.{i}", m) for i, m in enumerate(encoder.down_blocks)]
            + [("mid_block", encoder.mid_block), ("conv_out", encoder.conv_out)])  # fmt: skip


_CONV_UNITS = ("conv_in", "conv_out")  # called as unit(x, cache_x) by the encoder, which keeps their caches


def _config_key(config: Any) -> str:
    return json.dumps({k: v for k, v in dict(config).items() if not str(k).startswith("_")}, sort_keys=True, default=str)


@functools.lru_cache(maxsize=16)
def _probe(config_json: str, frames: int, head: int) -> tuple[UnitPlan, ...] | None:
    import torch
    from diffusers import AutoencoderKLWan

    cfg = json.loads(config_json)
    cfg["base_dim"] = _PROBE_BASE_DIM
    cfg.pop("decoder_base_dim", None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        vae = AutoencoderKLWan(**{k: v for k, v in cfg.items() if k in inspect.signature(AutoencoderKLWan.__init__).parameters})
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in vae.parameters():  # fresh weights, none zero: no path hidden by a zero init
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
                else:
                    p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
        vae = vae.double().eval()
        units = _units(vae.encoder)
        if units is None:
            return None
        records: dict[str, list[tuple[Any, int]]] = {}

        def run(real: Any) -> dict[str, list[tuple[Any, int]]]:
            records.clear()
            x = torch.zeros(1, int(cfg.get("in_channels", 3)), frames, _PROBE_SIZE, _PROBE_SIZE, dtype=torch.float64)
            x[:, :, :head] = real
            with _wrapped(units, _recorder(records)), torch.no_grad():
                vae.encode(x)
            return {k: list(v) for k, v in records.items()}

        shape = (1, int(cfg.get("in_channels", 3)), head, _PROBE_SIZE, _PROBE_SIZE)
        a = run(torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1)
        b = run(torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1)
    plans = []
    for name, _ in units:
        calls_a, calls_b = a.get(name, []), b.get(name, [])
        if not calls_a or len(calls_a) != len(calls_b):
            return None
        last = calls_a[-1][0][:, :, -1:]
        steady = []
        for (out_a, _), (out_b, _) in zip(calls_a, calls_b):
            # Independent of the real frames: bit for bit the same for both heads (the same
            # operations on the same numbers); any reach of the head, however faint, shows.
            same = bool(torch.equal(out_a, out_b))
            scale = float(out_a.abs().max()) or 1.0
            still = float((out_a - last).abs().max()) <= _STILL_TOL * scale
            steady.append(same and still)
        first = len(steady)
        while first > 0 and steady[first - 1]:
            first -= 1
        if first == 0:  # the first call sees the real frames: never steady (a probe gone wrong)
            return None
        slots = {s for _, s in calls_a}
        if len(slots) != 1:
            return None
        plans.append(UnitPlan(name, tuple(int(o.shape[2]) for o, _ in calls_a), slots.pop(), first))
    return tuple(plans)


def steady_plan(vae: Any, frames: int, head: int) -> tuple[UnitPlan, ...] | None:
    """Per encoder unit, which calls of an encode of ``head`` real frames then zeros up to
    ``frames`` are steady (module docstring); None where the encoder is not the expected layout."""
    if _units(getattr(vae, "encoder", None)) is None or not 0 < head < frames:
        return None
    return _probe(_config_key(vae.config), int(frames), int(head))


def _recorder(records: dict[str, list[tuple[Any, int]]]):
    def around(name: str, original: Any, conv: bool):
        def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
            idx = kwargs.get("feat_idx") if not conv else None
            before = idx[0] if idx is not None else 0
            out = original(x, *args, **kwargs)
            records.setdefault(name, []).append((out.detach().clone(), (idx[0] - before) if idx is not None else 0))
            return out

        return forward

    return around


@contextlib.contextmanager
def _wrapped(units: list[tuple[str, Any]], make: Any) -> Iterator[None]:
    """Each unit's ``forward`` replaced by ``make(name, original, conv)`` for the block; the
    instance attribute it had (another acceleration's forward) or none put back after."""
    saved = []
    try:
        for name, module in units:
            had = "forward" in vars(module)
            saved.append((module, had, vars(module).get("forward")))
            module.forward = make(name, module.forward, name in _CONV_UNITS)
        yield
    finally:
        for module, had, forward in reversed(saved):
            if had:
                module.forward = forward
            else:
                vars(module).pop("forward", None)


_LOCK = threading.Lock()  # one wrapped encode at a time (the wrappers are on the shared modules)
# VAE -> {"key": the state key, "frames": unit name -> (kept frame, channels-last?)}: the kept
# frames of the latest size, per VAE (weakly held: dropped with the VAE).
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state_key(vae: Any, sample: Any) -> tuple:
    """What the kept frames depend on besides the weights: size, dtype, device and which encoder
    modules another acceleration has replaced the forward of (a different kernel rounds differently)."""
    patched = tuple(type(m).__name__ for m in vae.encoder.modules() if "forward" in vars(m))
    return (tuple(sample.shape[-2:]), str(sample.dtype), str(sample.device), patched)


def _materialised(x: Any) -> Any:
    """A broadcast kept frame made a real tensor before a unit computes on it."""
    import torch

    if x.dim() == 5 and x.shape[2] > 1 and x.stride(2) == 0:
        fmt = torch.channels_last_3d if x[:, :, :1].is_contiguous(memory_format=torch.channels_last_3d) else torch.contiguous_format
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        out.copy_(x)
        return out
    return x


def _skipper(plans: dict[str, UnitPlan], kept: dict[str, Any], counts: dict[str, int], stats: dict[str, int]):
    owner = threading.get_ident()

    def around(name: str, original: Any, conv: bool):
        plan = plans[name]

        def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != owner:  # another thread's encode with this VAE: untouched
                return original(x, *args, **kwargs)
            i = counts[name]
            counts[name] = i + 1
            if i >= plan.first_steady and name in kept and i < len(plan.frames):
                frame = kept[name]
                if not conv:
                    kwargs["feat_idx"][0] += plan.slots
                stats["skipped"] += 1
                return frame.expand(frame.shape[0], frame.shape[1], plan.frames[i], *frame.shape[3:])
            out = original(_materialised(x), *args, **kwargs)
            stats["computed"] += 1
            if i >= plan.first_steady and i < len(plan.frames):
                kept[name] = out[:, :, -1:].clone()
            return out

        return forward

    return around


_RELEASED = [0]  # how many released_encodes() blocks are open (a count, not a context variable: renders encode on worker threads)


@contextlib.contextmanager
def released_encodes() -> Iterator[None]:
    """Inside, every :func:`encode_then_zeros` runs the plain encode, as the released code does (a
    bench's stock side); process-wide while open."""
    with _LOCK:
        _RELEASED[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _RELEASED[0] -= 1


def encode_then_zeros(vae: Any, head: Any, frames: int, device: Any, *, stats: dict[str, int] | None = None):
    """:func:`..encoders.vae_encode` of ``head`` (``[1, C, n, H, W]``, in [-1, 1]) followed by zero
    frames up to ``frames``: float32 normalized latents ``[1, z, T_lat, h, w]`` on the CPU.
    ``stats`` (optional) gets ``computed`` / ``skipped`` unit calls (both 0 on the fallback)."""
    import torch

    from newsmotion_engine.render.backends.wan.encoders import vae_encode

    stats = stats if stats is not None else {}
    stats.update(computed=0, skipped=0)
    head = head.to(device=device, dtype=vae.dtype)
    b, c, n, h, w = head.shape
    with torch.no_grad():  # no zeros where the head is already that long (no plan then: the plain encode)
        video = torch.cat([head, torch.zeros(b, c, max(frames - n, 0), h, w, dtype=head.dtype, device=head.device)], dim=2)
    tiled = getattr(vae, "use_tiling", False) and (w > vae.tile_sample_min_width or h > vae.tile_sample_min_height)
    plain = b != 1 or tiled or vae.config.get("patch_size") is not None or _RELEASED[0] > 0
    plans = None if plain else steady_plan(vae, frames, n)
    if plans is None:
        return vae_encode(vae, video, device)
    units = _units(vae.encoder)
    key = _state_key(vae, video)
    with _LOCK:
        state = _KEPT.get(vae)
        if state is None or state["key"] != key:
            state = {"key": key, "frames": {}}  # a new size (or kernels): the previous size's frames are dropped
            _KEPT[vae] = state
        counts = {name: 0 for name, _ in units}
        with _wrapped(units, _skipper({p.name: p for p in plans}, state["frames"], counts, stats)):
            return vae_encode(vae, video, device)
