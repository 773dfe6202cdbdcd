"""cuDNN's FP8 flash attention through NVIDIA's ``cudnn-frontend`` (an optional dependency: the
``nvidia-cudnn-frontend`` wheel; the cuDNN library itself comes with torch).

Why: our Triton 8-bit kernel (:mod:`newsmotion_engine.accel.attention_triton`) cannot use
Hopper's warp-specialized ping-pong schedule from Triton; cuDNN's FP8 SDPA engine is NVIDIA's own
Hopper kernel. Measured on an H100 (``benchmarks/results/attention_cudnn_h100.json``): 1.04-1.21x
as fast as ours, kernels alone, with 1.5x its error against BF16 (0.061 vs 0.040). So it is an
opt-in approximation (``attention='fp8-cudnn'``), never the default.

What it computes: ``softmax(q k^T / sqrt(d)) v`` with q, k, v in FP8 E4M3 at one scale per
tensor (the graph takes scalar descales), the probabilities in E4M3 at scale 448 for the second
matmul (they lie in [0, 1]), FP32 accumulation, and the output in E4M3 at V's scale (a softmax
row weights V convexly, so it cannot exceed V's largest magnitude; before Blackwell cuDNN writes
no BF16 from an FP8 graph), turned back to BF16. Before quantizing, the keys' per-head mean over
the sequence is subtracted: each query's scores move by one constant, which softmax cancels, and
the keys' shared offset (large in DiT attention) no longer costs E4M3 precision (the smoothing
SageAttention uses for its 8-bit keys; without it the error doubled on offset keys).

Layout: ``[B, S, H, D]`` tensors as the diffusers processors hold them (cuDNN reads the strides,
so nothing is transposed). Graphs are built once per shape and cached.

Example::

    ok, why = cudnn_fp8_supported()
    out = cudnn_fp8_attention(q, k, v)      # [B, S, H, D] bf16 in, bf16 out
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any, NamedTuple

import torch

from newsmotion_engine.accel.attention import E4M3_MAX, LOG2E, Fp8SelfAttnProcessor

__all__ = ["FP8_MAX", "CudnnFp8SelfAttnProcessor", "Fp8Tensor", "cudnn_fp8_attention", "cudnn_fp8_supported", "fp8_sdpa",
           "fp8_sdpa_lse", "fp8_sdpa_lse_quantized", "quantize_per_tensor", "reference_fp8_attention", "smooth_keys"]  # fmt: skip

FP8_MAX = E4M3_MAX  # the largest finite float8_e4m3fn
MIN_BACKEND = 90100  # cuDNN 9.1: the first with FP8 SDPA forward on Hopper


class Fp8Tensor(NamedTuple):
    """An E4M3 tensor and the float32 ``[1, 1, 1, 1]`` factor that turns it back into values."""

    data: torch.Tensor
    descale: torch.Tensor


def cudnn_fp8_supported(device: Any = None) -> tuple[bool, str]:
    """Whether :func:`cudnn_fp8_attention` can run here, and if not, why (one line)."""
    if not torch.cuda.is_available():
        return False, "cuDNN FP8 attention needs a CUDA GPU"
    dev = torch.device(device) if device is not None else torch.device("cuda")
    if torch.cuda.get_device_capability(dev) < (9, 0):
        return False, f"cuDNN FP8 attention needs a Hopper or newer GPU (this is sm_{''.join(map(str, torch.cuda.get_device_capability(dev)))})"
    try:
        import cudnn
    except Exception as exc:  # ImportError, or the backend library failing to load
        return False, f"cuDNN FP8 attention needs the nvidia-cudnn-frontend package ({type(exc).__name__}: {exc})"[:300]
    version = int(cudnn.backend_version())
    if version < MIN_BACKEND:
        return False, f"cuDNN FP8 attention needs cuDNN >= 9.1 (this torch has {version})"
    return True, f"cuDNN {version}, frontend {getattr(cudnn, '__version__', '?')}"


def smooth_keys(k: torch.Tensor) -> torch.Tensor:
    """``k`` ``[B, S, H, D]`` less its per-head mean over ``S``: softmax over keys is unchanged."""
    return k - k.mean(dim=1, keepdim=True, dtype=torch.float32).to(k.dtype)


def quantize_per_tensor(x: torch.Tensor) -> Fp8Tensor:
    """``x`` scaled so that its largest magnitude is :data:`FP8_MAX`, as E4M3, and the descale."""
    amax = x.abs().amax().float().clamp_min(1e-12)
    scale = FP8_MAX / amax
    data = (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return Fp8Tensor(data, (1.0 / scale).reshape(1, 1, 1, 1))


def reference_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What :func:`cudnn_fp8_attention` computes, in plain torch (small shapes; the CPU tests):
    the same smoothing and per-tensor quantization of q, k, v, of the probabilities and of the
    output."""
    qq, kq, vq = quantize_per_tensor(q), quantize_per_tensor(smooth_keys(k)), quantize_per_tensor(v)
    qf = qq.data.float() * qq.descale
    kf = kq.data.float() * kq.descale
    vf = vq.data.float() * vq.descale
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) / math.sqrt(q.shape[-1])
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    p8 = (p * FP8_MAX).to(torch.float8_e4m3fn).float() / FP8_MAX  # unnormalized, as the kernel keeps them
    out = torch.einsum("bhqk,bkhd->bqhd", p8, vf) / denom.permute(0, 2, 1, 3)
    dv = vq.descale.reshape(())
    out = (out / dv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * dv  # the E4M3 output
    return out.to(q.dtype)


class _Graph(NamedTuple):
    graph: Any
    q: Any
    k: Any
    v: Any
    o: Any
    lse: Any
    scalars: dict[str, Any]
    amax: tuple[Any, Any]
    workspace_bytes: int


_lock = threading.Lock()


@functools.cache  # never evicted: plans are keyed by their handle's id, which must stay unique
def _handle(device_index: int, stream: int) -> Any:
    """One cuDNN handle per (device, stream): a handle runs on the stream it is set to, and two
    renders on two streams (the A/B) must not switch one handle under each other."""
    import cudnn

    with torch.cuda.device(device_index):
        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=stream)
        return handle


