"""Regional ``torch.compile`` of the transformer's repeated blocks (optionally with CUDA graphs).

Compiling the 40 identical ``WanTransformerBlock`` modules instead of the whole model compiles one
graph and reuses it for every block (diffusers' ``compile_repeated_blocks``; the PyTorch regional
compilation recipe https://docs.pytorch.org/tutorials/recipes/regional_compilation.html), so the
compile cost is one block's, paid once per process on the first forward (a warm resource keeps it).
``dynamic=False``: one render's shapes are static; a new resolution recompiles once.

``cudagraphs=True`` uses mode ``"reduce-overhead"`` (CUDA graph trees per block). At 720x1280 one
block runs ~0.2 s, so launch overhead is far below 1 % and graphs mostly cost memory; they help at
small token counts.

Applied through the registry as ``Compile()`` / ``Compile(cudagraphs=True)`` (order 100: last, so
it compiles the final modules). Removing it drops the compiled forwards and resets torch.compile's
caches (process-wide), so a later compile of other modules starts fresh instead of running into
dynamo's recompile limit.

Example::

    report = compile_blocks(transformer, Compile())   # lazy: the first forward pays the compile
    uncompile_blocks(transformer)                      # eager again
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["GELU_FORMS", "TUNED_OPTIONS", "Compile", "SigmoidTanhGelu", "compile_blocks", "compiled_block_count", "uncompile_blocks"]

# torch.compile(options=...) of Compile(tuned=True).
TUNED_OPTIONS = {"triton.multi_kernel": 1, "coordinate_descent_tuning": True}


_STEP_HOOK = "_newsmotion_cudagraph_step_hook"
_GELU_SWAP = "_newsmotion_gelu_swap"


@dataclass(frozen=True)
class Compile(AccelConfig):
    """Regional ``torch.compile`` of the repeated blocks.

    Args:
        cudagraphs: mode ``"reduce-overhead"`` (CUDA graph trees per block); the option value
            ``compile="blocks-cudagraphs"``. Default ``False`` (``compile="blocks"``).
        fullgraph: a graph break inside a block is an error instead of a silent slowdown.
        tuned: inductor benchmarks its kernel choices at the first call (:data:`TUNED_OPTIONS`):
            each reduction as a persistent and a looped kernel (``triton.multi_kernel``; the
            FP8 linears' row quantizations over 5120 / 13824 channels are past the 1024 where
            inductor otherwise goes persistent) and the block sizes by coordinate descent. The
            same arithmetic. At the 14B 720p segment shape it gained under 1% a block for a first
            call several times longer, and a second tuned compile in the same process failed
            inside inductor's multi-kernel cache (``cb32d61:bench/results/gpu_animate2_kernels_14b_h200.json``);
            so no flat option offers it.
        gelu: ``"sigmoid"`` computes the blocks' ``GELU(approximate="tanh")`` as
            ``x * sigmoid(2u)`` (:class:`SigmoidTanhGelu`: the same function, since
            ``(1 + tanh(u)) / 2 == sigmoid(2u)``); ``"stock"`` leaves it. Inductor lowers tanh to
            libdevice's exact tanh and recomputes the activation in each pass of the FP8
            quantization's looped reduction; sigmoid is one exp2 and one reciprocal. Measured:
            that kernel 3.9 -> 2.8 ms a block; superseded where FP8 compute runs by the GELU
            fused into the down projection's quantization (``accel/fp8_rows.py``).
        regions: the class names of the sub-modules compiled, each on its own; empty (default):
            the model's ``_repeated_blocks`` (diffusers' regional compilation; the backend sets
            them at load). A backend offers a wider set where the blocks alone leave eager work
            between them (champ's ``compile_scope="unet_blocks"``: its resnets, spatial
            transformers and motion modules, whose GroupNorms and layout changes otherwise run
            eagerly).
    """

    technique: ClassVar[str] = "compile"
    cudagraphs: bool = False
    fullgraph: bool = True
    tuned: bool = False
    gelu: str = "stock"
    regions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("cudagraphs", "fullgraph", "tuned"):
            if not isinstance(getattr(self, name), bool):
                raise AccelConfigError(f"compile {name}={getattr(self, name)!r}: use true or false")
        if not isinstance(self.regions, tuple) or not all(isinstance(r, str) and r for r in self.regions):
            raise AccelConfigError(f"compile regions={self.regions!r}: use a tuple of module class names")
        if self.gelu not in GELU_FORMS:
            raise AccelConfigError(f"compile gelu={self.gelu!r}: use one of {', '.join(GELU_FORMS)}")


GELU_FORMS = ("stock", "sigmoid")
_GELU_C = 2.0 * math.sqrt(2.0 / math.pi)  # 2u = x * (_GELU_C + _GELU_C * 0.044715 * x^2)


class SigmoidTanhGelu(torch.nn.Module):
    """``GELU(approximate="tanh")`` as ``x * sigmoid(2u)``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``,
    in float32 and rounded to the input's dtype once (as ``F.gelu`` does). Exact in real
    arithmetic; within float32 rounding of the stock form (tests)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.sigmoid(xf * (_GELU_C + (_GELU_C * 0.044715) * xf * xf))).to(x.dtype)


