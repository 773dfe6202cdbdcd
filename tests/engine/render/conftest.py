"""Synthetic appearance + guidance fixtures for the render tests: a drawn waist-up figure whose
landmarks are placed by construction, and keypoint loops generated from a parametric pose.

Plain builder functions (``make_pose``, ``make_persona``, ``make_loop``) are importable by other
test folders (the bench test loads this file by path). The diffusion backends' tests share
``pair`` (a loop and a persona as loaded caches, with a folder and source metadata) and
``encoder_calls`` (counts of the VAE encoder, CLIP and text encoder runs)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from newsmotion_engine.skeleton import BODY, FACE_START, LEFT_HAND_START, NUM_KEYPOINTS, RIGHT_HAND_START


@dataclass
class FakeGuidance:
    loop_id: str
    keypoints: np.ndarray
    fps: int = 30

    @property
    def frames(self) -> int:
        return int(self.keypoints.shape[0])


@dataclass
class FakePersona:
    persona_id: str
    portrait: np.ndarray
    person_mask: np.ndarray
    face_mask: np.ndarray
    landmarks: np.ndarray


def _face68(cx: float, cy: float, fw: float, fh: float) -> np.ndarray:
    """An iBUG-68 face layout in pixels around centre (cx, cy), size fw x fh."""
    pts = []
    for i in range(17):  # jaw: the lower half of an ellipse, right ear -> chin -> left ear
        a = math.pi * (1 - i / 16)
        pts.append((cx - 0.5 * fw * math.cos(a), cy + 0.5 * fh * math.sin(a) * 0.9 + 0.05 * fh))
    for side in (-1, 1):  # brows (5 each): the person's right brow is on the image's left
        for i in range(5):
            pts.append((cx + side * (0.1 + 0.06 * i) * fw if side > 0 else cx - (0.34 - 0.06 * i) * fw, cy - 0.22 * fh))
    for i in range(4):  # nose bridge
        pts.append((cx, cy - 0.15 * fh + i * 0.07 * fh))
    for i in range(5):  # nose lower
        pts.append((cx + (i - 2) * 0.05 * fw, cy + 0.15 * fh))
    for side in (-1, 1):  # eyes (6 each)
        ex = cx + side * 0.2 * fw
        for i in range(6):
            a = 2 * math.pi * i / 6
            pts.append((ex + 0.08 * fw * math.cos(a), cy - 0.1 * fh + 0.03 * fh * math.sin(a)))
    for i in range(12):  # outer lip
        a = 2 * math.pi * i / 12
        pts.append((cx + 0.18 * fw * math.cos(a), cy + 0.3 * fh + 0.06 * fh * math.sin(a)))
    for i in range(8):  # inner lip
        a = 2 * math.pi * i / 8
        pts.append((cx + 0.1 * fw * math.cos(a), cy + 0.3 * fh + 0.03 * fh * math.sin(a)))
    assert len(pts) == 68
    return np.array(pts)


def make_pose(
    width: int,
    height: int,
    *,
    cx: float = 0.5,
    neck_y: float = 0.6,
    shoulder_half: float = 0.14,
    upper_arm: float = 0.16,
    forearm: float = 0.14,
    head: float = 0.09,
    hips_y: float = 0.97,
    hands: bool = True,
    arms: bool = True,
) -> np.ndarray:
    """A frontal waist-up rest pose ``[133, 3]`` normalized to a ``width`` x ``height`` frame.

    Lengths are fractions of the frame *width* (so they mean the same pixels horizontally and
    vertically). Arms hang down slightly outward. Legs and feet have confidence 0.
    """
    kp = np.zeros((NUM_KEYPOINTS, 3))
    W, H = float(width), float(height)
    nx, ny = cx * W, neck_y * H

    def put(i: int, x: float, y: float, c: float = 1.0) -> None:
        kp[i] = (x / W, y / H, c)

    sh = shoulder_half * W
    put(BODY["left_shoulder"], nx + sh, ny)
    put(BODY["right_shoulder"], nx - sh, ny)
    ua, fa = upper_arm * W, forearm * W
    for side, s, e, w, h0 in ((1, "left_shoulder", "left_elbow", "left_wrist", LEFT_HAND_START),
                              (-1, "right_shoulder", "right_elbow", "right_wrist", RIGHT_HAND_START)):  # fmt: skip
        sx = nx + side * sh
        ex, ey = sx + side * 0.15 * ua, ny + ua * 0.99
        wx, wy = ex + side * 0.05 * fa, ey + fa
        put(BODY[e], ex, ey, 1.0 if arms else 0.0)
        put(BODY[w], wx, wy, 1.0 if arms else 0.0)
        for j in range(21):  # a small fan of finger points below the wrist
            a = math.pi / 2 + (j - 10) * 0.06
            r = 0.0 if j == 0 else (0.2 + 0.8 * (j % 4 + 1) / 4) * 0.35 * fa
            put(h0 + j, wx + r * math.cos(a), wy + r * math.sin(a), 1.0 if (hands and arms) else 0.0)
    hs = head * W
    hx, hy = nx, ny - 1.3 * hs
    put(BODY["nose"], hx, hy)
    put(BODY["left_eye"], hx + 0.2 * hs, hy - 0.1 * hs)
    put(BODY["right_eye"], hx - 0.2 * hs, hy - 0.1 * hs)
    put(BODY["left_ear"], hx + 0.5 * hs, hy)
    put(BODY["right_ear"], hx - 0.5 * hs, hy)
    face = _face68(hx, hy, hs, 1.3 * hs)
    for i, (x, y) in enumerate(face):
        put(FACE_START + i, x, y)
    put(BODY["left_hip"], nx + 0.8 * sh, hips_y * H)
    put(BODY["right_hip"], nx - 0.8 * sh, hips_y * H)
    return kp.astype(np.float32)


def draw_figure(kp: np.ndarray, width: int, height: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Portrait (textured figure on a grey backdrop), person mask and face mask for ``kp``."""
    rng = np.random.default_rng(seed)
    W, H = width, height
    px = kp[:, :2] * (W, H)
    ok = kp[:, 2] > 0.3
    person = np.zeros((H, W), np.uint8)
    arms = np.zeros((H, W), np.uint8)
    face = np.zeros((H, W), np.uint8)
    ls, rs = px[BODY["left_shoulder"]], px[BODY["right_shoulder"]]
    lh, rh = px[BODY["left_hip"]], px[BODY["right_hip"]]
    arm_w = max(3, int(0.06 * W))
    inset = np.array([0.6 * arm_w, 0.0])
    torso = np.array([rs + inset, ls - inset, lh, rh], np.int32)
    cv2.fillPoly(person, [torso], 255)
    for a, b in ((5, 7), (7, 9), (6, 8), (8, 10)):
        if ok[a] and ok[b]:
            cv2.line(arms, tuple(map(int, px[a])), tuple(map(int, px[b])), 255, arm_w)
    hands = np.zeros((H, W), np.uint8)
    for w in (9, 10):
        if ok[w]:
            cv2.circle(hands, tuple(map(int, px[w])), arm_w, 255, -1)
    neck = (ls + rs) / 2
    nose = px[BODY["nose"]]
    hs = abs(px[BODY["left_ear"]][0] - px[BODY["right_ear"]][0])
    cv2.line(person, tuple(map(int, neck)), tuple(map(int, nose)), 255, max(3, int(0.5 * hs)))
    axes = (int(0.55 * hs), int(0.75 * hs))
    cv2.ellipse(face, (int(nose[0]), int(nose[1] - 0.1 * hs)), axes, 0, 0, 360, 255, -1)
    person = np.maximum.reduce([person, arms, hands, face])
    # Texture everywhere, so any motion changes pixels; distinct colours per region.
    tex = rng.integers(0, 60, (H, W, 3)).astype(np.int16)
    img = np.full((H, W, 3), 128, np.int16)
    img[person > 0] = (40, 60, 150)
    img[arms > 0] = (90, 30, 110)
    img[(face > 0) | (hands > 0)] = (220, 180, 150)
    img = np.clip(img + tex, 0, 255).astype(np.uint8)
    for e in (BODY["left_eye"], BODY["right_eye"]):
        cv2.circle(img, tuple(map(int, px[e])), max(1, int(0.08 * hs)), (20, 20, 20), -1)
    # Soft matte edge, as a real segmenter gives.
    person = cv2.GaussianBlur(person, (5, 5), 1.0)
    return img, person, face


