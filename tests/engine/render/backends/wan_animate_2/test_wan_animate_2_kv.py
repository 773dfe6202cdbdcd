"""wan-animate-2's reference K/V storage (render/backends/wan_animate_2/kv.py) pieces that need no GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")



def test_host_arena_packs_tensors_into_blocks_without_power_of_two_rounding():
    from newsmotion_engine.render.backends.wan_animate_2.kv import HostArena

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


def _make(variant="int8qk-fp8pv"):
    from newsmotion_engine.accel.attention_incontext import prepare_reference

    return lambda k, v: prepare_reference(k, v, variant)


def test_offloaded_layer_is_converted_once_into_its_own_host_bytes():
    from newsmotion_engine.render.backends.wan_animate_2.kv import Fp8KVLayerCache, HostArena, kv_bytes

    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(1, 48, 2, 32, generator=g), torch.randn(1, 48, 2, 32, generator=g)
    layer = Fp8KVLayerCache.empty(offload=True, arena=HostArena(chunk_bytes=2**16, pin=False))
    layer.store(k, v)
    key_ptr, value_ptr = layer.key.data_ptr(), layer.value.data_ptr()
    before = layer.arena.reserved
    calls = []

    def make(kk, vv):
        calls.append(1)
        return _make()(kk, vv)

    ref = layer.kernel_reference(make, ("grid", 1))
    again = layer.kernel_reference(make, ("grid", 1))
    assert len(calls) == 1 and again is layer.prepared
    assert torch.equal(again.k, ref.k) and torch.equal(again.vt, ref.vt)
    # Same host bytes: the kernel form overwrote the FP8 K/V it came from; no new host memory.
    assert again.k.data_ptr() == key_ptr and again.vt.data_ptr() == value_ptr and layer.arena.reserved == before
    assert layer.key is None and layer.key_scale is None
    kv = type("Cache", (), {"layer_caches": [layer]})()
    assert kv_bytes(kv) == sum(t.numel() * t.element_size() for t in again)
    with pytest.raises(RuntimeError, match="converted for"):
        layer.kernel_reference(make, ("another grid", 1))
    with pytest.raises(RuntimeError, match="8-bit in-context attention"):
        layer.get()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the side-stream prefetch needs a CUDA GPU")
def test_prefetched_offloaded_layers_equal_device_resident_ones():
    from newsmotion_engine.render.backends.wan_animate_2.kv import fp8_cache

    g = torch.Generator().manual_seed(1)
    raw = [(torch.randn(1, 4096, 8, 128, generator=g).cuda(), torch.randn(1, 4096, 8, 128, generator=g).cuda()) for _ in range(4)]
    on_gpu, offloaded = fp8_cache(4), fp8_cache(4, offload=True)
    for cache in (on_gpu, offloaded):
        for layer, (k, v) in zip(cache.layer_caches, raw):
            layer.store(k, v)
    bits = lambda t: t.view(torch.uint8) if t.element_size() == 1 else t  # noqa: E731  (no torch.equal for e4m3)
    other = fp8_cache(4, offload=True)  # a second segment: one prefetcher in flight at a time
    for layer, (k, v) in zip(other.layer_caches, raw[::-1]):
        layer.store(k, v)
    for step in range(3):  # step 0 converts; later steps prefetch layer i + 1 during layer i
        for i in (0, 1, 3, 2) if step == 2 else range(4):  # step 2: out of order (a skipped layer's prefetch)
            a = on_gpu.layer_caches[i].kernel_reference(_make(), "t")
            b = offloaded.layer_caches[i].kernel_reference(_make(), "t")
            c = other.layer_caches[3 - i].kernel_reference(_make(), "t")
            torch.cuda.synchronize()
            assert all(torch.equal(bits(x), bits(y)) for x, y in zip(a, c)), (step, i)
            assert b.k.is_cuda and all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b)), (step, i)


def test_extract_pass_can_store_the_kernel_form_directly_offloaded():
    from newsmotion_engine.render.backends.wan_animate_2.kv import Fp8KVLayerCache, HostArena

    g = torch.Generator().manual_seed(2)
    k, v = torch.randn(1, 48, 2, 32, generator=g), torch.randn(1, 48, 2, 32, generator=g)
    layer = Fp8KVLayerCache.empty(offload=True, arena=HostArena(chunk_bytes=2**16, pin=False))
    layer.kernel_form = True
    made = _make()(k, v)
    layer.store_kernel_reference(made, "t")
    assert layer.key is None and layer.arena.reserved > 0  # the large tensors went to the host arena
    got = layer.kernel_reference(lambda *a: pytest.fail("must not convert again"), "t")
    assert all(torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x, y.view(torch.uint8) if y.element_size() == 1 else y)
               for x, y in zip(got, made))  # fmt: skip
