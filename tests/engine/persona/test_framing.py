"""Anchor framing: head top at 8-12% of the frame, shoulders centred, no upscale past the limit,
headshots, placing without an oversized intermediate, and a framing change making the cache stale."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.errors import CacheStaleError
from newsmotion_engine.persona import cache as pcache
from newsmotion_engine.persona import image as image_mod
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.image import (
    HEADROOM_RANGE,
    MAX_UPSCALE,
    FramingTargets,
    framing_placement,
    place_image,
    placement_for,
)

CW, CH = 720, 1280


def head_top_fraction(placement, targets) -> float:
    return (placement.offset_y + targets.head_top_y * placement.scale_y) / CH


def test_medium_puts_the_head_top_at_10_percent_and_the_shoulders_on_the_centre_line():
    targets = FramingTargets(head_top_y=20.0, centre_x=200.0)  # a waist-up photo, cut at its bottom
    placement, report = framing_placement("medium", 512, 512, targets)
    assert HEADROOM_RANGE[0] <= head_top_fraction(placement, targets) <= HEADROOM_RANGE[1]
    assert report["headroom"] == pytest.approx(0.10, abs=0.005) and report["limited_by"] is None
    assert placement.offset_x + targets.centre_x * placement.scale_x == pytest.approx(CW / 2, abs=1.0)
    assert placement.offset_y + placement.height == pytest.approx(CH, abs=1)  # the photo's cut on the bottom edge
    assert placement.scale_x <= MAX_UPSCALE


def test_a_small_photo_is_never_enlarged_past_the_limit_and_keeps_its_cut_on_the_bottom_edge():
    targets = FramingTargets(head_top_y=10.0, centre_x=100.0)
    placement, report = framing_placement("medium", 200, 200, targets)
    assert placement.scale_x == pytest.approx(MAX_UPSCALE, abs=0.01) and report["limited_by"] == "upscale"
    assert placement.offset_y + placement.height == CH  # no floating torso
    assert head_top_fraction(placement, targets) > HEADROOM_RANGE[1]  # so the head gets more room


def test_headshot_is_first_class():
    # Head and shoulders: no hips; the photo is taller than wide, the head near its top.
    targets = FramingTargets(head_top_y=30.0, centre_x=300.0, hips_y=None, neck_y=420.0)
    placement, report = framing_placement("medium", 600, 700, targets)
    assert HEADROOM_RANGE[0] <= head_top_fraction(placement, targets) <= HEADROOM_RANGE[1]
    assert placement.offset_x + 300.0 * placement.scale_x == pytest.approx(CW / 2, abs=1.0)
    assert placement.width > CW  # the sides are cropped in 9:16, as broadcast does


def test_medium_stops_below_the_hips_when_the_photo_shows_them():
    targets = FramingTargets(head_top_y=50.0, centre_x=500.0, hips_y=1000.0, neck_y=300.0)
    placement, _ = framing_placement("medium", 1000, 2000, targets)
    bottom = 1000.0 + image_mod.BELOW_HIPS * 700.0
    assert placement.offset_y + bottom * placement.scale_y == pytest.approx(CH, abs=1.5)
    assert head_top_fraction(placement, targets) == pytest.approx(0.10, abs=0.005)


def test_wide_keeps_the_whole_width_and_as_is_is_the_old_fit():
    targets = FramingTargets(head_top_y=20.0, centre_x=100.0)
    placement, report = framing_placement("wide", 512, 512, targets)
    assert placement.offset_x >= 0 and placement.offset_x + placement.width <= CW
    assert placement.offset_y + placement.height == CH
    as_is, report = framing_placement("as-is", 512, 512, targets)
    assert as_is == placement_for(512, 512) and report["mode"] == "as-is"
    assert framing_placement("medium", 512, 512, None)[1]["mode"] == "as-is"  # no head found
    with pytest.raises(ValueError, match="framing 'close-up' is not one of"):
        framing_placement("close-up", 512, 512, targets)


def test_place_image_crops_scales_and_zero_fills():
    image = np.zeros((100, 100), np.uint8)
    image[40:60, 40:60] = 255
    placement = image_mod.Placement(scale_x=2.0, scale_y=2.0, offset_x=-50, offset_y=1100, width=200, height=200)
    out = place_image(image, placement, fill="zero")
    assert out.shape == (CH, CW)
    # Source (50, 50) lands at canvas (50 * 2 - 50, 50 * 2 + 1100) = (50, 1200).
    assert out[1200, 50] == 255 and out[1100 + 30, 10] == 0
    assert out[:1100].max() == 0  # above the photo: zero, not ringing
    big = place_image(np.full((4000, 4000, 3), 7, np.uint8), image_mod.Placement(0.2, 0.2, 0, 480, 800, 800))
    assert big.shape == (CH, CW, 3) and big[1000, 300, 0] == 7


def test_astronaut_medium_shot_and_framing_change_is_stale(storage, astronaut_png):
    persona, built = ensure_persona(storage, "anchor", image=astronaut_png)
    framing = persona.metadata["framing"]
    assert built and framing["mode"] == "medium" and framing["head_top"] == "matte"
    assert HEADROOM_RANGE[0] <= framing["headroom"] <= HEADROOM_RANGE[1]
    assert persona.metadata["placement"]["scale_x"] <= MAX_UPSCALE
    person = np.asarray(persona.person_mask)
    rows = np.flatnonzero(person.max(axis=1) >= 128)
    assert HEADROOM_RANGE[0] * CH <= rows[0] <= HEADROOM_RANGE[1] * CH  # the hair's top row
    lm = np.asarray(persona.landmarks)
    mid = 0.5 * (lm[5, 0] + lm[6, 0]) * CW
    assert abs(mid - CW / 2) < 0.03 * CW  # shoulders centred
    # The framing is part of the params: another one makes the cache stale, and a rebuild without
    # a framing keeps the persona's own.
    with pytest.raises(CacheStaleError):
        pcache.load_persona(storage, "anchor", expected_params=pcache.persona_params("wide"))
    wide, built = ensure_persona(storage, "anchor", image=astronaut_png, framing="wide")
    assert built and wide.metadata["framing"]["mode"] == "wide"
    assert pcache.persona_framing(storage, "anchor") == "wide"
    again, built = ensure_persona(storage, "anchor", image=astronaut_png)
    assert not built and again.metadata["framing"]["mode"] == "wide"
