"""Block-sparse attention: the layout's shape and density, the torch reference against the dense
one, the Triton kernel's sparse loop under Triton's CPU interpreter (density 1.0 is the dense
kernel bit for bit), and the registry wiring (dense steps from the cache context, removal)."""

from __future__ import annotations

import textwrap
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import attention as A  # noqa: E402
from newsmotion_engine.accel import sparse as SP  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError, apply_accelerations, remove_accelerations  # noqa: E402


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_layout_density_balance_and_forced_tiles():
    grid = (6, 8, 12)  # 576 tokens: 96 per frame; 16-token key tiles, 32-token query tiles
    dense = SP.block_layout(grid, 1.0, block_m=32, block_n=16)
    assert dense.density == 1.0 and dense.tile_mask().all()
    prev = 1.0
    for d in (0.75, 0.5, 0.25):
        lay = SP.block_layout(grid, d, block_m=32, block_n=16)
        m = lay.tile_mask()
        assert d <= lay.density < prev  # at least the asked fraction, fewer tiles as it drops
        prev = lay.density
        # Reference-frame queries (tokens 0..95 -> query tiles 0..2) are dense; every row keeps
        # the reference frame's key tiles (0..5) and its own frame's.
        assert m[:3].all()
        assert m[:, :6].all()
        for i in range(3, m.shape[0]):
            frame = (i * 32) // 96
            assert m[i, frame * 6:(frame + 1) * 6].all(), (d, i)
        # Balanced work: every non-reference row keeps the same number of tiles.
        assert len(set(m[3:].sum(1))) == 1
        # kv_idx rows are ascending tile numbers, as the kernel reads them.
        for i in range(len(lay.kv_cnt)):
            row = lay.kv_idx[i, : lay.kv_cnt[i]]
            assert (np.diff(row) > 0).all()


def test_layout_keeps_nearer_tiles_first():
    lay = SP.block_layout((8, 8, 8), 0.4, block_m=64, block_n=64, global_frames=1)  # one tile per frame
    m = lay.tile_mask()
    # Query frame 5 keeps the reference frame, itself, then its temporal neighbours.
    assert m[5, 0] and m[5, 5] and m[5, 4] and m[5, 6] and not m[5, 1]


def test_ragged_tail_tile_is_a_flag():
    lay = SP.block_layout((2, 5, 5), 1.0, block_m=16, block_n=16)  # 50 tokens: 3 full key tiles + 2
    assert lay.kv_idx.shape[1] == 3 and lay.kv_tail.all()
    assert lay.token_mask().shape == (50, 50) and lay.token_mask().all()


def test_reference_sparse_equals_dense_reference_at_density_one():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 96, 2, 64, generator=g) for _ in range(3))
    lay = SP.block_layout((4, 4, 6), 1.0, block_m=16, block_n=16)
    ref = A.reference_attention(q, k, v, "int8qk-fp8pv")
    assert torch.allclose(SP.reference_block_sparse_attention(q, k, v, lay, "int8qk-fp8pv"), ref)
    half = SP.reference_block_sparse_attention(q, k, v, SP.block_layout((4, 4, 6), 0.5, block_m=16, block_n=16), "int8qk-fp8pv")
    assert torch.isfinite(half).all() and _rel(half, ref) > 1e-3  # a real mask changes the output


def test_config_validation_and_flat_options():
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateConfigError, parse_accelerations

    for bad in (dict(density=0), dict(density=1.5), dict(density=True), dict(dense_steps=-1), dict(variant="fp4"),
                dict(temporal_scale=0)):  # fmt: skip
        with pytest.raises(AccelConfigError):
            SP.SparseAttention(**bad)
    assert parse_accelerations({"sparse_attention": 1.0}) == ()
    (cfg,) = parse_accelerations({"sparse_attention": 0.4, "sparse_dense_steps": 2})
    assert cfg == SP.SparseAttention(density=0.4, dense_steps=2)
    with pytest.raises(WanAnimateConfigError, match="sparse_attention=2"):
        parse_accelerations({"sparse_attention": 2})


