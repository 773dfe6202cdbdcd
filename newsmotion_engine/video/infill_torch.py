"""The infill's warping and blending in torch (``grid_sample``), so that on a GPU the per-frame
cost of an in-between frame is little more than the DIS flow, which stays on the CPU
(:mod:`newsmotion_engine.video.infill` computes it per keyframe pair).

Same maths as :meth:`KeyframePair.at <newsmotion_engine.video.infill.KeyframePair.at>`, operation
for operation: the displacement (linear or quadratic), the fixed-point solve on the coarse grid,
the visibility and convergence weights, the upsampling of the source points, bicubic (or
bilinear) resampling of the keyframes, the blend and the matte composite. OpenCV's ``remap`` /
``resize`` and torch's ``grid_sample`` / ``interpolate`` use the same pixel-centre conventions and
the same cubic kernel (a = -0.75), so both paths agree to rounding.

Runs on any torch device (tests use ``device="cpu"``). Example::

    pair = KeyframePair(a, b)                        # DIS flow on the CPU
    mid, _ = at_torch(pair, 0.5, device="cuda")      # warps + blend on the GPU
    infill = Infiller(2, 120, device="cuda")         # the streaming stage, same switch
"""

from __future__ import annotations

from typing import Any

import numpy as np

from newsmotion_engine.errors import InfillError
from newsmotion_engine.video.infill import _FALLBACK_WEIGHT, KeyframePair, _check_t

__all__ = ["at_torch"]


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


class _PairTensors:
    """One pair's arrays on one device (uploaded once per pair, reused for every ``t``)."""

    def __init__(self, pair: KeyframePair, device: Any) -> None:
        torch, _ = _torch()

        def up(x: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)

        self.f01g = up(pair._f01g)  # [h, w, 2]
        self.f10g = up(pair._f10g)
        self.v0 = up(pair.v0)  # [h, w]
        self.v1 = up(pair.v1)
        # Layers as [1, C, H, W]: RGB (or premultiplied RGB + alpha).
        self.layers = tuple(up(layer).permute(2, 0, 1)[None] for layer in pair._layers)
        h, w = pair._grid_g.shape[:2]
        H, W = pair.shape[:2]
        self.grid_g = _pixel_grid(torch, h, w, device)
        self.grid = _pixel_grid(torch, H, W, device)


def _pixel_grid(torch: Any, h: int, w: int, device: Any) -> Any:
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                            torch.arange(w, dtype=torch.float32, device=device), indexing="ij")  # fmt: skip
    return torch.stack([xs, ys], dim=-1)


def _sample(F: Any, image: Any, points: Any, mode: str, padding: str) -> Any:
    """``image`` [1, C, H, W] sampled at pixel coordinates ``points`` [h, w, 2] (x, y) -> [1, C, h, w]."""
    H, W = image.shape[-2:]
    scale = points.new_tensor([2.0 / max(W - 1, 1), 2.0 / max(H - 1, 1)])
    norm = points * scale - 1.0
    return F.grid_sample(image, norm[None], mode=mode, padding_mode=padding, align_corners=True)


def _tensors(pair: KeyframePair, device: Any) -> _PairTensors:
    cache = pair.__dict__.setdefault("_torch_tensors", {})
    key = str(device)
    if key not in cache:
        cache.clear()  # one device at a time
        cache[key] = _PairTensors(pair, device)
    return cache[key]


def _displacement(pair: KeyframePair, pt: _PairTensors, side: int, s: float, neighbour: KeyframePair | None, device: Any) -> Any:
    u, vis_u = (pt.f01g, pt.v0) if side == 0 else (pt.f10g, pt.v1)
    if pair.config.motion == "linear" or neighbour is None:
        return u * s
    if neighbour.shape != pair.shape or neighbour._grid_g.shape != pair._grid_g.shape:
        raise InfillError(f"neighbouring keyframe pair has frames of shape {neighbour.shape}, this pair {pair.shape}")
    nt = _tensors(neighbour, device)
    w, vis_w = (nt.f10g, nt.v1) if side == 0 else (nt.f01g, nt.v0)
    rho = neighbour.gap / pair.gap
    acc = (rho * u + w) * (2.0 / (rho * (1.0 + rho)))
    acc = acc * (vis_u * vis_w)[..., None]
    return u * s + acc * (0.5 * (s * s - s))


