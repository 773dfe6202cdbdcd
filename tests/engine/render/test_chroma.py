"""The green screen for generated frames (render/chroma.py): the background becomes exactly the
key colour, the person's pixels survive, and the hook runs on every diffusion backend's frames."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from newsmotion_engine.render.chroma import chroma_composite, composite_frames

KEY = (0, 177, 64)
H, W = 160, 96


def _generated_like(seed: int = 0, green_patch: bool = False):
    """A textured 'person' (an ellipse with a head) over a shaded, noisy green, like a diffusion
    model paints behind a person conditioned on a green reference; returns (frame, person mask)."""
    rng = np.random.default_rng(seed)
    person = np.zeros((H, W), np.uint8)
    cv2.ellipse(person, (W // 2, 115), (34, 50), 0, 0, 360, 1, -1)
    cv2.circle(person, (W // 2, 45), 18, 1, -1)
    person = person.astype(bool)
    y = np.linspace(-1, 1, H)[:, None, None]
    bg = np.asarray(KEY, np.float64) + 16 * y * np.array([0.6, 1.0, 0.8]) + rng.normal(0, 5, (H, W, 3))
    skin = np.array([190, 120, 100], np.float64) + rng.normal(0, 12, (H, W, 3))
    frame = np.where(person[..., None], skin, bg)
    if green_patch:  # a green tie: key-coloured, but inside the person
        frame[95:130, W // 2 - 4 : W // 2 + 4] = KEY
    return np.clip(np.rint(frame), 0, 255).astype(np.uint8), person


def test_background_is_exactly_the_key_and_the_person_survives():
    frame, person = _generated_like()
    m = chroma_composite(frame, KEY)
    outside = ~cv2.dilate(person.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
    inside = cv2.erode(person.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
    assert (m.rgb[outside] == KEY).all()  # every background pixel keys exactly
    assert (m.alpha[outside] == 0).all() and (m.alpha[inside] == 255).all()
    np.testing.assert_array_equal(m.rgb[inside], frame[inside])  # person pixels untouched
    assert not (m.rgb == KEY).all(axis=-1)[inside].any()


def test_key_coloured_holes_inside_the_person_are_kept_and_specks_outside_dropped():
    frame, person = _generated_like(green_patch=True)
    frame[10:13, 10:13] = (250, 250, 250)  # a 9-pixel speck of noise far from the person
    m = chroma_composite(frame, KEY)
    assert (m.alpha[100:125, W // 2 - 2 : W // 2 + 2] == 255).all()  # the tie is part of the person
    assert (m.rgb[8:15, 8:15] == KEY).all()


def test_a_frame_with_no_key_colour_left_falls_back_to_the_key_itself():
    frame = np.full((H, W, 3), (120, 30, 200), np.uint8)  # a model that painted no green at all
    m = chroma_composite(frame, KEY)
    assert m.background == tuple(float(c) for c in KEY) and (m.alpha == 255).all()


def test_composite_frames_modes():
    frame, _ = _generated_like()
    (off,) = composite_frames([frame], KEY, "off")
    assert off is frame
    (on,) = composite_frames([frame], KEY)
    assert (on[0, 0] == KEY).all()
    with pytest.raises(ValueError, match="use one of matte, off"):
        list(composite_frames([frame], KEY, "blur"))


def test_every_diffusion_backend_output_is_composited(monkeypatch):
    """The hook in DiffusersBackend.frames: chroma='matte' (default) keys the raw frames, 'off' passes them."""
    from newsmotion_engine.render.base import RenderSpec
    from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend

    frame, _ = _generated_like()

    class Raw(DiffusersBackend):
        name = "raw"

        def load(self):
            pass

        def _frames(self, guidance, persona, keypoints, spec):
            yield frame

    class Opts:
        chroma = "matte"

    spec = RenderSpec(width=W, height=H)
    (keyed,) = Raw(Opts()).frames(None, None, np.zeros((1, 133, 3)), spec)
    assert (keyed[0, 0] == KEY).all()
    Opts.chroma = "off"
    (raw,) = Raw(Opts()).frames(None, None, np.zeros((1, 133, 3)), spec)
    assert raw is frame


def test_matte_workers_leave_two_cores_on_a_big_machine_and_use_what_a_small_one_has():
    from newsmotion_engine.render.chroma import matte_workers

    assert [matte_workers(c) for c in (1, 2, 4, 8, 16, 64)] == [1, 2, 2, 6, 14, 16]
