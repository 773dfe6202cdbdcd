"""wan-animate-2's 8-bit attention path on the CPU: the in-context attention of the cached pass
(generation + same-frame reference in one softmax, the reference K/V converted once per layer),
the earlier split (dense + per-frame reference merged by log-sum-exp) and the float32 RoPE against
the stock processor on the tiny preset. The kernel itself is replaced by float32 torch here (over
the converted, 8-bit reference: its rounding is the tolerance); the kernel runs under Triton's
interpreter in tests/engine/accel/test_attention_incontext.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import attention as A  # noqa: E402
from newsmotion_engine.accel import attention_cudnn as C  # noqa: E402
from newsmotion_engine.accel.attention_incontext import reference_incontext_attention  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2 import attention as WA  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2 import denoise as D  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2Options  # noqa: E402


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def _exact(q, k, v):
    return A.reference_attention_lse(q, k, v)[0]


def _inputs(comps, geom, seed=0):
    g = torch.Generator().manual_seed(seed)
    cfg = comps.transformer.config
    t, h, w = geom.latent_frames, geom.latent_h, geom.latent_w
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(driving=r(20, t, h, w), prompt_ref=r(1, 512, cfg.text_dim), clip=r(1, 257, 1280), latents=r(16, t + 1, h, w),
                reference=r(20, t + 1, h, w), prompt=r(1, 512, cfg.text_dim), image=r(1, 257, 1280))  # fmt: skip


def _run(comps, geom, x, kv_form="model", forwards=1):
    """Extract (into a stock cache, FP8 layers, or FP8 layers in the kernel's form), then cached forwards."""
    from newsmotion_engine.render.backends.wan_animate_2.kv import fp8_cache, quantize_cache

    tr = comps.transformer
    with torch.no_grad():
        target = fp8_cache(tr.config.num_layers, kernel_form=True) if kv_form == "kernel" else None
        kv = D.extract_reference_kv(tr, x["driving"], x["prompt_ref"], x["clip"], geom, cache=target)
        if kv_form == "fp8":
            quantize_cache(kv)
        outs = [D._forward(tr, x["latents"], torch.tensor(700.0), x["prompt"], x["reference"], kv, x["image"], geom, False, torch.float32)
                for _ in range(forwards)]  # fmt: skip
    return (outs[0] if forwards == 1 else outs), kv


@pytest.fixture(scope="module")
def tiny():
    opts = WanAnimate2Options.from_mapping({"preset": "tiny", "device": "cpu", "dtype": "float32"})
    comps = load_render_components(opts)
    return comps, D.geometry(opts.segment_length, 64, 128)


def _ours(monkeypatch, blocks):
    monkeypatch.setattr(WA.Fp8Animate2AttnProcessor, "attend", lambda self, q, k, v: _exact(q, k, v))
    monkeypatch.setattr(WA.Fp8Animate2AttnProcessor, "attend_reference",
                        lambda self, q, k, v, ref, hw: reference_incontext_attention(q, k, v, ref, hw))  # fmt: skip
    ours = [WA.Fp8Animate2AttnProcessor() for _ in blocks]
    for b, p in zip(blocks, ours):
        b.self_attn.set_processor(p)
    return ours


@pytest.mark.parametrize("kv_form", ["model", "fp8", "kernel"])
def test_incontext_attention_matches_the_stock_block_mask(tiny, monkeypatch, kv_form):
    """Stock cache (converted every call), FP8 cache (converted on first use, kept), and a cache
    the extract pass filled in the kernel's form (never converted)."""
    comps, geom = tiny
    x = _inputs(comps, geom)
    blocks = comps.transformer.blocks
    stock = [b.self_attn.processor for b in blocks]
    ref, _ = _run(comps, geom, x, "fp8" if kv_form == "kernel" else kv_form)
    ours = _ours(monkeypatch, blocks)
    try:
        (got, again), kv = _run(comps, geom, x, kv_form, forwards=2)
    finally:
        for b, p in zip(blocks, stock):
            b.self_attn.set_processor(p)
    assert all(p.stats == {"incontext": 2, "fallback": 0} for p in ours), [p.stats for p in ours]
    # The reference K/V are 8-bit (int8 keys, e4m3 values, per-channel scales): that rounding is
    # the whole difference from the stock result, 2e-4 here. Dropping the reference attention
    # altogether moves the tiny model's output by 9e-3, so 1e-3 tells the two apart.
    assert _rel(got, ref) < 1e-3, _rel(got, ref)
    assert torch.equal(got, again)  # the second forward reads the kept conversion: same result
    layers = kv.layer_caches
    if kv_form != "model":
        assert all(layer.prepared is not None and layer.key is None for layer in layers)  # converted once, kept
        with pytest.raises(RuntimeError, match="converted for the 8-bit in-context attention"):
            layers[0].get()
    else:
        assert all(layer.key is not None for layer in layers)  # a stock cache is left as it was


def test_split_and_incontext_attention_against_the_masked_softmax():
    """The earlier split (the bench's comparison) is exact in float32; the in-context stand-in over
    the 8-bit reference is within that rounding; both against a brute-force masked softmax."""
    from newsmotion_engine.accel.attention_incontext import prepare_reference

    g = torch.Generator().manual_seed(5)
    hw, frames = 10, 3
    q, k, v = (torch.randn(1, frames * hw, 2, 16, generator=g) for _ in range(3))
    k_ref, v_ref = (torch.randn(1, (frames - 1) * hw, 2, 16, generator=g) + 0.3 for _ in range(2))
    keys, vals = torch.cat([k, k_ref], 1), torch.cat([v, v_ref], 1)
    f = torch.arange(frames * hw) // hw
    allowed = torch.cat([torch.ones(frames * hw, frames * hw, dtype=torch.bool), (f[hw:][None, :] - 1) == f[:, None] - 1], 1)
    s = torch.einsum("bshd,bthd->bhst", q, keys) / 4.0
    exact = torch.einsum("bhst,bthd->bshd", s.masked_fill(~allowed, float("-inf")).softmax(-1), vals)
    split = WA.split_cached_attention(q, k, v, k_ref, v_ref, hw, A.reference_attention_lse)
    assert _rel(split, exact) < 1e-5
    assert _rel(reference_incontext_attention(q, k, v, prepare_reference(k_ref, v_ref), hw), exact) < 2e-2


def test_merge_of_two_key_sets_is_attention_over_their_union():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 40, 3, 16, generator=g)
    k, v = torch.randn(2, 70, 3, 16, generator=g) + 0.5, torch.randn(2, 70, 3, 16, generator=g)
    a, la = A.reference_attention_lse(q, k[:, :30], v[:, :30])
    b, lb = A.reference_attention_lse(q, k[:, 30:], v[:, 30:])
    full = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    assert _rel(A.merge_attention(a, la, b, lb), full) < 1e-5


