"""FP8 (e4m3) linear layers: rowwise-scaled weights, FP8 compute through ``torch._scaled_mm``.

Each ``nn.Linear`` in the denoiser's repeated blocks is swapped (a DiT's ``blocks`` and face-adapter
blocks; a UNet's ``down_blocks``, ``mid_block`` and ``up_blocks``: :func:`fp8_scopes`), in
place and one at a time (so peak memory never holds two copies of the model), for a
:class:`Float8Linear` holding an e4m3 weight with one float32 scale per output row. Per call the
activation gets one dynamic scale per token row, and the matmul runs on the FP8 tensor cores with
both scale vectors applied in the epilogue (rowwise scaling).

Modes:
- ``"compute"``: FP8 weights and FP8 matmuls; needs compute capability >= 9.0 (H100/H200),
  otherwise :class:`Fp8UnsupportedError` with what to use instead.
- ``"storage"``: FP8 weights (half the bytes), dequantized to the compute dtype per call; runs
  anywhere (the labelled fallback: memory win, no speed win).
- ``"auto"``: compute where supported, else storage (the returned report says which ran).

Modules diffusers keeps in fp32 (norms, time embedder, modulation tables) are never linears of
the blocks, and everything outside the blocks (embedders, output projection) stays as loaded.
In compute mode, layers whose sizes are not multiples of 16 (the FP8 GEMM's alignment) stay in
high precision, and a feed-forward's ``GELU(approximate="tanh")`` moves into the next linear's
input quantization (:func:`fuse_gelu`; one Triton pass per row, :mod:`.fp8_rows`): the report's
``fused_gelu`` counts them.

Applied through the registry as ``Fp8Linears(mode=...)`` (order 10, first: later techniques
see the FP8 modules). The swap frees the bf16 weights unless ``keep_original=True`` keeps them on
the host; only then can it be removed (:func:`restore_fp8`).

Example::

    swap = quantize_fp8(transformer, Fp8Linears(mode="auto", keep_original=True))
    swap.report["mode"], swap.report["layers"], swap.report["weight_gib"]
    restore_fp8(swap)                       # the original bf16 linears again
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from newsmotion_engine.accel.fp8_rows import quantize_rows, quantize_rows_reference
from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration
from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "Float8Linear",
    "Fp8Linears",
    "Fp8Swap",
    "Fp8UnsupportedError",
    "fp8_compute_supported",
    "fp8_scopes",
    "fuse_gelu",
    "module_weight_gib",
    "quantize_fp8",
    "restore_fp8",
]

log = logging.getLogger(__name__)
DEFAULT_SCOPES = ("blocks", "face_adapter")
# A UNet (SVD's for mimicmotion, SD1.5's for champ) keeps its transformer and resnet blocks per level.
UNET_SCOPES = ("down_blocks", "mid_block", "up_blocks")
FP8_MODES = ("auto", "compute", "storage")


class Fp8UnsupportedError(NewsmotionError, RuntimeError):
    """FP8 compute was asked for on hardware without FP8 tensor cores."""


def fp8_compute_supported(device: torch.device | str | None = None) -> tuple[bool, str]:
    """``(supported, why)``: rowwise FP8 ``_scaled_mm`` needs CUDA compute capability >= 9.0."""
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine"
    dev = torch.device(device) if device is not None else torch.device("cuda")
    if dev.type != "cuda":
        return False, f"the model runs on {dev.type}, FP8 matmuls need a CUDA GPU"
    cap = torch.cuda.get_device_capability(dev)
    if cap < (9, 0):
        return False, f"{torch.cuda.get_device_name(dev)} has compute capability {cap[0]}.{cap[1]}; rowwise FP8 needs 9.0 (H100/H200)"
    if not hasattr(torch, "_scaled_mm"):
        return False, f"torch {torch.__version__} has no _scaled_mm"
    return True, f"{torch.cuda.get_device_name(dev)} (sm_{cap[0]}{cap[1]})"


class Float8Linear(nn.Module):
    """A linear layer with an e4m3 weight and per-output-row float32 scales.

    ``activation``: ``"gelu_tanh"`` when the ``GELU(approximate="tanh")`` before this layer was
    fused into it (:func:`fuse_gelu`): the input is then pre-activation, and in compute mode the
    activation runs inside the input's row quantization (:mod:`.fp8_rows`)."""

    def __init__(self, linear: nn.Linear, *, compute: bool, out_dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.compute = compute
        self.out_dtype = out_dtype
        self.activation: str | None = None
        with torch.no_grad():
            q, scale = quantize_rows_reference(linear.weight.data)
        self.register_buffer("weight_fp8", q)
        self.register_buffer("weight_scale", scale.view(1, -1).contiguous())  # [1, N] for _scaled_mm
        bias = linear.bias.data.to(out_dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, compute={'fp8' if self.compute else 'dequant'}{act}"

    def dequantized_weight(self) -> torch.Tensor:
        return (self.weight_fp8.float() * self.weight_scale.view(-1, 1)).to(self.out_dtype)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Linear's name: diffusers calls proj_in(input=...)
        x = input
        gelu = self.activation == "gelu_tanh"
        if not self.compute:
            if gelu:
                x = F.gelu(x, approximate="tanh")
            return F.linear(x.to(self.out_dtype), self.dequantized_weight(), self.bias)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        # Only the fused-GELU input takes the one-pass kernel: a plain input is left to inductor,
        # which fuses its quantization into the producer (layer norm + modulation; one quantization
        # shared by Q, K and V), something an opaque kernel would force back out into memory.
        xq, xs = quantize_rows(x2, gelu=True) if gelu else quantize_rows_reference(x2)
        out = torch._scaled_mm(
            xq, self.weight_fp8.t(), scale_a=xs, scale_b=self.weight_scale, bias=self.bias, out_dtype=self.out_dtype
        )
        return out.view(*shape[:-1], self.out_features)


def module_weight_gib(module: nn.Module) -> float:
    """Bytes of parameters and buffers, in GiB."""
    total = sum(p.numel() * p.element_size() for p in module.parameters())
    total += sum(b.numel() * b.element_size() for b in module.buffers())
    return total / 2**30


@dataclass(frozen=True)
class Fp8Linears(AccelConfig):
    """FP8 linears in the denoiser's repeated blocks (:func:`fp8_scopes`).

    Args:
        mode: ``"auto"`` (FP8 compute where the GPU has it, else the labelled storage fallback),
            ``"compute"`` (error without FP8 hardware) or ``"storage"``.
        keep_original: keep each swapped bf16 linear on the host, so removing the acceleration
            puts the exact original weights back (what the benchmark uses; costs host memory
            equal to the swapped weights: ~32 GiB for 14B). Without it the swap frees them and is
            irreversible (``registry.is_reversible`` says so).
    """

    technique: ClassVar[str] = "fp8"
    mode: str = "auto"
    keep_original: bool = False

    def __post_init__(self) -> None:
        if self.mode not in FP8_MODES:
            raise AccelConfigError(f"fp8 mode {self.mode!r}: use one of {', '.join(FP8_MODES)}")
        if not isinstance(self.keep_original, bool):
            raise AccelConfigError(f"fp8 keep_original={self.keep_original!r}: use true or false")


@dataclass
class Fp8Swap:
    """What :func:`quantize_fp8` did: its ``report`` and, with ``keep_original``, the swapped
    linears (parent module, attribute name, the original linear on the host, its device)."""

    report: dict[str, Any]
    originals: list[tuple[nn.Module, str, nn.Linear, torch.device]] | None
    gelus: list[tuple[nn.Module, str, nn.Module]] | None = None  # what fuse_gelu replaced


def quantize_fp8(model: nn.Module, config: Fp8Linears = Fp8Linears(), *, scopes: tuple[str, ...] = DEFAULT_SCOPES,
                 out_dtype: torch.dtype | None = None) -> Fp8Swap:  # fmt: skip
    """Swap the linears under ``scopes`` for :class:`Float8Linear` in place, one at a time.

    ``Fp8Swap.report``: ``mode`` ("compute" or "storage"), ``fallback`` reason (or None),
    ``layers`` swapped, ``skipped`` (misaligned), ``weight_gib`` after.

    Raises:
        Fp8UnsupportedError: ``mode="compute"`` on hardware without FP8 tensor cores.
    """
    device = next(model.parameters()).device
    ok, why = fp8_compute_supported(device)
    if config.mode == "compute" and not ok:
        raise Fp8UnsupportedError(
            f"fp8='compute' needs FP8 tensor cores: {why}. Use fp8='auto' (labelled FP8-storage fallback) or fp8='off'"
        )
    compute = ok and config.mode != "storage"
    fallback = None if (compute or config.mode == "storage") else f"FP8 storage with dequantized matmuls ({why})"
    originals: list[tuple[nn.Module, str, nn.Linear, torch.device]] | None = [] if config.keep_original else None
    layers = skipped = 0
    for scope in scopes:
        root = getattr(model, scope, None)
        if root is None:
            continue
        for parent in list(root.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, nn.Linear):
                    continue
                if compute and (child.in_features % 16 or child.out_features % 16):
                    skipped += 1
                    continue
                dtype = out_dtype or child.weight.dtype
                if dtype == torch.float32 and compute:
                    dtype = torch.bfloat16  # _scaled_mm rowwise outputs bf16
                setattr(parent, name, Float8Linear(child, compute=compute, out_dtype=dtype))
                if originals is not None:
                    # Moved off the GPU layer by layer, so the device never holds both copies.
                    originals.append((parent, name, child, child.weight.device))
                    child.to("cpu")
                del child
                layers += 1
    if device.type == "cuda":
        torch.cuda.empty_cache()
    gelus = [g for scope in scopes if getattr(model, scope, None) is not None for g in fuse_gelu(getattr(model, scope))] if compute else []
    report = {
        "mode": "compute" if compute else "storage",
        "fallback": fallback,
        "layers": layers,
        "skipped": skipped,
        "fused_gelu": len(gelus),
        "weight_gib": round(module_weight_gib(model), 3),
    }
    return Fp8Swap(report, originals, gelus)


def fp8_scopes(model: nn.Module) -> tuple[str, ...]:
    """Where ``model``'s repeated blocks live: a DiT's ``blocks`` (and face adapter), else a UNet's levels."""
    return DEFAULT_SCOPES if hasattr(model, "blocks") else UNET_SCOPES


def _is_tanh_gelu(m: nn.Module) -> bool:
    # torch's nn.GELU, or diffusers' GELU module (its projection, then the activation)
    return getattr(m, "approximate", None) == "tanh" and (isinstance(m, nn.GELU) or type(m).__name__ == "GELU")


def fuse_gelu(root: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Move each ``GELU(approximate="tanh")`` that feeds a compute-mode :class:`Float8Linear`
    (through ``Dropout(p=0)`` at most: Wan's ``Sequential(Linear, GELU, Linear)`` and diffusers'
    ``FeedForward`` of ``[GELU(proj), Dropout, Linear]``) into that linear's input quantization
    (``activation="gelu_tanh"``). torch's GELU becomes ``Identity``; diffusers' becomes its own
    projection. Returns ``(parent, name, original)`` per replacement."""
    fused = []
    for parent in list(root.modules()):
        children = list(parent.named_children())
        for i, (name, child) in enumerate(children):
            if not _is_tanh_gelu(child):
                continue
            rest = [c for _, c in children[i + 1:]]
            while rest and isinstance(rest[0], nn.Dropout) and rest[0].p == 0:
                rest = rest[1:]
            if not rest or not isinstance(rest[0], Float8Linear) or not rest[0].compute or rest[0].activation:
                continue
            rest[0].activation = "gelu_tanh"
            setattr(parent, name, getattr(child, "proj", None) or nn.Identity())  # diffusers' GELU keeps its projection
            fused.append((parent, name, child))
    return fused


def restore_fp8(swap: Fp8Swap) -> None:
    """Put the original linears of a ``keep_original`` swap back (on their original devices)."""
    if swap.originals is None:
        raise RuntimeError("this FP8 swap did not keep the original weights; it cannot be undone")
    for parent, name, gelu in reversed(swap.gelus or []):
        setattr(parent, name, gelu)
    swap.gelus = []
    for parent, name, linear, device in reversed(swap.originals):
        setattr(parent, name, linear.to(device))
    swap.originals = []


def _apply(components: Any, config: Fp8Linears) -> AccelHandle:
    swap = quantize_fp8(components.transformer, config, scopes=fp8_scopes(components.transformer))
    if swap.report["fallback"]:
        log.warning("fp8: %s", swap.report["fallback"])
    return AccelHandle(report=swap.report, state=swap)


def _remove(components: Any, handle: AccelHandle) -> None:
    restore_fp8(handle.state)


register_acceleration(Fp8Linears, order=10, apply=_apply, remove=_remove, reversible=lambda c: c.keep_original)