def _swap_gelu(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """Replace every ``nn.GELU(approximate="tanh")`` child by :class:`SigmoidTanhGelu`; returns
    ``(parent, name, original)`` for :func:`_restore_gelu`."""
    swapped = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.GELU) and child.approximate == "tanh":
                swapped.append((parent, name, child))
    for parent, name, _ in swapped:
        setattr(parent, name, SigmoidTanhGelu())
    return swapped


def _restore_gelu(model: torch.nn.Module) -> None:
    for parent, name, original in getattr(model, _GELU_SWAP, None) or ():
        setattr(parent, name, original)
    setattr(model, _GELU_SWAP, None)


def _mark_step(*_: Any) -> None:
    torch.compiler.cudagraph_mark_step_begin()


# A UNet's repeated blocks differ per level (channels, resolution) and each shape is its own
# compiled graph: SVD's SpatioTemporalResBlock alone sees more than dynamo's default limit of 8,
# which fails a fullgraph compile on the first render (found on the H100). Wan's equal blocks need one.
RECOMPILE_LIMIT = 64


def compile_blocks(model: torch.nn.Module, config: Compile = Compile()) -> dict[str, Any]:
    """Compile each repeated block of ``model`` in place (lazily; the first call compiles).

    Returns ``{"blocks": n, "mode": ..., "fullgraph": ..., "tuned": ..., "gelu": ..., "gelu_modules": n, "regions": [...]}``.

    With ``cudagraphs`` every model call first marks a new CUDA-graph step: the 40 blocks share
    one compiled function, so the graph trees cannot tell where one forward ends and the next
    begins, and without the mark the second forward replays over outputs the first still holds
    (measured: "accessing tensor output of CUDAGraphs that has been overwritten").
    """
    mode = "reduce-overhead" if config.cudagraphs else None
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    _restore_gelu(model)
    if config.gelu == "sigmoid":
        setattr(model, _GELU_SWAP, _swap_gelu(model))
    if config.tuned:  # torch.compile takes a mode or options, not both: reduce-overhead is triton.cudagraphs
        kwargs: dict[str, Any] = {"options": {**TUNED_OPTIONS, **({"triton.cudagraphs": True} if config.cudagraphs else {})}}
    else:
        kwargs = {"mode": mode}
    if config.regions:
        _compile_regions(model, config.regions, fullgraph=config.fullgraph, dynamic=False, **kwargs)
    else:
        model.compile_repeated_blocks(fullgraph=config.fullgraph, dynamic=False, **kwargs)
    _remove_step_hook(model)
    if config.cudagraphs:
        setattr(model, _STEP_HOOK, model.register_forward_pre_hook(_mark_step))
    return {"blocks": compiled_block_count(model), "mode": mode or "default", "fullgraph": config.fullgraph, "tuned": config.tuned,
            "gelu": config.gelu, "gelu_modules": len(getattr(model, _GELU_SWAP, None) or ()),
            "regions": list(config.regions or getattr(model, "_repeated_blocks", None) or ())}  # fmt: skip


def _compile_regions(model: torch.nn.Module, regions: tuple[str, ...], **kwargs: Any) -> None:
    """What diffusers' ``compile_repeated_blocks`` does with the model's ``_repeated_blocks``, for
    the class names in ``regions`` instead (the model's own list is not touched)."""
    modules = [m for m in model.modules() if type(m).__name__ in regions]
    if not modules:
        raise AccelConfigError(f"compile regions {list(regions)}: no such modules in {type(model).__name__}")
    for m in modules:
        m.compile(**kwargs)


def _remove_step_hook(model: torch.nn.Module) -> None:
    old = getattr(model, _STEP_HOOK, None)
    if old is not None:
        old.remove()
        setattr(model, _STEP_HOOK, None)


def uncompile_blocks(model: torch.nn.Module) -> None:
    """Undo :func:`compile_blocks`: every sub-module runs eagerly again, the CUDA-graph step hook
    is gone, the stock GELU modules are back, and torch.compile's caches are reset (process-wide)."""
    # nn.Module.compile() stores the compiled call in _compiled_call_impl; torch has no public
    # "uncompile", so this module (the one that compiles) is the one place that clears it.
    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            m._compiled_call_impl = None
    _remove_step_hook(model)
    _restore_gelu(model)
    torch.compiler.reset()


def compiled_block_count(model: torch.nn.Module) -> int:
    """How many sub-modules carry a compiled forward."""
    return sum(1 for m in model.modules() if getattr(m, "_compiled_call_impl", None) is not None)


def _apply(components: Any, config: Compile) -> AccelHandle:
    return AccelHandle(report=compile_blocks(components.transformer, config))


def _remove(components: Any, handle: AccelHandle) -> None:
    uncompile_blocks(components.transformer)


register_acceleration(Compile, order=100, apply=_apply, remove=_remove)