def test_rope_fp32_matches_the_stock_complex128_rope(tiny):
    from diffusers.models.transformers.transformer_wan_animate_2 import rope_apply

    comps, geom = tiny
    tr = comps.transformer
    g = torch.Generator().manual_seed(2)
    grid = torch.tensor([[3, 4, 4]])
    freqs = tr._rope_freqs((0, 0, 0), torch.device("cpu")) if hasattr(tr, "_rope_freqs") else None
    if freqs is None or not torch.is_complex(freqs):
        pytest.skip("this diffusers version builds RoPE frequencies differently")
    x = torch.randn(1, 3 * 16 + 5, 2, tr.config.dim // tr.config.num_heads, generator=g)  # 5 padded tokens pass through
    for stride in (1, 2):
        assert _rel(WA.rope_fp32(x, grid, freqs, stride), rope_apply(x, grid, freqs, stride)) < 1e-6


def test_shapes_the_split_does_not_cover_fall_back_to_stock(tiny, monkeypatch):
    comps, geom = tiny
    x = _inputs(comps, geom, seed=3)
    small = D.geometry(geom.segment_frames, 48, 128)  # a narrower segment than the grid below: stock pads it
    blocks = comps.transformer.blocks
    stock = [b.self_attn.processor for b in blocks]
    monkeypatch.setattr(WA.Fp8Animate2AttnProcessor, "attend", lambda self, q, k, v: _exact(q, k, v))
    ours = WA.Fp8Animate2AttnProcessor()
    calls = []
    monkeypatch.setattr(ours, "_stock", lambda attn, hs, **kw: calls.append(kw["kv_cache_mode"]) or stock[0](attn, hs, **kw))
    blocks[0].self_attn.set_processor(ours)
    tr = comps.transformer
    try:
        with torch.no_grad():
            kv = D.extract_reference_kv(tr, x["driving"][..., :6], x["prompt_ref"], x["clip"], small)
            tr([x["latents"][..., :6]], timestep=torch.stack([torch.tensor(700.0)]), encoder_hidden_states=[x["prompt"][0]],
               condition_latents=[x["reference"][..., :6]], kv_cache=kv, kv_cache_mode="cached", seq_len=small.seq_len,
               reference_grid_sizes=small.grid_ref, origin_len=geom.segment_frames, origin_area=[geom.height, geom.width],
               encoder_hidden_states_image=x["image"])  # fmt: skip
    finally:
        blocks[0].self_attn.set_processor(stock[0])
    assert calls == ["cached"]


def test_fused_prep_hands_the_kernel_what_the_torch_path_computes(tiny, monkeypatch):
    """``prep="fused"`` (the GPU default) gives the raw projections, the norms' weights and
    epsilon, the RoPE angles, the reference, ``hw`` and the head count to
    ``prepared_incontext_attention``; here a float32 stand-in for it (the norms and RoPE in torch,
    then the same reference attention) must reproduce ``prep="torch"``'s forward. The kernels
    behind it are tested in tests/engine/accel/test_attention_prep.py."""
    from newsmotion_engine.accel.attention_prep import norm_rope_reference

    comps, geom = tiny
    x = _inputs(comps, geom, seed=2)
    blocks = comps.transformer.blocks
    stock = [b.self_attn.processor for b in blocks]
    calls = []

    def standin(q, k, v, wq, wk, eps, cos, sin, ref, hw, heads, variant=None):
        calls.append(variant)
        qr, kr = norm_rope_reference(q, wq, eps, cos, sin, heads), norm_rope_reference(k, wk, eps, cos, sin, heads)
        return reference_incontext_attention(qr, kr, v.unflatten(-1, (heads, -1)), ref, hw)

    monkeypatch.setattr(WA, "prep_supported", lambda q, variant: True)
    monkeypatch.setattr(WA, "prepared_incontext_attention", standin)
    try:
        outs = {}
        for prep in ("torch", "fused"):
            ours = _ours(monkeypatch, blocks)
            for p in ours:
                p.prep = prep
            outs[prep], _ = _run(comps, geom, x, "fp8")
            assert all(p.stats == {"incontext": 1, "fallback": 0} for p in ours)
    finally:
        for b, p in zip(blocks, stock):
            b.self_attn.set_processor(p)
    assert len(calls) == len(blocks) and set(calls) == {A.DEFAULT_FP8_VARIANT}
    # float32 throughout: only the norm's summation order differs (torch's RMSNorm module vs the stand-in)
    assert _rel(outs["fused"], outs["torch"]) < 1e-5, _rel(outs["fused"], outs["torch"])


def test_options_take_fp8_triton_and_refuse_the_other_kernels():
    from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2ConfigError

    opts = WanAnimate2Options.from_mapping({"preset": "tiny", "attention": "fp8-triton"})
    assert opts.has("attention")
    with pytest.raises(WanAnimate2ConfigError, match="only attention='fp8-triton'"):
        WanAnimate2Options.from_mapping({"preset": "tiny", "attention": "flash"})


def test_set_attention_installs_and_restores_the_animate2_processor(tiny, monkeypatch):
    comps, _ = tiny
    monkeypatch.setattr(A, "fp8_attention_supported", lambda: (True, ""))
    stock = [b.self_attn.processor for b in comps.transformer.blocks]
    report, previous = A.set_attention(comps.transformer, A.Attention(kernel="fp8-triton"))
    assert report["processor"] == "Fp8Animate2AttnProcessor"
    assert all(isinstance(b.self_attn.processor, WA.Fp8Animate2AttnProcessor) for b in comps.transformer.blocks)
    A.restore_attention(comps.transformer, previous)
    assert [b.self_attn.processor for b in comps.transformer.blocks] == stock


def test_compiled_blocks_do_not_recompile_across_forwards(tiny, monkeypatch):
    """Regional compile (dynamo, eager backend: the guards without inductor's compile time):
    after a warm-up, further cached forwards reuse the graphs. A counter bumped inside the
    processor once recompiled every block on every call."""
    import torch._dynamo

    from newsmotion_engine.render.backends.wan_animate_2.kv import quantize_cache

    comps, geom = tiny
    tr = comps.transformer
    x = _inputs(comps, geom, seed=4)
    stock = [b.self_attn.processor for b in tr.blocks]
    _ours(monkeypatch, tr.blocks)
    torch._dynamo.reset()
    try:
        tr.compile_repeated_blocks(backend="eager", dynamic=False)
        with torch.no_grad():
            kv = quantize_cache(D.extract_reference_kv(tr, x["driving"], x["prompt_ref"], x["clip"], geom))  # converted in the first step
            step = lambda t: D._forward(tr, x["latents"], torch.tensor(t), x["prompt"], x["reference"], kv, x["image"], geom, False, torch.float32)  # noqa: E731
            step(900.0), step(800.0)
            with torch._dynamo.config.patch(error_on_recompile=True):
                step(700.0), step(600.0)
    finally:
        from newsmotion_engine.accel.compile import uncompile_blocks

        uncompile_blocks(tr)
        for b, p in zip(tr.blocks, stock):
            b.self_attn.set_processor(p)



@pytest.mark.parametrize("kv_form", ["fp8", "kernel"])
def test_cudnn_processor_matches_the_stock_block_mask_within_fp8(tiny, monkeypatch, kv_form):
    """attention='fp8-cudnn': the cuDNN ops run their CPU kernels (the same FP8 arithmetic), the
    reference kept in the cuDNN form (per frame, smoothed, one scale) after its first use or
    stored so by the extract pass; dense + per-frame parts merged by log-sum-exp."""
    comps, geom = tiny
    x = _inputs(comps, geom)
    blocks = comps.transformer.blocks
    stock = [b.self_attn.processor for b in blocks]
    ref, _ = _run(comps, geom, x, "fp8")
    ours = [WA.CudnnAnimate2AttnProcessor() for _ in blocks]
    for b, p in zip(blocks, ours):
        b.self_attn.set_processor(p)
    try:
        (got, again), kv = _run(comps, geom, x, kv_form, forwards=2)
        # Without the reference attention the output moves further: the merge is doing its part.
        monkeypatch.setattr(WA, "cudnn_cached_attention", lambda q, k, v, r, hw: C.fp8_sdpa(q, k, v))
        (no_ref, _), _ = _run(comps, geom, x, kv_form, forwards=2)
    finally:
        for b, p in zip(blocks, stock):
            b.self_attn.set_processor(p)
    assert all(p.stats["incontext"] >= 2 and p.stats["fallback"] == 0 for p in ours), [p.stats for p in ours]
    assert _rel(got, ref) < 0.02, _rel(got, ref)  # FP8 Q/K/V/P throughout
    assert _rel(got, ref) < 0.5 * _rel(no_ref, ref), (_rel(got, ref), _rel(no_ref, ref))
    assert torch.equal(got, again)
    assert all(layer.prepared_for[-1] == WA.CUDNN_FORM for layer in kv.layer_caches)


def test_options_take_fp8_cudnn(tiny, monkeypatch):
    opts = WanAnimate2Options.from_mapping({"preset": "tiny", "attention": "fp8-cudnn"})
    assert opts.has("attention")
    comps, _ = tiny
    monkeypatch.setattr(C, "cudnn_fp8_supported", lambda device=None: (True, ""))
    stock = [b.self_attn.processor for b in comps.transformer.blocks]
    report, previous = A.set_attention(comps.transformer, A.Attention(kernel="fp8-cudnn"))
    assert report["processor"] == "CudnnAnimate2AttnProcessor"
    A.restore_attention(comps.transformer, previous)
    assert [b.self_attn.processor for b in comps.transformer.blocks] == stock
