"""SCAIL-2's mask latents against hand-computed values of the official compression (threshold at
pixel 225, 7 colour indicators, area resize to the latent grid, first frame counted 4 times, 4
frames folded into the channels), and the driving clip's matte."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.guidance.driver import DRIVER_BACKGROUND  # noqa: E402
from newsmotion_engine.render.backends.scail_2.masks import driving_matte, mask_latents, white_mask  # noqa: E402


def test_white_person_in_one_frame_lands_in_its_channels():
    rgb = np.zeros((5, 16, 16, 3), np.uint8)  # 5 frames -> 2 latent frames of a 2x2 grid
    rgb[2, :8, :8] = 255  # frame 2: white top-left quarter = latent cell (0, 0)
    rgb[0, 8:, :] = (255, 0, 0)  # frame 0: red bottom half
    rgb[4, :, :4] = (230, 230, 0)  # frame 4: yellow left quarter, just above the threshold
    rgb[3, :, :] = (224, 224, 224)  # frame 3: grey at 224, below the threshold: off
    out = mask_latents(rgb).numpy()
    assert out.shape == (28, 2, 2, 2)
    want = np.zeros((28, 2, 2, 2), np.float32)
    for j in range(4):  # latent frame 0: frame 0 four times; red = colour 1
        want[j * 7 + 1, 0, 1, :] = 1.0
    want[1 * 7 + 0, 1, 0, 0] = 1.0  # latent frame 1 holds frames 1..4: frame 2 is sub-frame 1; white, cell (0, 0)
    want[3 * 7 + 4, 1, :, 0] = 0.5  # frame 4 (sub-frame 3), yellow, half of the left column's cells
    np.testing.assert_array_equal(out, want)


def test_driving_masks_are_resized_to_half_first():
    rgb = white_mask(np.full((1, 64, 32), 255, np.uint8))
    assert mask_latents(rgb).shape == (28, 1, 8, 4)
    assert mask_latents(rgb, half=True).shape == (28, 1, 4, 2)
    assert mask_latents(rgb, half=True)[:4].numpy().tolist() == mask_latents(rgb)[:4, :, ::2, ::2].numpy().tolist()
    with pytest.raises(ValueError, match="4k\\+1"):
        mask_latents(np.zeros((4, 16, 16, 3), np.uint8))


def test_white_mask_is_the_half_alpha_threshold():
    alpha = np.array([[0, 127, 128, 255]], np.uint8)
    assert white_mask(alpha)[..., 0].tolist() == [[0, 0, 255, 255]] and white_mask(alpha).shape == (1, 4, 3)


def test_a_driver_render_is_keyed_exactly_off_its_grey():
    frames = np.empty((2, 8, 8, 3), np.uint8)
    frames[:] = DRIVER_BACKGROUND
    frames[0, 2:4, 2:4] = (128, 128, 129)  # one level off the grey is the person
    clip = SimpleNamespace(frames=frames, origin="driver-render")
    matte = driving_matte(clip)
    assert matte.dtype == np.uint8 and matte.shape == (2, 8, 8)
    assert matte[0].sum() == 4 * 255 and matte[1].sum() == 0