def _side(pair: KeyframePair, pt: _PairTensors, disp: Any, vis: Any, layer: Any) -> tuple[Any, Any]:
    """The layer warped at full resolution (rounded to uint8 levels, as OpenCV's remap of a uint8
    image) and the coarse confidence."""
    torch, F = _torch()
    cfg = pair.config
    g = pair._scale_g
    flow = disp.permute(2, 0, 1)[None]  # [1, 2, h, w]
    p = pt.grid_g - disp
    step = torch.zeros_like(p)
    for _ in range(cfg.fixed_point_iters):
        nxt = pt.grid_g - _sample(F, flow, p, "bilinear", "border")[0].permute(1, 2, 0)
        step = nxt - p
        p = nxt
    residual = torch.linalg.vector_norm(step, dim=-1)
    conf = _sample(F, vis[None, None], p, "bilinear", "zeros")[0, 0]
    conf = conf * torch.exp(-torch.square(residual * (g / cfg.converge_px)))
    H, W = pair.shape[:2]
    if p.shape[:2] != (H, W):
        d = (p - pt.grid_g).permute(2, 0, 1)[None]
        d = F.interpolate(d, size=(H, W), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)
        p = pt.grid + d * g
    mode = "bicubic" if cfg.interpolation == "cubic" else "bilinear"
    return torch.clamp(torch.round(_sample(F, layer, p, mode, "border")[0]), 0, 255), conf


def at_torch(
    pair: KeyframePair,
    t: float,
    *,
    before: KeyframePair | None = None,
    after: KeyframePair | None = None,
    device: Any = "cuda",
) -> tuple[np.ndarray, np.ndarray | None]:
    """:meth:`KeyframePair.at` on a torch ``device``: ``(rgb uint8 [H, W, 3], alpha uint8 [H, W]
    or None)`` as numpy arrays (the encoder reads CPU frames). The pair's arrays are uploaded on
    first use and kept on the pair for its other ``t``."""
    torch, F = _torch()
    t = _check_t(t)
    with torch.no_grad():
        pt = _tensors(pair, device)
        s0, c0 = _side(pair, pt, _displacement(pair, pt, 0, t, before, device), pt.v0, pt.layers[0])
        s1, c1 = _side(pair, pt, _displacement(pair, pt, 1, 1.0 - t, after, device), pt.v1, pt.layers[1])
        near0 = 1.0 if t < 0.5 else (0.5 if t == 0.5 else 0.0)
        w0 = (1.0 - t) * c0 + _FALLBACK_WEIGHT * near0
        w1 = t * c1 + _FALLBACK_WEIGHT * (1.0 - near0)
        k0 = w0 / (w0 + w1)
        H, W = pair.shape[:2]
        if k0.shape != (H, W):
            k0 = F.interpolate(k0[None, None], size=(H, W), mode="bilinear", align_corners=False)[0, 0]
        blend = torch.clamp(torch.round(s1 + k0[None] * (s0 - s1)), 0, 255)  # [C, H, W], uint8 levels
        if not pair.matte:
            return blend.to(torch.uint8).permute(1, 2, 0).cpu().numpy(), None
        alpha = blend[3:]
        fg = torch.minimum(blend[:3], alpha)
        bg = torch.as_tensor(pair.background, dtype=torch.float32, device=blend.device)[:, None, None]
        out = fg + torch.floor(bg * (1.0 - alpha / 255.0) + 0.5)
        rgb = torch.clamp(out, 0, 255).to(torch.uint8).permute(1, 2, 0)
        return rgb.cpu().numpy(), alpha[0].to(torch.uint8).cpu().numpy()
