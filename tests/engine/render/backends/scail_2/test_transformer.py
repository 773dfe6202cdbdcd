"""SCAIL-2's DiT against the official model: the official state-dict layout (written here from the
official module structure, zai-org/SCAIL-2 ``wan/modules/model_scail2.py``) loads through the key
map; the forward equals an independent functional re-statement of the official forward (complex
float64 RoPE, the official norms and token layout) in both modes; the RoPE tables; the released
14B config's parameter count and keys on the meta device."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
F = torch.nn.functional

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render.backends.scail_2.components import load_official_transformer  # noqa: E402
from newsmotion_engine.render.backends.scail_2.released import released_config, transformer_kwargs  # noqa: E402
from newsmotion_engine.render.backends.scail_2.transformer import SCAIL2Transformer3DModel, scail_rope  # noqa: E402

TINY = dict(dim=24, ffn_dim=32, freq_dim=32, in_dim=20, mask_dim=28, out_dim=16, num_heads=2, num_layers=2, text_len=512, eps=1e-6)
TEXT_DIM, IMAGE_DIM = 32, 1280  # the official tiny checkpoint of conftest.py

# ------------------------------------------------------------------ the official forward, restated
def _rope_freqs(d: int) -> list[torch.Tensor]:
    def params(n, dim):
        return torch.polar(torch.ones(n, dim // 2, dtype=torch.float64),
                           torch.outer(torch.arange(n, dtype=torch.float64), 1.0 / torch.pow(10000, torch.arange(0, dim, 2, dtype=torch.float64) / dim)))  # fmt: skip

    return [params(1024, d - 4 * (d // 6)), params(1024, 2 * (d // 6)), params(1024, 2 * (d // 6))]


def _rotate(x, freqs, f, h, w, t0, h0, w0, pool=False):
    n = x.shape[2]
    grid = torch.cat([freqs[0][t0 : t0 + f].view(f, 1, 1, -1).expand(f, h, w, -1),
                      freqs[1][h0 : h0 + h].view(1, h, 1, -1).expand(f, h, w, -1),
                      freqs[2][w0 : w0 + w].view(1, 1, w, -1).expand(f, h, w, -1)], dim=-1)  # fmt: skip
    if pool:  # the driving tokens: 2x2 averages of the real and imaginary parts
        re = F.avg_pool2d(grid.real.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1)
        im = F.avg_pool2d(grid.imag.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1)
        grid = torch.complex(re, im)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(1, x.shape[1], n, -1, 2))
    return torch.view_as_real(xc * grid.reshape(x.shape[1], 1, -1)).flatten(3).float()


def official_forward(sd, x, t, text, image, ref, ref_mask, pose, driving_mask, replace):
    """The official SCAIL2Model.forward for batch 1, written from its source with plain torch ops."""
    c, d, heads = TINY, TINY["dim"], TINY["num_heads"]
    W = lambda k: sd[k]  # noqa: E731
    lin = lambda v, k: F.linear(v, W(f"{k}.weight"), W(f"{k}.bias"))  # noqa: E731
    rms = lambda v, k: v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + c["eps"]) * W(f"{k}.weight")  # noqa: E731
    ln = lambda v: F.layer_norm(v, (d,), eps=c["eps"])  # noqa: E731
    conv = lambda v, k: F.conv3d(v, W(f"{k}.weight"), W(f"{k}.bias"), stride=(1, 2, 2))  # noqa: E731
    _, T, h, w = x.shape
    xx = torch.cat([torch.cat([ref, torch.ones(4, 1, h, w)])[None], torch.cat([x, torch.zeros(4, T, h, w)])[None]], dim=2)
    ref_masks = torch.cat([ref_mask, torch.zeros(28, T, h, w)], dim=1)[None]
    xx = conv(xx, "patch_embedding") + conv(ref_masks, "patch_embedding_mask")
    pe = conv(torch.cat([pose, torch.ones(4, T, h // 2, w // 2)])[None], "patch_embedding_pose") + conv(driving_mask[None], "patch_embedding_mask")
    seq = torch.cat([xx.flatten(2).transpose(1, 2), pe.flatten(2).transpose(1, 2)], dim=1)
    half = c["freq_dim"] // 2
    sinus = torch.outer(t.double(), torch.pow(10000, -torch.arange(half, dtype=torch.float64) / half))
    e = lin(F.silu(lin(torch.cat([torch.cos(sinus), torch.sin(sinus)], 1).float(), "time_embedding.0")), "time_embedding.2")
    e0 = lin(F.silu(e), "time_projection.1").unflatten(1, (6, d))
    ctx = lin(F.gelu(lin(text, "text_embedding.0"), approximate="tanh"), "text_embedding.2")
    im = F.layer_norm(image, (IMAGE_DIM,), W("img_emb.proj.0.weight"), W("img_emb.proj.0.bias"))
    im = lin(F.gelu(lin(im, "img_emb.proj.1")), "img_emb.proj.3")
    im = F.layer_norm(im, (d,), W("img_emb.proj.4.weight"), W("img_emb.proj.4.bias"))
    freqs = _rope_freqs(d // heads)
    rh, rw, tv = h // 2, w // 2, 0 if replace else 1

    def rope(v):
        r, n_ref, n_vid = v.shape[1], rh * rw, T * rh * rw
        return torch.cat([_rotate(v[:, :n_ref], freqs, 1, rh, rw, 0, 120 if replace else 0, 0),
                          _rotate(v[:, n_ref : n_ref + n_vid], freqs, T, rh, rw, tv, 0, 0),
                          _rotate(v[:, n_ref + n_vid : r], freqs, T, rh, rw, tv, 0, 120, pool=True)], dim=1)  # fmt: skip

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2).flatten(2)

    split = lambda v: v.unflatten(2, (heads, -1))  # noqa: E731
    for i in range(c["num_layers"]):
        b = f"blocks.{i}"
        m = (W(f"{b}.modulation") + e0).chunk(6, dim=1)
        y = ln(seq) * (1 + m[1]) + m[0]
        q, k, v = rms(lin(y, f"{b}.self_attn.q"), f"{b}.self_attn.norm_q"), rms(lin(y, f"{b}.self_attn.k"), f"{b}.self_attn.norm_k"), lin(y, f"{b}.self_attn.v")
        seq = seq + lin(attend(rope(split(q)), rope(split(k)), split(v)), f"{b}.self_attn.o") * m[2]
        y = F.layer_norm(seq, (d,), W(f"{b}.norm3.weight"), W(f"{b}.norm3.bias"), eps=c["eps"])
        q = split(rms(lin(y, f"{b}.cross_attn.q"), f"{b}.cross_attn.norm_q"))
        txt = attend(q, split(rms(lin(ctx, f"{b}.cross_attn.k"), f"{b}.cross_attn.norm_k")), split(lin(ctx, f"{b}.cross_attn.v")))
        img = attend(q, split(rms(lin(im, f"{b}.cross_attn.k_img"), f"{b}.cross_attn.norm_k_img")), split(lin(im, f"{b}.cross_attn.v_img")))
        seq = seq + lin(txt + img, f"{b}.cross_attn.o")
        y = ln(seq) * (1 + m[4]) + m[3]
        seq = seq + lin(F.gelu(lin(y, f"{b}.ffn.0"), approximate="tanh"), f"{b}.ffn.2") * m[5]
    shift, scale = (W("head.modulation") + e.unsqueeze(1)).chunk(2, dim=1)
    out = lin(ln(seq) * (1 + scale) + shift, "head.head")
    u = out[0, rh * rw : rh * rw * (1 + T)].view(T, rh, rw, 1, 2, 2, 16)
    return torch.einsum("fhwpqrc->cfphqwr", u).reshape(16, T, h, w)


def test_official_checkpoint_loads_through_the_key_map_and_matches_the_official_forward(tmp_path, official):
    sd = official.write(tmp_path / "transformer")
    model = load_official_transformer(tmp_path / "transformer", torch.float32, torch.device("cpu"))
    ours = dict(model.named_parameters())
    assert torch.equal(ours["blocks.1.attn2.add_k_proj.weight"], sd["blocks.1.cross_attn.k_img.weight"])
    assert torch.equal(ours["blocks.0.norm2.bias"], sd["blocks.0.norm3.bias"])  # the official affine cross-attn norm
    assert torch.equal(ours["scale_shift_table"], sd["head.modulation"])
    assert torch.equal(ours["condition_embedder.image_embedder.ff.net.2.weight"], sd["img_emb.proj.3.weight"])
    assert sum(p.numel() for p in ours.values()) == sum(v.numel() for v in sd.values())
    g = torch.Generator().manual_seed(1)
    T, h, w = 2, 8, 4
    x, ref = torch.randn(16, T, h, w, generator=g), torch.randn(16, 1, h, w, generator=g)
    pose = torch.randn(16, T, h // 2, w // 2, generator=g)
    ref_mask = (torch.rand(28, 1, h, w, generator=g) > 0.5).float()
    dmask = (torch.rand(28, T, h // 2, w // 2, generator=g) > 0.5).float()
    text, image = torch.randn(1, 512, TEXT_DIM, generator=g), torch.randn(1, 257, IMAGE_DIM, generator=g)
    t = torch.tensor([700.0])
    for replace in (False, True):
        with torch.no_grad():
            got = model(x[None], t, text=text, image=image, reference=ref[None], reference_mask=ref_mask[None], pose=pose[None],
                        driving_mask=dmask[None], replace=replace)[0]  # fmt: skip
            want = official_forward(sd, x, t, text, image, ref, ref_mask, pose, dmask, replace)
        assert got.shape == (16, T, h, w)
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_file(tmp_path, official):
    from safetensors.torch import save_file

    folder = tmp_path / "transformer"
    sd = official.write(folder)
    save_file({"blocks.0.self_attn.q.weight": torch.zeros(3, 3)}, str(folder / "model-00002-of-00002.safetensors"))
    with pytest.raises(BadInputError, match=r"model-00002-of-00002.safetensors.*shape \[3, 3\]"):
        load_official_transformer(folder, torch.float32, torch.device("cpu"))
    save_file({"blocks.0.extra.weight": torch.zeros(3)}, str(folder / "model-00002-of-00002.safetensors"))
    with pytest.raises(BadInputError, match="not a SCAIL-2 DiT parameter"):
        load_official_transformer(folder, torch.float32, torch.device("cpu"))
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(BadInputError, match="missing"):
        load_official_transformer(folder, torch.float32, torch.device("cpu"))
    assert sd


def test_rope_positions_per_mode():
    d, f, h, w = 12, 2, 4, 4  # head_dim 12: t 4 channels (2 pairs), h and w 4 each
    cos, sin = scail_rope(d, f, h, w, replace=False)
    n_ref, n_vid = h * w, f * h * w
    assert cos.shape == (1, n_ref + n_vid + f * (h // 2) * (w // 2), 1, d)
    angle = torch.atan2(sin[0, :, 0, 0::2], cos[0, :, 0, 0::2])  # one angle per channel pair
    inv_t = 1.0 / 10000 ** (torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    assert torch.allclose(angle[0, :2], torch.zeros(2), atol=1e-6)  # the reference at time 0
    assert torch.allclose(angle[n_ref, :2].double(), inv_t, atol=1e-6)  # animation: the video starts at time 1
    rc, rs = scail_rope(d, f, h, w, replace=True)
    r_angle = torch.atan2(rs[0, :, 0, 0::2], rc[0, :, 0, 0::2])
    assert torch.allclose(r_angle[n_ref, :2], torch.zeros(2), atol=1e-6)  # replacement: the video starts at time 0
    inv_h = 1.0 / 10000 ** (torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    want = torch.remainder(120 * inv_h + math.pi, 2 * math.pi) - math.pi
    assert torch.allclose(r_angle[0, 2:4].double(), want, atol=1e-5)  # the reference 120 rows down
    # A driving token: the mean of its 2x2 cell's unit rotations (columns shifted by 120).
    mag = (cos[0, n_ref + n_vid :, 0, 0::2] ** 2 + sin[0, n_ref + n_vid :, 0, 0::2] ** 2).sqrt()
    assert torch.allclose(mag[:, :2], torch.ones(1), atol=1e-6) and (mag[:, 4:] < 1).all()
    cols = torch.tensor([120.0, 121.0], dtype=torch.float64)[:, None] * inv_h
    want_w = torch.exp(1j * cols).mean(0)
    assert torch.allclose(cos[0, n_ref + n_vid, 0, 8::2].double(), want_w.real, atol=1e-6)
    assert torch.allclose(sin[0, n_ref + n_vid, 0, 9::2].double(), want_w.imag, atol=1e-6)


def test_released_14b_on_the_meta_device(official):
    c = released_config("transformer/config.json")
    assert c["_class_name"] == "WanSCAILModel" and "_source" in c
    with torch.device("meta"):
        model = SCAIL2Transformer3DModel(**transformer_kwargs())
    d, f, L = 5120, 13824, 40
    expected = (2 * (20 * 4 * d + d) + 28 * 4 * d + d  # the three patch embeddings
                + 256 * d + d + d * d + d + 6 * d * d + 6 * d  # time embedding, projection
                + 4096 * d + d + d * d + d  # text embedding
                + 2 * 1280 + 1280 * 1280 + 1280 + 1280 * d + d + 2 * d  # image projection
                + L * (10 * (d * d + d) + 5 * d + 2 * d + d * f + f + f * d + d + 6 * d)  # blocks
                + d * 64 + 64 + 2 * d)  # head  # fmt: skip
    count = sum(p.numel() for p in model.parameters())
    assert count == expected and round(count / 1e9, 1) == 16.4  # the model card's 16.4B
    from newsmotion_engine.render.backends.scail_2.transformer import official_to_ours

    shapes = {official_to_ours(k): v for k, v in official.shapes(c).items()}
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == shapes
    assert len(model.blocks) == 40 and model.blocks[0].attn1.heads == 40
