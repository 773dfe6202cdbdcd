"""wan-animate-2's reference K/V storage (render/wan_animate_2/kv.py) pieces that need no GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")



def test_host_arena_packs_tensors_into_blocks_without_power_of_two_rounding():
    from newsmotion_engine.render.wan_animate_2.kv import HostArena

    arena = HostArena(chunk_bytes=4096, pin=False)
    a = arena.empty((3, 100), torch.float8_e4m3fn)  # 300 B
    b = arena.empty((10, 25), torch.float32)  # 1000 B, 256-aligned after a
    c = arena.empty((2000,), torch.float32)  # 8000 B: larger than a block, its own allocation
    d = arena.empty((3000,), torch.uint8)  # does not fit the first block's rest: a new block
    assert a.shape == (3, 100) and b.dtype == torch.float32 and c.numel() == 2000
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()  # same block
    assert d.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    assert arena.reserved == 4096 + 8000 + 4096  # exact sizes: no rounding up to powers of two
    b.fill_(2.0), a.view(torch.uint8).fill_(7)
    assert float(b.sum()) == 500.0 and int(a.view(torch.uint8)[0, 0]) == 7  # views do not overlap
