"""Landmarks of a still portrait: points guessed outside the photo are "not visible" (headshots
validate in the CLI and the asset check alike), and sideways photos are turned upright.

The builds run mediapipe on CPU (~1-2 s each): one headshot, the sample rotated both ways."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from newsmotion_engine.persona import landmarks as L
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.cache import load_persona, persona_problems, persona_status
from newsmotion_engine.samples import astronaut_rgb
from newsmotion_engine.skeleton import BODY, FACE_START, LEFT_HAND_START, NUM_KEYPOINTS

H, W = 1280, 720
# A 720x720 block at the canvas bottom (a square photo), as normalized canvas bounds.
SQUARE = L.block_bounds(0, 560, 720, 720, (W, H))


def _points(**where: tuple[float, float, float]) -> np.ndarray:
    lm = np.zeros((NUM_KEYPOINTS, 3), np.float32)
    for name, value in where.items():
        lm[BODY[name]] = value
    return lm


# --- out of view: synthetic landmarks ---------------------------------------------------------------


def test_body_points_outside_the_block_are_out_of_view():
    lm = _points(nose=(0.5, 0.6, 1.0), left_hip=(0.5, 1.6, 0.4), right_wrist=(-0.3, 0.8, 0.9),
                 left_shoulder=(0.5, 1.01, 0.9))  # fmt: skip
    gone = L.out_of_view(lm, SQUARE)
    assert gone[BODY["left_hip"]] and gone[BODY["right_wrist"]]
    # Inside, or just past the edge (within the margin), stays; absent points are never "out".
    assert not gone[BODY["nose"]] and not gone[BODY["left_shoulder"]] and not gone[BODY["right_hip"]]
    # Above the block is the canvas fill, not the photo: out of view too.
    assert L.out_of_view(_points(nose=(0.5, 0.3, 1.0)), SQUARE)[BODY["nose"]]


def test_face_and_hands_are_judged_as_a_whole():
    lm = np.zeros((NUM_KEYPOINTS, 3), np.float32)
    face = slice(FACE_START, FACE_START + 68)
    lm[face, 0] = np.linspace(0.4, 0.6, 68)
    lm[face, 1] = np.linspace(0.43, 0.5, 68)  # a face cut by the block's top edge (0.4375)
    lm[face, 2] = 0.9
    hand = slice(LEFT_HAND_START, LEFT_HAND_START + 21)
    lm[hand] = (0.5, 1.3, 0.9)  # a hand below the canvas
    gone = L.out_of_view(lm, SQUARE)
    assert not gone[face].any() and gone[hand].all()
    cleaned, names = L.drop_out_of_view(lm, SQUARE)
    assert names == ["left_hand"]
    assert (cleaned[hand] == 0).all() and np.array_equal(cleaned[face], lm[face])


# --- which way is up: synthetic landmarks -------------------------------------------------------


def _upright_body() -> np.ndarray:
    return _points(nose=(0.5, 0.3, 1), left_eye=(0.55, 0.25, 1), right_eye=(0.45, 0.25, 1),
                   left_shoulder=(0.7, 0.6, 1), right_shoulder=(0.3, 0.6, 1))  # fmt: skip


def _rot90_points(lm: np.ndarray, k: int) -> np.ndarray:
    """Landmarks of a square image after ``np.rot90(image, k)`` (counter-clockwise turns)."""
    out = lm.copy()
    for _ in range(k % 4):
        x, y = out[:, 0].copy(), out[:, 1].copy()
        out[:, 0], out[:, 1] = y, 1.0 - x
    return out


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_upright_turns_undoes_a_quarter_rotation(k):
    rotated = _rot90_points(_upright_body(), k)
    turns = L.upright_turns(rotated, 100, 100)
    assert (k + turns) % 4 == 0
    assert L.upright_turns(_rot90_points(rotated, turns), 100, 100) == 0


def test_upright_turns_leaves_diagonal_and_unknown_alone():
    lm = _upright_body()
    lm[[BODY["nose"], BODY["left_eye"], BODY["right_eye"]], 0] += 0.3  # head 45 degrees to the side
    assert L.upright_turns(lm, 100, 100) == 0
    assert L.upright_turns(np.zeros((NUM_KEYPOINTS, 3), np.float32), 100, 100) == 0
    assert L.describe_turns(1) == "rotated 90° clockwise"


# --- a headshot: builds, validates clean in the CLI status and in the asset check ---------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("photos")
    rgb = astronaut_rgb()
    paths = {}
    for name, image in {
        "upright": rgb,
        "headshot": rgb[: int(0.45 * rgb.shape[0])],  # head and shoulders, cut above the chest
        "tight": rgb[0:260, 60:320],  # square head-and-shoulders: mediapipe puts the feet at y = 2.2
        "clockwise": np.rot90(rgb, -1),  # the photo turned 90 degrees clockwise, no EXIF tag
        "counterclockwise": np.rot90(rgb, 1),
    }.items():
        paths[name] = folder / f"{name}.png"
        Image.fromarray(np.ascontiguousarray(image)).save(paths[name])
    return paths


@pytest.mark.parametrize("name", ["headshot", "tight"])
def test_headshot_builds_and_validates_in_every_path(photos, name, storage):
    import dagster as dg

    from newsmotion_assets.assets.persona import persona_cache
    from newsmotion_assets.checks import persona_cache_valid
    from newsmotion_assets.partitions import persona_partitions
    from newsmotion_assets.resources import StorageResource
    from newsmotion_engine.persona.sources import install_source

    install_source(storage, photos[name], name)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, [name])
        result = dg.materialize(
            [persona_cache, persona_cache_valid], partition_key=name, instance=instance, resources={"storage": StorageResource()}
        )
        (check,) = result.get_asset_check_evaluations()
        assert check.passed, check.metadata
    cache = load_persona(storage, name)
    assert persona_problems(cache) == [] and persona_status(storage, name)[0] == "valid"
    assert {"body", "face"} <= set(cache.visible_parts)
    lm = np.asarray(cache.landmarks)
    # The hips and feet mediapipe guessed below the photo are stored as not visible.
    for point in ("left_hip", "right_hip", "left_ankle", "right_ankle"):
        assert point in cache.metadata["out_of_view"] and lm[BODY[point], 2] == 0
    present = lm[:, 2] > 0
    assert (lm[present, 1] <= 1.0 + L.VIEW_MARGIN).all()
    assert lm[BODY["nose"], 2] > 0.5 and lm[BODY["left_shoulder"], 2] > 0.5


def test_cache_with_out_of_view_landmarks_is_invalid_everywhere(photos, storage):
    """A cache holding a visible landmark far outside the photo (what persona version 1 wrote for
    headshots: a hip at y = 2.06) shows "invalid (...)" in the CLI status and fails the asset
    check with the same problem text: both run persona_problems."""
    import dagster as dg

    from newsmotion_assets.assets.persona import persona_cache
    from newsmotion_assets.checks import persona_cache_valid
    from newsmotion_assets.partitions import persona_partitions
    from newsmotion_assets.resources import StorageResource
    from newsmotion_engine.cachedir import sha256_file
    from newsmotion_engine.persona.sources import install_source

    install_source(storage, photos["headshot"], "old")
    ensure_persona(storage, "old", image=photos["headshot"])
    path = storage.persona_dir("old") / "landmarks.npy"
    lm = np.load(path)
    lm[BODY["left_hip"]] = (0.4, 2.06, 0.4)
    np.save(path, lm)  # same size: the cheap load still accepts it, the asset reuses it
    meta_path = path.parent / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["files"]["landmarks.npy"]["sha256"] = sha256_file(path)
    meta_path.write_text(json.dumps(meta))

    status, _, detail = persona_status(storage, "old")
    assert status == "invalid" and "outside the portrait but are marked visible" in detail
    assert "far outside the canvas" in detail
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["old"])
        result = dg.materialize(
            [persona_cache, persona_cache_valid],
            partition_key="old",
            instance=instance,
            resources={"storage": StorageResource()},  # root: $NEWSMOTION_STORAGE, the test's own folder
            raise_on_error=False,
        )
        (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.metadata["problems"].value == detail


# --- sideways photos: turned upright ---------------------------------------------------------


@pytest.mark.parametrize("name, turned", [("clockwise", 90), ("counterclockwise", 270)])
def test_sideways_photo_is_turned_upright(photos, name, turned, storage):
    upright, _ = ensure_persona(storage, "upright", image=photos["upright"])
    sideways, _ = ensure_persona(storage, name, image=photos[name])
    assert sideways.metadata["source_image"]["upright_rotation_ccw"] == turned
    assert upright.metadata["source_image"]["upright_rotation_ccw"] == 0
    # A quarter turn of a square photo is lossless: the same canvas, the same person.
    np.testing.assert_array_equal(np.asarray(sideways.portrait), np.asarray(upright.portrait))
    assert sideways.metadata["source_size"] == upright.metadata["source_size"]
    nose, shoulder = sideways.landmarks[BODY["nose"]], sideways.landmarks[BODY["left_shoulder"]]
    assert nose[1] < shoulder[1]  # the head is above the shoulders
    lm_a, lm_b = np.asarray(sideways.landmarks), np.asarray(upright.landmarks)
    both = (lm_a[:17, 2] > 0.5) & (lm_b[:17, 2] > 0.5)
    assert both.sum() >= 5 and np.abs(lm_a[:17][both, :2] - lm_b[:17][both, :2]).max() < 0.02
    assert persona_problems(sideways) == []
