"""Optical flow and its geometry: DIS recovers a known translation, forward/backward consistency
marks what leaves the frame, the fixed-point solve finds where a pixel came from."""

import cv2
import numpy as np
import pytest

from newsmotion_engine.errors import InfillError
from newsmotion_engine.video.flow import FlowConfig, check_frame, estimate_flow, pixel_grid, source_points, visibility

H, W = 96, 128


def _texture(seed: int) -> np.ndarray:
    """A smooth random colour texture (band-limited, so the flow is well defined everywhere)."""
    noise = np.random.default_rng(seed).random((H, W, 3)).astype(np.float32)
    tex = cv2.GaussianBlur(noise, (0, 0), 2.0)
    return ((tex - tex.min()) / (tex.max() - tex.min()) * 255).astype(np.uint8)


def test_flow_matches_a_known_translation():
    a = _texture(4)
    b = np.roll(a, (-3, 5), axis=(0, 1))  # b(x + (5, -3)) = a(x)
    f = estimate_flow(a, b)
    inner = f[16:-16, 16:-16]
    assert f.shape == (H, W, 2) and f.dtype == np.float32
    assert np.abs(inner[..., 0] - 5.0).mean() < 0.2 and np.abs(inner[..., 1] + 3.0).mean() < 0.2
    half = estimate_flow(a, b, FlowConfig(downscale=2))[16:-16, 16:-16]
    assert np.abs(half[..., 0] - 5.0).mean() < 0.5


def test_visibility_of_consistent_flow_and_of_flow_leaving_the_frame():
    grid = pixel_grid(H, W)
    forward = np.zeros((H, W, 2), np.float32)
    forward[..., 0] = 4.0
    backward = -forward
    vis = visibility(forward, backward, grid, 0.01, 0.5)
    assert vis[:, : W - 4].min() > 0.99  # undone by the backward flow: visible
    assert vis[:, W - 3 :].max() == 0.0  # lands outside the frame
    # A backward flow that does not undo the forward one: occluded.
    assert visibility(forward, forward, grid, 0.01, 0.5)[:, : W - 8].max() < 0.01


def test_source_points_solve_the_fixed_point():
    grid = pixel_grid(H, W)
    flow = np.zeros((H, W, 2), np.float32)
    flow[..., 1] = 6.0
    p, residual = source_points(flow, 0.5, grid, 4)
    np.testing.assert_allclose(p[..., 1], grid[..., 1] - 3.0, atol=1e-5)
    assert residual.max() < 1e-5


def test_bad_frames_and_settings():
    with pytest.raises(InfillError, match="uint8"):
        check_frame("a", np.zeros((H, W, 3), np.float32))
    with pytest.raises(InfillError, match="8x8"):
        check_frame("a", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(InfillError, match="differ in shape"):
        estimate_flow(np.zeros((H, W, 3), np.uint8), np.zeros((H, W + 2, 3), np.uint8))
    with pytest.raises(InfillError, match="downscale"):
        FlowConfig(downscale=9)