def _bshd_stride(t: torch.Tensor) -> tuple[int, int, int, int]:
    """cuDNN's ``(b, h, s, d)`` strides of a ``[B, S, H, D]`` tensor."""
    sb, ss, sh, sd = t.stride()
    return (sb, sh, ss, sd)


_graphs: dict[tuple, _Graph] = {}


def _graph(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, handle: Any, stats: bool) -> _Graph:
    import cudnn

    b, sq, h, d = q.shape
    skv = k.shape[1]
    # Per handle too: a plan is built with its handle (one per stream, see _handle).
    key = (id(handle), b, sq, skv, h, d, _bshd_stride(q), _bshd_stride(k), _bshd_stride(v), stats)
    with _lock:
        if key in _graphs:
            return _graphs[key]
        fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=handle)
        tq = g.tensor(name="q", dim=(b, h, sq, d), stride=_bshd_stride(q), data_type=fp8)
        tk = g.tensor(name="k", dim=(b, h, skv, d), stride=_bshd_stride(k), data_type=fp8)
        tv = g.tensor(name="v", dim=(b, h, skv, d), stride=_bshd_stride(v), data_type=fp8)
        scalars = {n: g.tensor(name=n, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)
                   for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}  # fmt: skip
        o, lse, amax_s, amax_o = g.sdpa_fp8(q=tq, k=tk, v=tv, **scalars, generate_stats=stats,
                                            attn_scale=1.0 / math.sqrt(d), use_causal_mask=False)  # fmt: skip
        if stats:  # natural-log log-sum-exp of the scaled scores, one per (b, h, row)
            lse.set_output(True).set_dim((b, h, sq, 1)).set_stride((h * sq, sq, 1, 1)).set_data_type(f32)
        o_stride = (sq * h * d, d, h * d, 1)  # a fresh contiguous [B, S, H, D] output
        # E4M3 out: on Hopper cuDNN's FP8 graph writes no bf16 (its frontend refuses it before Blackwell).
        o.set_output(True).set_dim((b, h, sq, d)).set_stride(o_stride).set_data_type(fp8)
        for a in (amax_s, amax_o):
            a.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        built = _Graph(g, tq, tk, tv, o, lse if stats else None, scalars, (amax_s, amax_o), max(1, g.get_workspace_size()))
        _graphs[key] = built
        return built


