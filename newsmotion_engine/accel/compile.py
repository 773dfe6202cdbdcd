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

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["Compile", "compile_blocks", "compiled_block_count", "uncompile_blocks"]


_STEP_HOOK = "_newsmotion_cudagraph_step_hook"


@dataclass(frozen=True)
class Compile(AccelConfig):
    """Regional ``torch.compile`` of the repeated blocks.

    Args:
        cudagraphs: mode ``"reduce-overhead"`` (CUDA graph trees per block); the option value
            ``compile="blocks-cudagraphs"``. Default ``False`` (``compile="blocks"``).
        fullgraph: a graph break inside a block is an error instead of a silent slowdown.
    """

    technique: ClassVar[str] = "compile"
    cudagraphs: bool = False
    fullgraph: bool = True

    def __post_init__(self) -> None:
        for name in ("cudagraphs", "fullgraph"):
            if not isinstance(getattr(self, name), bool):
                raise AccelConfigError(f"compile {name}={getattr(self, name)!r}: use true or false")


def _mark_step(*_: Any) -> None:
    torch.compiler.cudagraph_mark_step_begin()


def compile_blocks(model: torch.nn.Module, config: Compile = Compile()) -> dict[str, Any]:
    """Compile each repeated block of ``model`` in place (lazily; the first call compiles).

    Returns ``{"blocks": n, "mode": ..., "fullgraph": ...}``.

    With ``cudagraphs`` every model call first marks a new CUDA-graph step: the 40 blocks share
    one compiled function, so the graph trees cannot tell where one forward ends and the next
    begins, and without the mark the second forward replays over outputs the first still holds
    (measured: "accessing tensor output of CUDAGraphs that has been overwritten").
    """
    mode = "reduce-overhead" if config.cudagraphs else None
    model.compile_repeated_blocks(fullgraph=config.fullgraph, dynamic=False, mode=mode)
    _remove_step_hook(model)
    if config.cudagraphs:
        setattr(model, _STEP_HOOK, model.register_forward_pre_hook(_mark_step))
    return {"blocks": compiled_block_count(model), "mode": mode or "default", "fullgraph": config.fullgraph}


def _remove_step_hook(model: torch.nn.Module) -> None:
    old = getattr(model, _STEP_HOOK, None)
    if old is not None:
        old.remove()
        setattr(model, _STEP_HOOK, None)


def uncompile_blocks(model: torch.nn.Module) -> None:
    """Undo :func:`compile_blocks`: every sub-module runs eagerly again, the CUDA-graph step hook
    is gone, and torch.compile's caches are reset (process-wide)."""
    # nn.Module.compile() stores the compiled call in _compiled_call_impl; torch has no public
    # "uncompile", so this module (the one that compiles) is the one place that clears it.
    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            m._compiled_call_impl = None
    _remove_step_hook(model)
    torch.compiler.reset()


def compiled_block_count(model: torch.nn.Module) -> int:
    """How many sub-modules carry a compiled forward."""
    return sum(1 for m in model.modules() if getattr(m, "_compiled_call_impl", None) is not None)


def _apply(components: Any, config: Compile) -> AccelHandle:
    return AccelHandle(report=compile_blocks(components.transformer, config))


def _remove(components: Any, handle: AccelHandle) -> None:
    uncompile_blocks(components.transformer)


register_acceleration(Compile, order=100, apply=_apply, remove=_remove)
