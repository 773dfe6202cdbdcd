"""CompileVae: it compiles the decoder's mid and up blocks of SVD's temporal decoder and the SD
VAE, removal makes them eager again, the Wan VAE and a VAE without those blocks are refused with
one line, the option parses for the UNet backends."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from diffusers import AutoencoderKL, AutoencoderKLTemporalDecoder, AutoencoderKLWan  # noqa: E402

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.compile_vae import CompileVae, decoder_blocks  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError  # noqa: E402


@dataclass
class _Comps:
    vae: torch.nn.Module


@pytest.mark.parametrize("make", [
    lambda: AutoencoderKLTemporalDecoder(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                                         layers_per_block=1),
    lambda: AutoencoderKL(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                          up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8),
])  # fmt: skip
def test_it_compiles_the_decoder_blocks_and_removal_undoes_it(make):
    vae = make()
    applied = registry.apply_accelerations(_Comps(vae), (CompileVae(),))
    blocks = decoder_blocks(vae)
    assert applied.report["compile_vae"]["blocks"] == len(blocks) == 1 + len(vae.decoder.up_blocks)
    assert all(b._compiled_call_impl is not None for b in blocks)
    registry.remove_accelerations(_Comps(vae), applied)
    assert all(b._compiled_call_impl is None for b in blocks)


def test_the_wan_vae_and_a_module_without_decoder_blocks_are_refused():
    wan = AutoencoderKLWan(base_dim=16, z_dim=4, dim_mult=[1, 2], num_res_blocks=1, temperal_downsample=[False])
    with pytest.raises(AccelConfigError, match="causal frame cache"):
        registry.apply_accelerations(_Comps(wan), (CompileVae(),))
    with pytest.raises(AccelConfigError, match="no decoder.mid_block"):
        registry.apply_accelerations(_Comps(torch.nn.Linear(2, 2)), (CompileVae(),))
    with pytest.raises(AccelConfigError, match="no module 'decoder_vae'"):
        registry.apply_accelerations(_Comps(wan), (CompileVae(component="decoder_vae"),))


@pytest.mark.parametrize("backend", ["mimicmotion", "champ"])
def test_the_option_parses_for_the_unet_backends(backend):
    import importlib

    config = importlib.import_module(f"newsmotion_engine.render.backends.{backend}.config")
    assert "compile_vae" in config.ACCELERATION_KEYS
    from newsmotion_engine.render.backends.wan.diffusers_config import parse_accelerations

    class _Err(Exception):
        pass

    assert [c.technique for c in parse_accelerations({"compile_vae": True, "compile": "blocks"}, backend=backend, error=_Err)] \
        == ["compile_vae", "compile"]  # fmt: skip


@pytest.mark.parametrize("backend, options", [
    ("wan_animate_2", "WanAnimate2Options"), ("echomimic_v3", "EchoMimicV3Options"), ("scail_2", "Scail2Options"),
])  # fmt: skip
def test_the_wan_backends_refuse_it_when_the_options_are_read(backend, options):
    """Before any weights load: the Wan VAE would recompile every call."""
    import importlib

    from newsmotion_engine.render.base import BackendOptionError

    cls = getattr(importlib.import_module(f"newsmotion_engine.render.backends.{backend}.config"), options)
    with pytest.raises(BackendOptionError, match="causal frame cache"):
        cls.from_mapping({"preset": "tiny", "compile_vae": True})