def cudnn_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                        quantized: tuple[Fp8Tensor, Fp8Tensor, Fp8Tensor] | None = None,
                        return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Attention of ``[B, S, H, D]`` ``q`` over ``k``/``v`` (``[B, S_kv, H, D]``) with cuDNN's FP8
    kernel -> bf16 ``[B, S, H, D]``. ``quantized``: q, k (smoothed), v already quantized (e.g.
    cached reference keys); then ``q``/``k``/``v`` only give the shapes. ``return_lse``: also each
    row's log-sum-exp of the *smoothed* scores, natural log, float32 ``[B, H, S]`` (add
    ``q . mean(k) / sqrt(D)`` for the unsmoothed one)."""
    if quantized is None:
        quantized = (quantize_per_tensor(q), quantize_per_tensor(smooth_keys(k)), quantize_per_tensor(v))
    qq, kq, vq = (t if t.data.stride(-1) == 1 else t._replace(data=t.data.contiguous()) for t in quantized)
    dev = qq.data.device
    handle = _handle(dev.index if dev.index is not None else torch.cuda.current_device(), torch.cuda.current_stream(dev).cuda_stream)
    g = _graph(qq.data, kq.data, vq.data, handle, return_lse)
    b, sq, h, d = qq.data.shape
    out8 = torch.empty(b, sq, h, d, device=dev, dtype=torch.float8_e4m3fn)
    one = torch.ones(1, 1, 1, 1, device=dev, dtype=torch.float32)
    amax_s = torch.empty(1, 1, 1, 1, device=dev, dtype=torch.float32)
    amax_o = torch.empty_like(amax_s)
    pack = {g.q: qq.data, g.k: kq.data, g.v: vq.data, g.o: out8,
            g.scalars["descale_q"]: qq.descale, g.scalars["descale_k"]: kq.descale, g.scalars["descale_v"]: vq.descale,
            g.scalars["descale_s"]: one / FP8_MAX, g.scalars["scale_s"]: one * FP8_MAX,
            # softmax rows are convex weights: |out| <= max |v|, so v's own scale fits the output
            g.scalars["scale_o"]: 1.0 / vq.descale,
            g.amax[0]: amax_s, g.amax[1]: amax_o}  # fmt: skip
    if return_lse:
        lse = torch.empty(b, h, sq, 1, device=dev, dtype=torch.float32)
        pack[g.lse] = lse
    # Per call, from torch's stream-ordered allocator: two streams running one graph never share it.
    workspace = torch.empty(g.workspace_bytes, device=dev, dtype=torch.uint8)
    g.graph.execute(pack, workspace, handle=handle)
    out = (out8.float() * vq.descale).to(torch.bfloat16)
    return (out, lse[..., 0]) if return_lse else out


# --------------------------------------------------------------------------------------------
# As torch ops (opaque to torch.compile: the quantization before them is traced and fused)
# --------------------------------------------------------------------------------------------
@torch.library.custom_op("newsmotion::cudnn_fp8_sdpa", mutates_args=())
def _sdpa_op(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    return cudnn_fp8_attention(q8, k8, v8, quantized=(Fp8Tensor(q8, dq), Fp8Tensor(k8, dk), Fp8Tensor(v8, dv)))


@_sdpa_op.register_fake
def _(q8, k8, v8, dq, dk, dv):  # noqa: ANN001, ANN202
    return q8.new_empty(q8.shape, dtype=torch.bfloat16)


@torch.library.custom_op("newsmotion::cudnn_fp8_sdpa_lse", mutates_args=())
def _sdpa_lse_op(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                 dv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return cudnn_fp8_attention(q8, k8, v8, quantized=(Fp8Tensor(q8, dq), Fp8Tensor(k8, dk), Fp8Tensor(v8, dv)), return_lse=True)


@_sdpa_lse_op.register_fake
def _(q8, k8, v8, dq, dk, dv):  # noqa: ANN001, ANN202
    b, s, h, _ = q8.shape
    return q8.new_empty(q8.shape, dtype=torch.bfloat16), q8.new_empty((b, h, s), dtype=torch.float32)


def _dequantized_attention(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                           dv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """What the cuDNN graph computes, in float32 torch: BSHD bf16 output and the natural-log
    log-sum-exp ``[B, H, S]`` (the ops' CPU kernels: tests run the processors without a GPU)."""
    qf, kf, vf = q8.float() * dq.reshape(()), k8.float() * dk.reshape(()), v8.float() * dv.reshape(())
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) / math.sqrt(q8.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    p8 = (torch.exp(s - s.amax(dim=-1, keepdim=True)) * FP8_MAX).to(torch.float8_e4m3fn).float() / FP8_MAX
    out = torch.einsum("bhqk,bkhd->bqhd", p8, vf) / p8.sum(-1).permute(0, 2, 1)[..., None]
    out = (out / dv.reshape(())).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * dv.reshape(())
    return out.to(torch.bfloat16), lse


@_sdpa_op.register_kernel("cpu")
def _(q8, k8, v8, dq, dk, dv):  # noqa: ANN001, ANN202
    return _dequantized_attention(q8, k8, v8, dq, dk, dv)[0]


@_sdpa_lse_op.register_kernel("cpu")
def _(q8, k8, v8, dq, dk, dv):  # noqa: ANN001, ANN202
    return _dequantized_attention(q8, k8, v8, dq, dk, dv)


def fp8_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """:func:`cudnn_fp8_attention` with the quantization in torch (traceable) and the launch an op."""
    qq, kq, vq = quantize_per_tensor(q), quantize_per_tensor(smooth_keys(k)), quantize_per_tensor(v)
    return _sdpa_op(qq.data, kq.data, vq.data, qq.descale, kq.descale, vq.descale).to(q.dtype)


def fp8_sdpa_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fp8_sdpa` and each row's log2-sum-exp2 of its (unsmoothed) scores, float32 ``[B, S, H]``:
    the units of :func:`~newsmotion_engine.accel.attention.merge_attention`."""
    mean = k.float().mean(dim=1, keepdim=True)
    return fp8_sdpa_lse_quantized(q, quantize_per_tensor(k.float() - mean), quantize_per_tensor(v), mean)


def fp8_sdpa_lse_quantized(q: torch.Tensor, k: Fp8Tensor, v: Fp8Tensor, k_mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fp8_sdpa_lse` over keys already smoothed by ``k_mean`` (float32 ``[B, 1, H, D]``) and
    quantized, and quantized values (a reference kept across steps); only ``q`` is quantized here."""
    qq = quantize_per_tensor(q)
    out, lse = _sdpa_lse_op(qq.data, k.data, v.data, qq.descale, k.descale, v.descale)
    shift = (q.float() * k_mean).sum(-1) * (LOG2E / math.sqrt(q.shape[-1]))  # what the smoothing took out of each score
    return out.to(q.dtype), lse.transpose(1, 2) * LOG2E + shift


class CudnnFp8SelfAttnProcessor(Fp8SelfAttnProcessor):
    """A Wan block's self-attention (``attn1``) on cuDNN's FP8 kernel (``attention='fp8-cudnn'``):
    the projections, norms, RoPE and output of :class:`~newsmotion_engine.accel.attention.Fp8SelfAttnProcessor`."""

    def __init__(self) -> None:
        self.variant = None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fp8_sdpa(q, k, v)
