"""Context parallelism on the CPU (gloo): a 2-rank forward of the tiny Wan-Animate transformer
equals the 1-process forward — with the stock attention (diffusers' Ulysses path) and with our
FP8 processor's Ulysses path (its torch reference off-GPU); the face adapter's frame-local
processor is exact on a slice that starts mid-frame; clear errors without torchrun or with a
sequence that does not split."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel.context_parallel import ContextParallel, ContextParallelError, FrameLocalFaceProcessor  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError, apply_accelerations  # noqa: E402

# Parity tolerance: the ranks compute the same per-token arithmetic in another grouping (row
# slices of the same matmuls, per-frame instead of batched face attention); on this CPU it is
# bit-exact, 1e-5 leaves room for other BLAS builds.
TOL = 1e-5


def _tiny():
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    torch.manual_seed(0)
    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
    model = build_transformer(opts, torch.device("cpu"), torch.float32)
    return model, opts


_RANKS = textwrap.dedent(
    """
    import os, sys, types, torch, torch.distributed as dist
    from newsmotion_engine.accel import attention as A, sparse as SP
    from newsmotion_engine.accel.context_parallel import ContextParallel
    from newsmotion_engine.accel.registry import apply_accelerations, remove_accelerations
    from newsmotion_engine.bench.gpu import forward_inputs
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
    model = build_transformer(opts, torch.device("cpu"), torch.float32)
    # 96x64, 13 frames: 5 latent frames x 4 x 6 = 120 tokens; rank 1's slice starts mid-frame.
    inputs = forward_inputs(opts.preset_spec.transformer, 96, 64, 13, torch.device("cpu"), torch.float32)
    comps = types.SimpleNamespace(transformer=model)
    errs = {}
    for kind in ("stock", "fp8-reference"):
        if kind == "fp8-reference":  # our processor (dense steps -> the kernel's torch reference off-GPU)
            for b in model.blocks:
                b.attn1.set_processor(SP.SparseSelfAttnProcessor(A.DEFAULT_FP8_VARIANT, SP.SparseStep(dense=True)))
        with torch.no_grad():
            ref = model(**inputs)[0]
        applied = apply_accelerations(comps, [ContextParallel(world_size=dist.get_world_size())])
        seen = []
        h = model.blocks[1].register_forward_hook(lambda m, a, o: seen.append(o.shape[1]))
        with torch.no_grad():
            out = model(**inputs)[0]
        h.remove()
        assert seen == [120 // dist.get_world_size()], seen  # the tokens really are split
        remove_accelerations(comps, applied)
        with torch.no_grad():
            back = model(**inputs)[0]
        errs[kind] = (float((out - ref).norm() / ref.norm()), float((back - ref).norm() / ref.norm()))
    # 80x48, 13 frames: 5 x 3 x 5 = 75 tokens, which do not split across 2 ranks: one clear error.
    applied = apply_accelerations(comps, [ContextParallel(world_size=dist.get_world_size())])
    odd = forward_inputs(opts.preset_spec.transformer, 80, 48, 13, torch.device("cpu"), torch.float32)
    try:
        with torch.no_grad():
            model(**odd)
        raise SystemExit("an uneven split must fail")
    except Exception as exc:
        assert type(exc).__name__ == "ContextParallelError" and "do not split evenly" in str(exc), exc
    # One file per rank: two ranks printing to one pipe can interleave their lines.
    with open(os.path.join(os.environ["RESULT_DIR"], f"rank{dist.get_rank()}.txt"), "w") as f:
        f.write(repr(errs))
    dist.destroy_process_group()
    """
)


def test_two_ranks_match_one_process(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(_RANKS)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RESULT_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = sorted(tmp_path.glob("rank*.txt"))
    assert [r.name for r in rows] == ["rank0.txt", "rank1.txt"], proc.stdout
    for row in rows:
        errs = eval(row.read_text())  # noqa: S307 - our own written dict
        for kind, (parallel, removed) in errs.items():
            assert parallel < TOL and removed == 0.0, (kind, parallel, removed)


def test_frame_local_face_processor_is_the_stock_one_on_one_rank():
    from newsmotion_engine.bench.gpu import forward_inputs

    model, opts = _tiny()
    inputs = forward_inputs(opts.preset_spec.transformer, 96, 64, 13, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        ref = model(**inputs)[0]
        for adapter in model.face_adapter:
            adapter.set_processor(FrameLocalFaceProcessor())
        out = model(**inputs)[0]
    assert float((out - ref).norm() / ref.norm()) < TOL


def test_errors_are_clear():
    model, _ = _tiny()
    with pytest.raises(AccelConfigError):
        ContextParallel(world_size=0)
    assert apply_accelerations(types.SimpleNamespace(transformer=model), [ContextParallel(world_size=1)]).report == {
        "context_parallel": {"world_size": 1}
    }
    with pytest.raises(ContextParallelError, match="torchrun --nproc-per-node 2"):
        apply_accelerations(types.SimpleNamespace(transformer=model), [ContextParallel(world_size=2)])