def make_persona(width: int = 216, height: int = 384, persona_id: str = "synth", seed: int = 0, **pose) -> FakePersona:
    """A drawn persona on a ``width`` x ``height`` canvas; ``pose`` goes to :func:`make_pose`."""
    kp = make_pose(width, height, **pose)
    img, person, face = draw_figure(kp, width, height, seed)
    return FakePersona(persona_id, img, person, face, kp)


def make_loop(
    frames: int = 30,
    *,
    width: int = 720,
    height: int = 1280,
    wave: float = 0.6,
    nod: float = 0.08,
    sway: float = 0.01,
    loop_id: str = "synth_wave",
    **pose,
) -> FakeGuidance:
    """A seamless loop on a ``width`` x ``height`` frame: the right forearm swings up by up to
    ``wave`` radians, the head nods by ``nod`` radians, the neck sways by ``sway`` (x fraction).
    Frame 0 is the rest pose. Frame ``frames`` would equal frame 0."""
    rest = make_pose(width, height, shoulder_half=0.17, upper_arm=0.2, forearm=0.17, head=0.1, **pose)
    W, H = float(width), float(height)
    out = np.repeat(rest[None], frames, axis=0).astype(np.float64)
    rest_px = rest[:, :2] * (W, H)
    el, wr = BODY["right_elbow"], BODY["right_wrist"]
    neck = (rest_px[5] + rest_px[6]) / 2
    head_idx = np.r_[0:5, FACE_START : FACE_START + 68]
    hand_idx = np.r_[RIGHT_HAND_START : RIGHT_HAND_START + 21]
    for t in range(frames):
        ph = 0.5 - 0.5 * math.cos(2 * math.pi * t / frames)  # 0 at t=0, smooth, periodic
        p = rest_px.copy()
        # Forearm (and hand) rotate about the elbow, towards the body's centre line.
        a = wave * ph
        rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        moved = (p[np.r_[wr, hand_idx]] - p[el]) @ rot.T + p[el]
        p[np.r_[wr, hand_idx]] = moved
        # Head nod: rotate about the neck.
        b = nod * math.sin(2 * math.pi * t / frames)
        rotb = np.array([[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]])
        p[head_idx] = (p[head_idx] - neck) @ rotb.T + neck
        p[:, 0] += sway * W * math.sin(2 * math.pi * t / frames)
        out[t, :, :2] = p / (W, H)
    return FakeGuidance(loop_id, out.astype(np.float32))


