"""Block-sparse self-attention for the Wan transformers: a static spatio-temporal tile mask run by
our 8-bit attention kernel. Approximate: off by default, labelled experimental everywhere, and
calibratable (``newsmotion calibrate sparse-attention``) by a user with real weights.

Why it can work. In video diffusion transformers most attention mass stays near the query in
space and time; Radial Attention (Li et al. 2025, https://arxiv.org/abs/2506.19852) lets the
spatial window shrink as the temporal distance grows and reports 1.8x on Wan2.1-14B at default
length, and Sparse VideoGen (Xi et al. 2025, https://arxiv.org/abs/2502.01776) 1.5x at 720p. Here
the mask is decided per *tile* (the kernel's ``BLOCK_M`` queries x ``BLOCK_N`` keys), so a skipped
tile costs nothing: the kernel's loop visits only the key tiles listed for its query tile.

The layout (:func:`block_layout`), for a token grid ``(T, H, W)`` (time-major, as Wan flattens its
patches; latent frame 0 of Wan-Animate is the reference image):

- every query tile keeps the key tiles of the *global* frames (``global_frames``, default the
  reference frame) and of its own frame(s);
- query tiles inside the global frames attend densely (they carry the identity);
- the rest of each row is filled by distance between tile centres in ``(t * temporal_scale, y,
  x)`` token units — a ball in space-time, so the spatial reach shrinks as frames get further
  apart (the radial idea) — until ``density`` of the key tiles are kept. Every row keeps the same
  number of tiles (the work per query tile is balanced) and density 1.0 is dense attention.

The first ``dense_steps`` denoising steps run dense (the layout is formed when the picture is
still noise; early steps decide composition). The step comes from the denoiser's cache context
(``transformer.cache_context(name, step_index=i)``, which our denoising loops set); a forward
without one (the forward benchmark) is treated as a later, sparse step.

On CUDA (Hopper) the processor calls the FP8 kernel with the layout; elsewhere (CPU tests) it
runs :func:`reference_block_sparse_attention`, the kernel's quantized arithmetic in torch with the
same tile mask, slow and exact enough to test against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from diffusers.hooks import HookRegistry
from diffusers.hooks.hooks import BaseState, ModelHook, StateManager

from newsmotion_engine.accel import attention as A
from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = [
    "SPARSE_BLOCK_M",
    "SPARSE_BLOCK_N",
    "BlockLayout",
    "SparseAttention",
    "SparseSelfAttnProcessor",
    "block_layout",
    "reference_block_sparse_attention",
    "sparse_fp8_attention",
]

HOOK_NAME = "newsmotion_sparse_attention_step"
# The kernel config the sparse path always runs (the dense autotuner's best at the 14B shape,
# benchmarks/results/attention_kernel_h200.json): the layout is built for these tiles, so they are fixed.
SPARSE_BLOCK_M, SPARSE_BLOCK_N, SPARSE_WARPS, SPARSE_STAGES = 64, 128, 4, 3
CPU_BLOCK = 16


@dataclass(frozen=True)
class SparseAttention(AccelConfig):
    """Block-sparse self-attention (registry order 35, after :class:`~.attention.Attention`).
    EXPERIMENTAL: picture quality needs real weights to judge; see the module docstring.

    Args:
        density: fraction of key tiles each query tile visits, in (0, 1]; 1.0 is dense. Option
            ``sparse_attention``.
        dense_steps: the first denoising steps that stay dense. Option ``sparse_dense_steps``.
        global_frames: leading latent frames every query attends to in full (1: Wan-Animate's
            reference frame). Option ``sparse_global_frames``.
        temporal_scale: tokens of spatial distance one frame of temporal distance counts as;
            ``None``: a quarter of the frame's longer side in tokens.
        variant: the FP8 kernel variant (:data:`~.attention.FP8_VARIANTS`).
    """

    technique: ClassVar[str] = "sparse_attention"
    density: float = 0.5
    dense_steps: int = 1
    global_frames: int = 1
    temporal_scale: float | None = None
    variant: str = A.DEFAULT_FP8_VARIANT

    def __post_init__(self) -> None:
        if isinstance(self.density, bool) or not isinstance(self.density, (int, float)) or not 0 < self.density <= 1:
            raise AccelConfigError(f"sparse attention density {self.density!r}: use a number in (0, 1]")
        for name in ("dense_steps", "global_frames"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise AccelConfigError(f"sparse attention {name} {value!r}: use an integer >= 0")
        if self.temporal_scale is not None and not (isinstance(self.temporal_scale, (int, float)) and self.temporal_scale > 0):
            raise AccelConfigError(f"sparse attention temporal_scale {self.temporal_scale!r}: use a number > 0 or None")
        if self.variant not in A.FP8_VARIANTS:
            raise AccelConfigError(f"fp8 attention variant {self.variant!r}: use one of {', '.join(A.FP8_VARIANTS)}")


# --------------------------------------------------------------------------------------------
# The layout
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockLayout:
    """Which key tiles each query tile visits. ``kv_idx[i, :kv_cnt[i]]``: the full key tiles of
    query tile ``i``, ascending (the rest of the row is padding); ``kv_tail[i]``: whether the
    ragged last key tile (when ``tokens % block_n``) is visited too."""

    tokens: int
    block_m: int
    block_n: int
    kv_idx: np.ndarray  # int32 [n_q, max_k]
    kv_cnt: np.ndarray  # int32 [n_q]
    kv_tail: np.ndarray  # int32 [n_q]
    _device_cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_key_tiles(self) -> int:
        return -(-self.tokens // self.block_n)

    def tile_mask(self) -> np.ndarray:
        """``[n_q, n_k]`` bool: tile (i, j) is visited."""
        n_q, n_k = len(self.kv_cnt), self.n_key_tiles
        m = np.zeros((n_q, n_k), dtype=bool)
        for i in range(n_q):
            m[i, self.kv_idx[i, : self.kv_cnt[i]]] = True
        if self.tokens % self.block_n:
            m[:, -1] = self.kv_tail.astype(bool)
        return m

    @property
    def density(self) -> float:
        """Visited fraction of the score matrix's tiles."""
        return float(self.tile_mask().mean())

    def token_mask(self) -> torch.Tensor:
        """``[S, S]`` bool over tokens (tests and the CPU reference)."""
        m = torch.from_numpy(self.tile_mask())
        m = m.repeat_interleave(self.block_m, 0).repeat_interleave(self.block_n, 1)
        return m[: self.tokens, : self.tokens]

    def device_tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._device_cache:
            self._device_cache[key] = tuple(torch.from_numpy(a).to(device) for a in (self.kv_idx, self.kv_cnt, self.kv_tail))
        return self._device_cache[key]


