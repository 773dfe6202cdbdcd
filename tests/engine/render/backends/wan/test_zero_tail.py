"""The continuation encode that skips what the zero frames alone make (render/backends/wan/zero_tail.py):
the same latents as the plain encode, fewer encoder calls, the released encoder's plan, the
fallbacks, and the VAE left as it was."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers import AutoencoderKLWan  # noqa: E402

from newsmotion_engine.render.backends.wan.encoders import vae_encode  # noqa: E402
from newsmotion_engine.render.backends.wan.released import released_config  # noqa: E402
from newsmotion_engine.render.backends.wan.zero_tail import encode_then_zeros, released_encodes, steady_plan  # noqa: E402


def _vae(**kw) -> AutoencoderKLWan:
    torch.manual_seed(0)
    return AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=2,
                            temperal_downsample=[False, True, True], **kw).eval()  # fmt: skip


def _plain(vae, head, frames):
    b, c, n, h, w = head.shape
    return vae_encode(vae, torch.cat([head, torch.zeros(b, c, frames - n, h, w)], dim=2), "cpu")


def _head(n=1, h=32, w=48, seed=1):
    return torch.rand(1, 3, n, h, w, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.mark.parametrize(("frames", "n"), [(33, 1), (29, 5)])
def test_it_gives_the_plain_encodes_latents_with_fewer_calls(frames, n):
    vae = _vae()
    stats: dict[str, int] = {}
    out = encode_then_zeros(vae, _head(n), frames, "cpu", stats=stats)
    assert torch.equal(out, _plain(vae, _head(n), frames))  # bit for bit on the CPU
    assert stats["skipped"] > 0 and stats["computed"] > 0
    # A second clip's head: the kept frames serve from the first steady call on, same latents.
    again: dict[str, int] = {}
    other = encode_then_zeros(vae, _head(n, seed=2), frames, "cpu", stats=again)
    assert torch.equal(other, _plain(vae, _head(n, seed=2), frames))
    assert again["skipped"] > stats["skipped"] and again["computed"] < stats["computed"]


def test_with_the_vae_accelerations_ours_loads():
    """Channels-last weights and the folded causal padding (their own instance forwards on the
    convolutions): the same latents, and those forwards still in place after."""
    from newsmotion_engine.accel.causal_pad import set_causal_pad_fold
    from newsmotion_engine.accel.memory_format import set_conv_format

    vae = _vae()
    set_conv_format(vae, True)
    assert set_causal_pad_fold(vae, True) > 0
    folded = vae.encoder.conv_in.forward
    for seed in (1, 2):  # the first call keeps the steady frames, the second reuses them
        stats: dict[str, int] = {}
        out = encode_then_zeros(vae, _head(seed=seed), 33, "cpu", stats=stats)
        assert torch.allclose(out, _plain(vae, _head(seed=seed), 33), rtol=0, atol=1e-5)
        assert stats["skipped"] > 0
    assert vae.encoder.conv_in.forward == folded


def test_the_released_encoders_plan_keeps_every_latent_dependent_on_the_head():
    config = {k: v for k, v in released_config("wan-animate-2", "vae/config.json").items() if not k.startswith("_")}
    with torch.device("meta"):  # the plan reads the config and the module layout only
        vae = AutoencoderKLWan(**config)
    plans = {p.name: p for p in steady_plan(vae, 81, 1)}
    assert all(len(p.frames) == 21 for p in plans.values())  # 1 frame, then 20 chunks of 4
    # The full-resolution units leave the head's reach after a few chunks ...
    assert plans["conv_in"].first_steady == 2
    assert plans["down_blocks.0"].first_steady == 3 and plans["down_blocks.1"].first_steady == 4
    # ... the deeper ones later, and the mid block and conv_out never: every latent depends on it.
    firsts = [p.first_steady for p in plans.values()]
    assert firsts == sorted(firsts)
    assert plans["mid_block"].steady_calls == 0 and plans["conv_out"].steady_calls == 0


@pytest.mark.parametrize("width", [4, 16])
def test_the_plan_does_not_depend_on_the_probes_width(width, monkeypatch):
    """Which calls the head reaches is a property of the layers' temporal reach: the probe at
    another channel width marks the same calls of the released encoder."""
    from newsmotion_engine.render.backends.wan import zero_tail

    config = {k: v for k, v in released_config("wan-animate-2", "vae/config.json").items() if not k.startswith("_")}
    with torch.device("meta"):
        vae = AutoencoderKLWan(**config)
    default = steady_plan(vae, 81, 1)
    monkeypatch.setattr(zero_tail, "_PROBE_BASE_DIM", width)
    zero_tail._probe.cache_clear()
    try:
        assert steady_plan(vae, 81, 1) == default
    finally:
        zero_tail._probe.cache_clear()


def test_a_different_size_is_kept_apart():
    vae = _vae()
    encode_then_zeros(vae, _head(), 33, "cpu")
    stats: dict[str, int] = {}
    out = encode_then_zeros(vae, _head(h=16, w=32), 33, "cpu", stats=stats)
    assert torch.equal(out, _plain(vae, _head(h=16, w=32), 33))


def test_tiling_falls_back_to_the_plain_encode():
    vae = _vae()
    vae.enable_tiling(tile_sample_min_height=16, tile_sample_min_width=16, tile_sample_stride_height=16, tile_sample_stride_width=16)
    stats: dict[str, int] = {}
    out = encode_then_zeros(vae, _head(), 33, "cpu", stats=stats)
    assert stats == {"computed": 0, "skipped": 0}
    assert torch.equal(out, _plain(vae, _head(), 33))


def test_inside_released_encodes_every_encode_is_plain_even_on_another_thread():
    """A bench's stock side: the encode as released, also where the render encodes on a worker."""
    from concurrent.futures import ThreadPoolExecutor

    vae = _vae()
    stats: dict[str, int] = {}
    with released_encodes(), ThreadPoolExecutor(1) as pool:
        out = pool.submit(encode_then_zeros, vae, _head(), 33, "cpu", stats=stats).result()
    assert stats == {"computed": 0, "skipped": 0} and torch.equal(out, _plain(vae, _head(), 33))
    after: dict[str, int] = {}
    encode_then_zeros(vae, _head(), 33, "cpu", stats=after)
    assert after["skipped"] > 0  # closed: the skipping encode again


def test_the_units_forwards_are_put_back():
    vae = _vae()

    def own(x, cache_x=None):  # another acceleration's instance forward on conv_in
        return type(vae.encoder.conv_in).forward(vae.encoder.conv_in, x, cache_x)

    vae.encoder.conv_in.forward = own
    encode_then_zeros(vae, _head(), 33, "cpu")
    assert vae.encoder.conv_in.forward is own
    assert all("forward" not in vars(m) for m in [*vae.encoder.down_blocks, vae.encoder.mid_block, vae.encoder.conv_out])


def test_no_zero_frames_means_no_plan():
    assert steady_plan(_vae(), 5, 5) is None
    vae, stats = _vae(), {}
    out = encode_then_zeros(vae, _head(5), 5, "cpu", stats=stats)  # a head as long as the segment: the plain encode
    assert stats == {"computed": 0, "skipped": 0} and torch.equal(out, vae_encode(vae, _head(5), "cpu"))