@pytest.fixture
def persona() -> FakePersona:
    return make_persona()


@pytest.fixture
def loop() -> FakeGuidance:
    return make_loop()


@pytest.fixture
def synth():
    """The builder functions, for tests that need variants (conftest is not importable by name
    under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(make_pose=make_pose, make_persona=make_persona, make_loop=make_loop, draw_figure=draw_figure)


@dataclass(kw_only=True)
class CachedLoop(FakeGuidance):
    """A loop as a loaded guidance cache, as the diffusion backends read it: with its folder and
    source metadata (what their sub-caches live in and are keyed on)."""

    path: Path
    metadata: dict


@dataclass(kw_only=True)
class CachedPersona(FakePersona):
    """A persona as a loaded persona cache, with its folder and source metadata."""

    path: Path
    metadata: dict


@pytest.fixture
def pair(tmp_path) -> tuple[CachedLoop, CachedPersona]:
    """Loop ``nod`` (13 frames = 2 segments of 9 on the tiny presets, overlap 1, the last one partly
    used) and persona ``anna``, each in its own folder under ``tmp_path``."""
    p = make_persona(144, 256)
    g = make_loop(13)
    (tmp_path / "loop").mkdir()
    (tmp_path / "persona").mkdir()
    loop = CachedLoop("nod", g.keypoints, path=tmp_path / "loop", metadata={"source": {"kind": "authored", "sha256": "a" * 64}})
    persona = CachedPersona("anna", p.portrait, p.person_mask, p.face_mask, p.landmarks, path=tmp_path / "persona",
                            metadata={"source": {"kind": "image", "sha256": "b" * 64}})  # fmt: skip
    return loop, persona


class EncoderCounter:
    """Counts VAE-encoder, CLIP and text-encoder calls (patched on the classes) in ``calls``."""

    def __init__(self, monkeypatch):
        from diffusers import AutoencoderKLWan
        from transformers import CLIPVisionModel, UMT5EncoderModel

        self.calls = {"vae.encode": 0, "image_encoder": 0, "text_encoder": 0}
        for key, cls, attr in (("vae.encode", AutoencoderKLWan, "encode"), ("image_encoder", CLIPVisionModel, "forward"),
                               ("text_encoder", UMT5EncoderModel, "forward")):  # fmt: skip
            orig = getattr(cls, attr)

            def wrapped(self_, *a, _orig=orig, _key=key, **k):
                self.calls[_key] += 1
                return _orig(self_, *a, **k)

            monkeypatch.setattr(cls, attr, wrapped)


@pytest.fixture
def encoder_calls(monkeypatch) -> EncoderCounter:
    """An :class:`EncoderCounter` counting from the start of the test (loading a backend runs no encoder)."""
    return EncoderCounter(monkeypatch)
