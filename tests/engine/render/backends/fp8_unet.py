"""FP8 linears on a UNet backend's loaded components (mimicmotion, champ), checked the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch


def check_fp8_round_trip(components: Any, render: Callable[[], Iterable[np.ndarray]], *, untouched: Iterable[torch.nn.Module] = ()) -> None:
    """Every linear of the UNet's (``components.transformer``) down / mid / up blocks is swapped
    (on the CPU as the labelled storage fallback: e4m3 weights, dequantized per call) and nothing
    in ``untouched``; the frames of ``render()`` stay close; removed (originals kept), the exact
    frames come back."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.fp8 import UNET_SCOPES, Float8Linear, Fp8Linears

    unet = components.transformer
    linears = sum(isinstance(m, torch.nn.Linear) for scope in UNET_SCOPES for m in getattr(unet, scope).modules())
    before = np.stack(list(render())).astype(np.int16)
    applied = registry.apply_accelerations(components, (Fp8Linears(mode="storage", keep_original=True),))
    try:
        assert linears > 0 and applied.report["fp8"]["layers"] == linears
        assert sum(isinstance(m, Float8Linear) for m in unet.modules()) == linears
        assert not any(isinstance(m, Float8Linear) for module in untouched for m in module.modules())
        after = np.stack(list(render())).astype(np.int16)
    finally:
        registry.remove_accelerations(components, applied)
    assert not any(isinstance(m, Float8Linear) for m in unet.modules())
    assert 0 < np.abs(after - before).mean() < 8, np.abs(after - before).mean()  # e4m3 weights: close, not equal
    assert np.array_equal(np.stack(list(render())).astype(np.int16), before)