def _tile_geometry(grid: tuple[int, int, int], block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile of ``block`` consecutive tokens: centre ``(t, y, x)``, first and last frame."""
    T, H, W = grid
    idx = np.arange(T * H * W)
    t, y, x = idx // (H * W), (idx // W) % H, idx % W
    starts = np.arange(0, len(idx), block)
    n = np.minimum(block, len(idx) - starts)
    centre = np.stack([np.add.reduceat(a, starts) / n for a in (t, y, x)], axis=1)
    first, last = t[starts], t[np.minimum(starts + block, len(idx)) - 1]
    return centre, first, last


@functools.lru_cache(maxsize=32)
def block_layout(grid: tuple[int, int, int], density: float, *, block_m: int = SPARSE_BLOCK_M, block_n: int = SPARSE_BLOCK_N,
                 global_frames: int = 1, temporal_scale: float | None = None) -> BlockLayout:  # fmt: skip
    """The static tile layout for a ``(T, H, W)`` token grid (see the module docstring)."""
    T, H, W = (int(v) for v in grid)
    S = T * H * W
    tau = float(temporal_scale) if temporal_scale is not None else max(H, W) / 4.0
    q_c, q_first, q_last = _tile_geometry((T, H, W), block_m)
    k_c, k_first, k_last = _tile_geometry((T, H, W), block_n)
    n_q, n_k = len(q_c), len(k_c)
    scale = np.array([tau, 1.0, 1.0])
    d = np.sqrt((((q_c[:, None, :] - k_c[None, :, :]) * scale) ** 2).sum(-1))  # [n_q, n_k]
    must = (k_first[None, :] < global_frames) | ((k_first[None, :] <= q_last[:, None]) & (k_last[None, :] >= q_first[:, None]))
    must |= (q_first < global_frames)[:, None]  # reference-frame queries: dense
    keep_n = max(1, math.ceil(density * n_k))
    order = np.where(must, -1.0, d)  # forced tiles first, then nearest
    rank = np.argsort(order, axis=1, kind="stable")
    keep = np.zeros((n_q, n_k), dtype=bool)
    rows = np.arange(n_q)[:, None]
    keep[rows, rank[:, :keep_n]] = True
    keep |= must  # a row whose forced tiles exceed keep_n keeps them all
    has_tail = S % block_n != 0
    full = keep[:, : n_k - 1] if has_tail else keep
    cnt = full.sum(1).astype(np.int32)
    max_k = max(1, int(cnt.max()))
    idx = np.zeros((n_q, max_k), dtype=np.int32)
    for i in range(n_q):
        cols = np.flatnonzero(full[i])
        idx[i, : len(cols)] = cols
    tail = keep[:, -1].astype(np.int32) if has_tail else np.zeros(n_q, dtype=np.int32)
    return BlockLayout(S, block_m, block_n, idx, cnt, tail)


# --------------------------------------------------------------------------------------------
# Kernels: the Triton kernel with a layout (CUDA), its torch reference (anywhere)
# --------------------------------------------------------------------------------------------
def reference_block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: BlockLayout,
                                     variant: str | None = None) -> torch.Tensor:  # fmt: skip
    """:func:`~.attention.reference_attention` with the layout's tile mask. BSHD in/out."""
    _, var = A._variant(variant)
    S = q.shape[1]
    x = A.quantize_attention_inputs(q, k, v, variant)
    s = (x.q.float() @ x.k.float().transpose(-1, -2)) * x.q_scale[..., :, None]
    s = s.masked_fill(~layout.token_mask().to(s.device), float("-inf"))
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    l = p.sum(dim=-1, keepdim=True)  # noqa: E741
    p = (p * A.E4M3_MAX).to(torch.float8_e4m3fn).float() / A.E4M3_MAX if var.pv_fp8 else p.to(torch.bfloat16).float()
    out = (p @ x.vt[..., :S].float().transpose(-1, -2)) * x.v_scale[..., None, :] / l
    return out.transpose(1, 2).to(q.dtype)


_SPARSE_KERNEL: Any = None


@torch.library.custom_op("newsmotion::fp8_sparse_attention_kernel", mutates_args=())
def _sparse_kernel_op(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_scale: torch.Tensor, v_scale: torch.Tensor,
                      kv_idx: torch.Tensor, kv_cnt: torch.Tensor, kv_tail: torch.Tensor, variant: str) -> torch.Tensor:  # fmt: skip
    global _SPARSE_KERNEL
    if _SPARSE_KERNEL is None:
        _SPARSE_KERNEL = A._build_kernel(autotune=False)
    return A.launch_kernel(_SPARSE_KERNEL, A.QuantizedQKV(q, k, vt, q_scale, v_scale), variant, sparse=(kv_idx, kv_cnt, kv_tail),
                           BLOCK_M=SPARSE_BLOCK_M, BLOCK_N=SPARSE_BLOCK_N, num_warps=SPARSE_WARPS, num_stages=SPARSE_STAGES)  # fmt: skip


@_sparse_kernel_op.register_fake
def _(q, k, vt, q_scale, v_scale, kv_idx, kv_cnt, kv_tail, variant):  # noqa: ANN001, ANN202
    B, H, S, D = q.shape
    return q.new_empty((B, S, H, D), dtype=torch.bfloat16)


def sparse_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: BlockLayout,
                         variant: str | None = None) -> torch.Tensor:  # fmt: skip
    """:func:`~.attention.fp8_attention` visiting only the layout's tiles (built with
    :data:`SPARSE_BLOCK_M` x :data:`SPARSE_BLOCK_N`). CUDA sm_90."""
    if q.device.type != "cuda":
        raise A.AttentionUnavailableError("sparse_fp8_attention needs CUDA tensors (Hopper GPU)")
    if (layout.block_m, layout.block_n) != (SPARSE_BLOCK_M, SPARSE_BLOCK_N) or layout.tokens != q.shape[1]:
        raise ValueError(f"layout for {layout.tokens} tokens in {layout.block_m}x{layout.block_n} tiles does not fit "
                         f"{q.shape[1]} tokens in {SPARSE_BLOCK_M}x{SPARSE_BLOCK_N} tiles")  # fmt: skip
    name, _ = A._variant(variant)
    x = A.quantize_attention_inputs(q, k, v, name)
    return _sparse_kernel_op(*x, *layout.device_tensors(q.device), name).to(q.dtype)


