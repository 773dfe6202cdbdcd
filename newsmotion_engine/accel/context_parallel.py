"""Context parallelism for the Wan-Animate transformer: one segment's tokens split across ranks
(``torchrun``), Ulysses all-to-all around self-attention (DeepSpeed-Ulysses, Jacobs et al. 2023,
https://arxiv.org/abs/2309.14509).

diffusers 0.42.1 drives context parallelism through a model's ``_cp_plan`` (which module inputs
to split across ranks and which output to gather) and ``ContextParallelConfig``;
``WanTransformer3DModel`` declares a plan, ``WanAnimateTransformer3DModel`` does not.
:data:`ANIMATE_CP_PLAN` is ours: the RoPE tables and the first block's hidden states are split along
the token axis, ``proj_out``'s output is gathered back. Three things differ from plain Wan:

- Self-attention (``attn1``): with the stock processor, diffusers' own Ulysses path (its
  ``native`` / cuDNN / flash backends support it); with our FP8 kernel's processor
  (:class:`~.attention.Fp8SelfAttnProcessor`, also the sparse one), :func:`ulysses_attention`:
  all-to-all from ``[B, S/W, H, D]`` to ``[B, S, H/W, D]``, the kernel over the whole sequence for
  a slice of heads, all-to-all back. A sparse layout applies unchanged (each rank sees all tokens).
- Cross-attention (``attn2``): the text / image tokens are not split (Wan's 257 CLIP + 512 text
  tokens rarely divide by the world size), so every rank attends its own queries to all of them
  locally, with no communication (diffusers' Ulysses path would all-to-all a replicated K/V).
- The face adapter cross-attends each *frame's* tokens to that frame's motion tokens, reshaping
  the sequence by frames; a rank's token slice starts mid-frame in general.
  :class:`FrameLocalFaceProcessor` maps each local token to its frame from the slice's global
  offset and attends frame by frame.

The sequence must divide evenly by the world size (1 + latent frames) x rows x columns: e.g. a
77-frame 720x1280 segment is 75,600 tokens = 2^4 x 3^3 x 5^2 x 7, fine for 2, 4 and 8 ranks.

The same code runs with world size 1 (a no-op split) and on the CPU with the gloo backend (tests
compare a 2-process run with a 1-process run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from diffusers.hooks import HookRegistry, ModelHook

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration
from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "ANIMATE_CP_PLAN",
    "ContextParallel",
    "ContextParallelError",
    "FrameLocalFaceProcessor",
    "ulysses_attention",
]


class ContextParallelError(NewsmotionError, RuntimeError):
    """Context parallelism cannot run as configured (no process group, a world size that does
    not divide the sequence, ...)."""


def _plan() -> dict[str, Any]:
    from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput

    return {
        "rope": {
            0: ContextParallelInput(split_dim=1, expected_dims=4, split_output=True),
            1: ContextParallelInput(split_dim=1, expected_dims=4, split_output=True),
        },
        "blocks.0": {"hidden_states": ContextParallelInput(split_dim=1, expected_dims=3, split_output=False)},
        "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
    }


ANIMATE_CP_PLAN: dict[str, Any] = {}  # filled on first use (diffusers is imported lazily)


@dataclass(frozen=True)
class ContextParallel(AccelConfig):
    """Split each forward's tokens across ``world_size`` ranks (registry order 90; before compile).

    Needs ``torch.distributed`` initialized with that many ranks (``torchrun --nproc-per-node N``;
    NCCL on GPUs, gloo on the CPU). ``world_size=1`` is accepted and does nothing.
    """

    technique: ClassVar[str] = "context_parallel"
    world_size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise AccelConfigError(f"context parallel world_size {self.world_size!r}: use an integer >= 1")


# --------------------------------------------------------------------------------------------
# Ulysses self-attention around any local kernel
# --------------------------------------------------------------------------------------------
def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any) -> torch.Tensor:
    """Split ``x`` into world chunks along ``scatter_dim``, send chunk i to rank i, concatenate
    what arrives along ``gather_dim``."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    chunks = [c.contiguous() for c in x.chunk(world, dim=scatter_dim)]
    out = [torch.empty_like(chunks[0]) for _ in range(world)]
    dist.all_to_all(out, chunks, group=group)
    return torch.cat(out, dim=gather_dim)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor], group: Any) -> torch.Tensor:  # fmt: skip
    """BSHD ``q, k, v`` holding this rank's tokens and all heads -> the same layout of the output
    of ``attend`` over the whole sequence, each rank computing ``H / W`` heads."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    if q.shape[2] % world:
        raise ContextParallelError(f"{q.shape[2]} attention heads do not divide by the world size {world}")
    q, k, v = (_all_to_all(t, scatter_dim=2, gather_dim=1, group=group) for t in (q, k, v))  # [B, S, H/W, D]
    out = attend(q, k, v)
    return _all_to_all(out, scatter_dim=1, gather_dim=2, group=group)  # [B, S/W, H, D]


# --------------------------------------------------------------------------------------------
# The face adapter on a token slice
# --------------------------------------------------------------------------------------------
class FrameLocalFaceProcessor:
    """The Animate face adapter's attention for a slice of the token sequence that may start and
    end mid-frame: each local token attends to its own frame's motion tokens (the stock processor
    reshapes the whole sequence by frames). ``rank`` / ``world`` place the slice; with world 1 it
    computes exactly what the stock processor does."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, rank: int = 0, world: int = 1) -> None:
        self.rank, self.world = rank, world

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        hidden_states = attn.pre_norm_q(hidden_states)
        motion = attn.pre_norm_kv(encoder_hidden_states)
        B, T, N, _ = motion.shape
        motion = motion.flatten(1, 2)
        query, key, value = attn.to_q(hidden_states), attn.to_k(motion), attn.to_v(motion)
        query = attn.norm_q(query.unflatten(2, (attn.heads, -1)))  # [B, S_local, H, D]
        key = attn.norm_k(key.view(B, T, N, attn.heads, -1))
        value = value.view(B, T, N, attn.heads, -1)
        s_local = query.shape[1]
        total = s_local * self.world
        if total % T:
            raise ContextParallelError(f"{total} tokens do not divide into {T} frames")
        per_frame = total // T
        start = self.rank * s_local
        pieces = []
        pos = start
        while pos < start + s_local:  # the frames this slice touches, each with its own motion tokens
            frame = pos // per_frame
            end = min((frame + 1) * per_frame, start + s_local)
            q = query[:, pos - start:end - start].transpose(1, 2)  # [B, H, n, D]
            k, v = key[:, frame].transpose(1, 2), value[:, frame].transpose(1, 2)  # [B, H, N, D]
            pieces.append(torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2))
            pos = end
        out = torch.cat(pieces, dim=1).flatten(2, 3).type_as(query)
        out = attn.to_out(out)
        if attention_mask is not None:  # a multiplicative mask, as in the stock processor
            out = out * attention_mask.flatten(start_dim=1)
        return out