def test_registry_wiring_dense_steps_and_removal():
    from newsmotion_engine.bench.gpu import forward_inputs
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
    cpu = torch.device("cpu")
    model = build_transformer(opts, cpu, torch.float32)
    comps = types.SimpleNamespace(transformer=model)
    inputs = forward_inputs(opts.preset_spec.transformer, 96, 64, 13, cpu, torch.float32)  # 5 x 4 x 6 tokens
    stock = [b.attn1.processor for b in model.blocks]
    for b in model.blocks:  # the dense reference: the kernel's arithmetic, every tile
        b.attn1.set_processor(SP.SparseSelfAttnProcessor(A.DEFAULT_FP8_VARIANT, SP.SparseStep(dense=True)))
    with torch.no_grad():
        dense = model(**inputs)[0]
    for b, p in zip(model.blocks, stock):
        b.attn1.set_processor(p)

    applied = apply_accelerations(comps, [SP.SparseAttention(density=0.3, dense_steps=1)])
    assert applied.report["sparse_attention"]["experimental"] is True
    step = applied.entries[0][1].state.step
    with torch.no_grad():
        with model.cache_context("cond", step_index=0, num_inference_steps=2):
            first = model(**inputs)[0]  # a dense step
        with model.cache_context("cond", step_index=1, num_inference_steps=2):
            later = model(**inputs)[0]  # a sparse step
    assert torch.allclose(first, dense, atol=1e-5)
    assert torch.isfinite(later).all() and _rel(later, dense) > 1e-4
    assert (step.forwards, step.sparse_forwards) == (2, 1)
    remove_accelerations(comps, applied)
    assert [b.attn1.processor for b in model.blocks] == stock
    from diffusers.hooks import HookRegistry

    assert SP.HOOK_NAME not in HookRegistry.check_if_exists_or_initialize(model).hooks


_INTERPRETED = textwrap.dedent(
    """
    import torch
    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import sparse as SP
    kernel = A._build_kernel(autotune=False)
    for grid in ((3, 4, 8), (5, 5, 5)):  # 96 tokens (no tail), 125 tokens (a ragged tail tile)
        S = grid[0] * grid[1] * grid[2]
        g = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(1, S, 2, 64, generator=g) for _ in range(3))
        x = A.quantize_attention_inputs(q, k, v, "int8qk-fp8pv")
        dense = A.launch_kernel(kernel, x, "int8qk-fp8pv", BLOCK_M=16, BLOCK_N=16)
        full = SP.block_layout(grid, 1.0, block_m=16, block_n=16)
        out = A.launch_kernel(kernel, x, "int8qk-fp8pv", sparse=tuple(torch.from_numpy(a) for a in (full.kv_idx, full.kv_cnt, full.kv_tail)),
                              BLOCK_M=16, BLOCK_N=16)
        assert torch.equal(out, dense), (grid, "density 1.0 must be the dense kernel")
        half = SP.block_layout(grid, 0.5, block_m=16, block_n=16)
        assert half.density < 0.9
        out = A.launch_kernel(kernel, x, "int8qk-fp8pv", sparse=tuple(torch.from_numpy(a) for a in (half.kv_idx, half.kv_cnt, half.kv_tail)),
                              BLOCK_M=16, BLOCK_N=16)
        ref = SP.reference_block_sparse_attention(q, k, v, half, "int8qk-fp8pv")
        err = float((out.float() - ref.float()).norm() / ref.float().norm())
        off = float((out.float() - dense.float()).norm() / dense.float().norm())
        print(grid, err, off)
        assert torch.isfinite(out).all() and err < 0.08 and off > 0.02, (grid, err, off)
    """
)


def test_sparse_kernel_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED)
