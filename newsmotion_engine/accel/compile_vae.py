"""Regional ``torch.compile`` of a VAE decoder's blocks (registry order 98; the option
``compile_vae``).

Why: the UNet backends decode in eager mode, and their decoders are made of GroupNorm + SiLU +
convolution blocks at full resolution. On the H100 the stock decode of mimicmotion's 120 frames
(SVD's temporal decoder, 576x1024, 8 frames a call) takes 11.5 s for about 0.6 PFLOP, ~55
TFLOP/s: its one-step profile (``benchmarks/results/mimicmotion_channels_last_h100.json``) is led
by eager GroupNorm statistics (``RowwiseMomentsCUDAKernel``, 3.4 s), copies (3.1 s) and
element-wise additions (1.9 s), not by its convolutions (~1.9 s). Compiled, each norm, its
activation and the layout changes around the time-mixing convolutions become a few fused
kernels, the same way the UNet's blocks already run under :class:`.compile.Compile`.

What changes: the same arithmetic in fused kernels (inductor's GroupNorm reduces in another
order), so the frames may differ in the last bits. The first decode of a shape compiles (a
warm resource pays it once; ``dynamic=False``, so a new chunk length compiles once more).

Which blocks: ``vae.decoder.mid_block`` and each of ``vae.decoder.up_blocks`` (SVD's
``AutoencoderKLTemporalDecoder`` and the SD ``AutoencoderKL`` of champ share that layout). The
Wan VAE is refused: its blocks take the causal frame cache as a Python list that changes on
every call, which would recompile instead of reuse.

Example::

    applied = apply_accelerations(components, (CompileVae(), Compile()))
    applied.report["compile_vae"]   # mimicmotion's release: {"blocks": 5, ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["CompileVae", "compile_decoder_blocks", "decoder_blocks", "uncompile_decoder_blocks"]

# dynamo counts graphs per code object: the up blocks share one forward, each block's shape is its
# own graph (four in SVD's decoder), and a new chunk length adds one per block.
_RECOMPILE_LIMIT = 16


@dataclass(frozen=True)
class CompileVae(AccelConfig):
    """Regional ``torch.compile`` of the VAE decoder's mid and up blocks (module docstring).

    Args:
        component: the components' attribute holding the VAE.
    """

    technique: ClassVar[str] = "compile_vae"
    component: str = "vae"

    def __post_init__(self) -> None:
        if not isinstance(self.component, str) or not self.component:
            raise AccelConfigError(f"compile_vae component {self.component!r}: give the components' VAE attribute name")


def decoder_blocks(vae: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder's ``mid_block`` and ``up_blocks`` (empty for a VAE without that layout)."""
    decoder = getattr(vae, "decoder", None)
    mid, ups = getattr(decoder, "mid_block", None), getattr(decoder, "up_blocks", None)
    if not isinstance(mid, torch.nn.Module) or not isinstance(ups, torch.nn.ModuleList):
        return []
    return [mid, *ups]


def compile_decoder_blocks(vae: torch.nn.Module) -> dict[str, Any]:
    """Compile each decoder block of ``vae`` in place (lazily: the first decode compiles)."""
    if type(vae).__name__ == "AutoencoderKLWan":
        raise AccelConfigError("compile_vae: the Wan VAE's causal frame cache would recompile every call; "
                               "use causal_pad_fold / fused_vae_norm for it")  # fmt: skip
    blocks = decoder_blocks(vae)
    if not blocks:
        raise AccelConfigError(f"compile_vae: {type(vae).__name__} has no decoder.mid_block / decoder.up_blocks to compile")
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, _RECOMPILE_LIMIT)
    for block in blocks:
        block.compile(fullgraph=False, dynamic=False)
    return {"blocks": len(blocks), "vae": type(vae).__name__}


def uncompile_decoder_blocks(vae: torch.nn.Module) -> None:
    """Eager decoder blocks again (``nn.Module.compile`` keeps its compiled call on the module)."""
    for block in decoder_blocks(vae):
        block._compiled_call_impl = None


def _vae(components: Any, config: CompileVae) -> torch.nn.Module:
    vae = getattr(components, config.component, None)
    if not isinstance(vae, torch.nn.Module):
        raise AccelConfigError(f"compile_vae: the components have no module {config.component!r}")
    return vae


def _apply(components: Any, config: CompileVae) -> AccelHandle:
    vae = _vae(components, config)
    return AccelHandle(report=compile_decoder_blocks(vae), state=vae)


def _remove(components: Any, handle: AccelHandle) -> None:
    uncompile_decoder_blocks(handle.state)


register_acceleration(CompileVae, order=98, apply=_apply, remove=_remove)