# --------------------------------------------------------------------------------------------
# The registry handler
# --------------------------------------------------------------------------------------------
_CHECK_HOOK = "newsmotion_context_parallel_check"


class _EvenSplitCheck(ModelHook):
    """diffusers splits with ``chunk``, which makes the last slice short when the tokens do not
    divide by the world size; the frame bookkeeping above needs equal slices, so say so first."""

    def __init__(self, world: int) -> None:
        super().__init__()
        self.world = world

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        p_t, p_h, p_w = module.config.patch_size
        _, _, T, H, W = hidden.shape
        tokens = (T // p_t) * (H // p_h) * (W // p_w)
        if tokens % self.world:
            raise ContextParallelError(
                f"{tokens} tokens ({T // p_t} latent frames x {H // p_h} x {W // p_w}) do not split evenly across "
                f"{self.world} ranks: choose a frame size or segment length whose token count divides by {self.world}"
            )
        return args, kwargs


# --------------------------------------------------------------------------------------------
# (apply / remove)
# --------------------------------------------------------------------------------------------
@dataclass
class _Applied:
    config: Any  # diffusers ParallelConfig
    attn1: list[tuple[Any, Any]]  # (processor, its previous _parallel_config)
    face: list[Any]  # the face adapters' previous processors


def _apply(components: Any, config: ContextParallel) -> AccelHandle:
    model = components.transformer
    if config.world_size == 1:
        return AccelHandle(report={"world_size": 1}, state=None)
    import torch.distributed as dist
    from diffusers.hooks.context_parallel import apply_context_parallel
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_available() or not dist.is_initialized():
        raise ContextParallelError(
            f"context parallel world_size {config.world_size} needs torch.distributed: launch with "
            f"`torchrun --nproc-per-node {config.world_size} ...` (NCCL on GPUs, gloo on the CPU)"
        )
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != config.world_size:
        raise ContextParallelError(f"context parallel world_size {config.world_size}, but torchrun started {world} ranks")
    heads = model.config.num_attention_heads
    if heads % world:
        raise ContextParallelError(f"{heads} attention heads do not divide by world size {world}")
    if not ANIMATE_CP_PLAN:
        ANIMATE_CP_PLAN.update(_plan())
    param = next(model.parameters())
    device_type = param.device.type
    mesh = init_device_mesh(device_type, (1, world), mesh_dim_names=("ring", "ulysses"))
    cp = ContextParallelConfig(ulysses_degree=world, mesh=mesh)
    parallel = ParallelConfig(context_parallel_config=cp)
    # Set up by hand rather than model.enable_parallelism(): that derives the device from an
    # accelerator count, which is 0 on a CPU (gloo) run.
    parallel.setup(rank, world, param.device, mesh=mesh)
    group = cp._ulysses_mesh.get_group()
    attn1 = []
    for block in model.blocks:
        proc = block.attn1.processor
        attn1.append((proc, proc._parallel_config))
        if hasattr(proc, "attend"):  # our FP8 / sparse processors: Ulysses around our kernel
            proc.ulysses_group = group
        else:  # stock processors: diffusers' Ulysses path
            proc._parallel_config = parallel
    face = [adapter.processor for adapter in model.face_adapter]
    for adapter in model.face_adapter:
        adapter.set_processor(FrameLocalFaceProcessor(rank, world))
    apply_context_parallel(model, cp, ANIMATE_CP_PLAN)
    HookRegistry.check_if_exists_or_initialize(model).register_hook(_EvenSplitCheck(world), _CHECK_HOOK)
    return AccelHandle(report={"world_size": world, "rank": rank, "mode": "ulysses", "plan": "newsmotion animate plan"},
                       state=_Applied(parallel, attn1, face))  # fmt: skip


def _remove(components: Any, handle: AccelHandle) -> None:
    if handle.state is None:
        return
    from diffusers.hooks.context_parallel import remove_context_parallel

    model = components.transformer
    HookRegistry.check_if_exists_or_initialize(model).remove_hook(_CHECK_HOOK, recurse=False)
    remove_context_parallel(model, ANIMATE_CP_PLAN)
    for proc, previous in handle.state.attn1:
        proc._parallel_config = previous
        if hasattr(proc, "ulysses_group"):
            del proc.ulysses_group
    for adapter, proc in zip(model.face_adapter, handle.state.face):
        adapter.set_processor(proc)


register_acceleration(ContextParallel, order=90, apply=_apply, remove=_remove)