# --------------------------------------------------------------------------------------------
# Wiring: a step hook on the transformer + a processor per self-attention
# --------------------------------------------------------------------------------------------
@dataclass
class SparseStep:
    """What the processors read for the current forward: dense or not, and the layout."""

    dense: bool = True
    layout: BlockLayout | None = None
    tensors: tuple[torch.Tensor, ...] | None = None  # the layout on the GPU (set outside compiled code)
    forwards: int = 0
    sparse_forwards: int = 0


class _NoState(BaseState):
    def reset(self, *args: Any, **kwargs: Any) -> None:
        pass


class SparseStepHook(ModelHook):
    """Before each transformer forward: the step (from the cache context) and the token grid
    (from the latent input's shape) decide whether this forward is sparse, and with which layout."""

    _is_stateful = True  # so diffusers' cache_context reaches our StateManager

    def __init__(self, config: SparseAttention, step: SparseStep) -> None:
        super().__init__()
        self.config = config
        self.step = step
        self.state_manager = StateManager(_NoState)

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        p_t, p_h, p_w = module.config.patch_size
        _, _, T, H, W = hidden.shape
        context = self.state_manager._context
        step_index = getattr(context, "step_index", None)
        dense = self.config.density >= 1.0 or (step_index is not None and step_index < self.config.dense_steps)
        self.step.dense = dense
        self.step.forwards += 1
        if not dense:
            self.step.sparse_forwards += 1
            # Off CUDA the torch reference runs: small tiles, so tiny test models see a real mask.
            bm, bn = (SPARSE_BLOCK_M, SPARSE_BLOCK_N) if hidden.is_cuda else (CPU_BLOCK, CPU_BLOCK)
            self.step.layout = block_layout((T // p_t, H // p_h, W // p_w), float(self.config.density),
                                            block_m=bm, block_n=bn,
                                            global_frames=self.config.global_frames,
                                            temporal_scale=self.config.temporal_scale)  # fmt: skip
            self.step.tensors = self.step.layout.device_tensors(hidden.device) if hidden.is_cuda else None
        return args, kwargs

    def reset_state(self, module: torch.nn.Module) -> torch.nn.Module:
        self.step.forwards = self.step.sparse_forwards = 0
        return module


class SparseSelfAttnProcessor(A.Fp8SelfAttnProcessor):
    """:class:`~.attention.Fp8SelfAttnProcessor` whose kernel visits the current layout's tiles
    on sparse steps (dense FP8 kernel on dense steps; the torch references off CUDA)."""

    def __init__(self, variant: str, step: SparseStep) -> None:
        super().__init__(variant)
        self.step = step

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cuda = q.device.type == "cuda"
        if self.step.dense or self.step.layout is None:
            return A.fp8_attention(q, k, v, variant=self.variant) if cuda else A.reference_attention(q, k, v, self.variant)
        if cuda:  # the layout's tensors were put on the GPU by the step hook, outside compiled blocks
            x = A.quantize_attention_inputs(q, k, v, self.variant)
            return _sparse_kernel_op(*x, *self.step.tensors, self.variant).to(q.dtype)
        return reference_block_sparse_attention(q, k, v, self.step.layout, self.variant)


@dataclass
class _Applied:
    processors: list[Any]
    step: SparseStep


def _apply(components: Any, config: SparseAttention) -> AccelHandle:
    model = components.transformer
    if torch.cuda.is_available() and next(model.parameters()).device.type == "cuda":
        ok, why = A.fp8_attention_supported()
        if not ok:
            raise A.AttentionUnavailableError(f"sparse attention cannot run: {why}")
    step = SparseStep()
    previous = [block.attn1.processor for block in model.blocks]
    for block in model.blocks:
        block.attn1.set_processor(SparseSelfAttnProcessor(config.variant, step))
    HookRegistry.check_if_exists_or_initialize(model).register_hook(SparseStepHook(config, step), HOOK_NAME)
    report = {"density": config.density, "dense_steps": config.dense_steps, "global_frames": config.global_frames,
              "variant": config.variant, "experimental": True, "self_attention_layers": len(previous)}  # fmt: skip
    return AccelHandle(report=report, state=_Applied(previous, step))


def _remove(components: Any, handle: AccelHandle) -> None:
    model = components.transformer
    HookRegistry.check_if_exists_or_initialize(model).remove_hook(HOOK_NAME, recurse=False)
    for block, processor in zip(model.blocks, handle.state.processors):
        block.attn1.set_processor(processor)


register_acceleration(SparseAttention, order=35, apply=_apply, remove=_remove)
