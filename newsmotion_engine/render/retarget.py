"""Retargeting: map a loop's persona-free keypoints onto one persona's body.

The loop says *how the body moves*; the persona says *what the body looks like at rest* (its
landmarks in the portrait). The result is the persona's rest pose moved the way the loop moves:

* the root (the neck, mid-shoulders) moves by the loop's neck motion, scaled by the ratio of the
  shoulder widths;
* every limb bone (neck->shoulder, shoulder->elbow->wrist, neck->hip, hip->knee->ankle) turns and
  stretches by the loop bone's rotation and length ratio *relative to the loop's own rest pose*,
  applied to the persona's bone (so bone lengths and rest directions stay the persona's);
* the head, each hand and each foot move as a group: a similarity transform (rotation, scale,
  shift about its anchor: neck, wrist, ankle) fitted between the loop's rest and current group,
  plus the loop's non-rigid residual (mouth, fingers) mapped into the persona's group frame.

So at the loop's rest frame the output equals the persona's landmarks exactly (a warp backend
then starts from the identity), and a loop whose rest equals the persona (up to scale) is
reproduced scaled. Parts the persona lacks (confidence 0, e.g. hands below the portrait edge)
are first completed from the loop's rest proportions, scaled by the shoulder-width ratio (or by
the group's own fit when the persona shows part of it).

All lengths are measured in pixels (normalized x times the canvas width, y times its height), so
a loop authored on a 720x1280 frame drives a persona on any canvas without aspect distortion.
The idea is the classic delta-based motion retargeting (M. Gleicher, "Retargetting motion to new
characters", SIGGRAPH 1998), reduced to 2-D rotations, handled here as complex numbers.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.skeleton import BODY, FACE_START, FEET, LEFT_HAND_START, NUM_KEYPOINTS, RIGHT_HAND_START

__all__ = ["retarget", "NECK", "LIMB_EDGES", "GROUPS"]

# A virtual 134th point: the neck, midway between the shoulders. The tree's root.
NECK = NUM_KEYPOINTS

# Limb bones (parent, child), parents before children.
LIMB_EDGES: tuple[tuple[int, int], ...] = (
    (NECK, BODY["left_shoulder"]),
    (NECK, BODY["right_shoulder"]),
    (BODY["left_shoulder"], BODY["left_elbow"]),
    (BODY["left_elbow"], BODY["left_wrist"]),
    (BODY["right_shoulder"], BODY["right_elbow"]),
    (BODY["right_elbow"], BODY["right_wrist"]),
    (NECK, BODY["left_hip"]),
    (NECK, BODY["right_hip"]),
    (BODY["left_hip"], BODY["left_knee"]),
    (BODY["left_knee"], BODY["left_ankle"]),
    (BODY["right_hip"], BODY["right_knee"]),
    (BODY["right_knee"], BODY["right_ankle"]),
)

# Rigid-ish groups: name -> (anchor, member indices).
GROUPS: dict[str, tuple[int, tuple[int, ...]]] = {
    "head": (NECK, tuple(range(0, 5)) + tuple(range(FACE_START, FACE_START + 68))),
    "left_hand": (BODY["left_wrist"], tuple(range(LEFT_HAND_START, LEFT_HAND_START + 21))),
    "right_hand": (BODY["right_wrist"], tuple(range(RIGHT_HAND_START, RIGHT_HAND_START + 21))),
    "left_foot": (BODY["left_ankle"], (FEET["left_big_toe"], FEET["left_small_toe"], FEET["left_heel"])),
    "right_foot": (BODY["right_ankle"], (FEET["right_big_toe"], FEET["right_small_toe"], FEET["right_heel"])),
}

# Bounds on a bone's length ratio against its rest length: foreshortening can shrink a bone a
# lot, but a ratio near 0 or far above 1 means a detection glitch, not motion.
_MIN_STRETCH, _MAX_STRETCH = 0.1, 3.0


def _to_complex(kp: np.ndarray, width: float, height: float) -> np.ndarray:
    """``[..., 133, 3]`` normalized -> ``[..., 134]`` complex pixels (neck appended)."""
    z = kp[..., 0].astype(np.float64) * width + 1j * (kp[..., 1].astype(np.float64) * height)
    neck = 0.5 * (z[..., BODY["left_shoulder"]] + z[..., BODY["right_shoulder"]])
    return np.concatenate([z, neck[..., None]], axis=-1)


def _confident(kp: np.ndarray, threshold: float) -> np.ndarray:
    """``[..., 134]`` bool, the neck confident when both shoulders are."""
    c = kp[..., 2] >= threshold
    neck = c[..., BODY["left_shoulder"]] & c[..., BODY["right_shoulder"]]
    return np.concatenate([c, neck[..., None]], axis=-1)


def _loop_rest(z: np.ndarray, ok: np.ndarray, rest: str | int) -> tuple[np.ndarray, np.ndarray]:
    """Per-point rest position of the loop ``[134]`` and whether it exists ``[134]``."""
    T = z.shape[0]
    if isinstance(rest, (int, np.integer)) and not isinstance(rest, bool):
        if not -T <= rest < T:
            raise NewsmotionError(f"retarget rest frame {rest} is outside the loop's {T} frames")
        return z[rest].copy(), ok[rest].copy()
    has = ok.any(axis=0)
    if rest == "first":
        # First frame where each point is confident: a point missing in frame 0 still gets a rest.
        first = np.argmax(ok, axis=0)
        return z[first, np.arange(z.shape[1])], has
    if rest == "mean":
        w = ok.astype(np.float64)
        n = np.maximum(w.sum(axis=0), 1.0)
        return (z * w).sum(axis=0) / n, has
    raise NewsmotionError(f"retarget rest {rest!r} is not 'first', 'mean' or a frame index")


def _fit_similarity(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least-squares similarity ``b ~ z * a + tau`` (complex ``z``: rotation and scale).

    ``a``, ``b``: ``[..., K]`` complex; ``w``: ``[..., K]`` weights (0 = ignore). Returns ``z``,
    ``tau`` and ``valid`` (at least 2 weighted points and a non-degenerate ``a``), each ``[...]``;
    where not valid, ``z = 1, tau = 0``.
    """
    n = (w > 0).sum(axis=-1)
    wsum = np.maximum(w.sum(axis=-1), 1e-12)
    ma = (w * a).sum(axis=-1) / wsum
    mb = (w * b).sum(axis=-1) / wsum
    A = a - ma[..., None]
    B = b - mb[..., None]
    den = (w * np.abs(A) ** 2).sum(axis=-1)
    num = (w * np.conj(A) * B).sum(axis=-1)
    valid = (n >= 2) & (den > 1e-9)
    z = np.where(valid, num / np.where(valid, den, 1.0), 1.0 + 0j)
    tau = np.where(valid, mb - z * ma, 0j)
    return z, tau, valid


def retarget(
    loop_kp: np.ndarray,
    persona_landmarks: np.ndarray,
    *,
    loop_size: tuple[int, int] = (720, 1280),
    persona_size: tuple[int, int] = (720, 1280),
    rest: Literal["first", "mean"] | int = "first",
    threshold: float = 0.3,
) -> np.ndarray:
    """Map loop keypoints onto a persona's proportions and rest pose.

    Args:
        loop_kp: float ``[T, 133, 3]``, the loop's keypoints normalized to its frame.
        persona_landmarks: float ``[133, 3]``, the persona's landmarks normalized to the portrait
            canvas (confidence 0 = not visible).
        loop_size: ``(width, height)`` in pixels of the frame the loop is normalized to.
        persona_size: ``(width, height)`` in pixels of the persona's canvas (the portrait).
        rest: the loop's rest pose the motion is measured against: ``"first"`` (each point's
            first confident frame; the canonical loops start at rest), ``"mean"``, or a frame index.
        threshold: confidence below which a point counts as absent.

    Returns:
        float32 ``[T, 133, 3]`` in the persona canvas' normalized coordinates. The confidence is
        the loop's (a point the loop lacks in a frame keeps a plausible position, confidence 0).

    Raises:
        NewsmotionError: the loop or the persona has no confident shoulders (nothing to anchor
            on), or bad shapes.

    Example::

        kp = retarget(guidance.keypoints, persona.landmarks,
                      persona_size=(persona.portrait.shape[1], persona.portrait.shape[0]))
    """
    loop_kp = np.asarray(loop_kp)
    pers = np.asarray(persona_landmarks)
    if loop_kp.ndim != 3 or loop_kp.shape[1:] != (NUM_KEYPOINTS, 3) or loop_kp.shape[0] < 1:
        raise NewsmotionError(f"loop keypoints have shape {loop_kp.shape}; expected [T, {NUM_KEYPOINTS}, 3]")
    if pers.shape != (NUM_KEYPOINTS, 3):
        raise NewsmotionError(f"persona landmarks have shape {pers.shape}; expected [{NUM_KEYPOINTS}, 3]")
    lw, lh = float(loop_size[0]), float(loop_size[1])
    pw, ph = float(persona_size[0]), float(persona_size[1])

    L = _to_complex(loop_kp, lw, lh)  # [T, 134]
    L_ok = _confident(loop_kp, threshold)  # [T, 134]
    Lr, Lr_ok = _loop_rest(L, L_ok, rest)  # [134]
    P = _to_complex(pers, pw, ph)  # [134]
    P_ok = _confident(pers, threshold)

    if not Lr_ok[NECK]:
        raise NewsmotionError("loop keypoints have no frame with both shoulders confident; cannot retarget")
    if not P_ok[NECK]:
        raise NewsmotionError(
            "persona landmarks lack confident shoulders; cannot anchor the retarget "
            "(re-normalize the portrait with the shoulders visible)"
        )
    ls, rs = BODY["left_shoulder"], BODY["right_shoulder"]
    loop_sw = abs(Lr[ls] - Lr[rs])
    pers_sw = abs(P[ls] - P[rs])
    if loop_sw < 1e-6 or pers_sw < 1e-6:
        raise NewsmotionError("shoulder width is zero in the loop's rest pose or the persona; cannot scale")
    scale = pers_sw / loop_sw

    # 1. Complete the persona's rest pose from the loop's rest proportions.
    Pc = P.copy()
    Pc_ok = P_ok.copy()
    for parent, child in LIMB_EDGES:
        if not Pc_ok[child]:
            if Lr_ok[child] and Lr_ok[parent]:
                Pc[child] = Pc[parent] + scale * (Lr[child] - Lr[parent])
            else:
                Pc[child] = Pc[parent]  # nowhere better to put it; it stays confidence 0
            Pc_ok[child] = True
    group_map: dict[str, complex] = {}  # loop-rest group frame -> persona group frame (complex)
    for name, (anchor, members) in GROUPS.items():
        idx = np.asarray(members)
        a = Lr[idx] - Lr[anchor]
        b = P[idx] - Pc[anchor]
        common = (Lr_ok[idx] & P_ok[idx]).astype(np.float64)
        z, tau, valid = _fit_similarity(a, b, common)
        if valid and int(common.sum()) >= 3:
            c, t = complex(z), complex(tau)
        else:
            c, t = complex(scale), 0j  # too little of the group visible to trust a fit
        group_map[name] = c
        fill = ~P_ok[idx]
        Pc[idx[fill]] = Pc[anchor] + c * a[fill] + t
        Pc_ok[idx] = True

    # 2. Move it the way the loop moves.
    T = L.shape[0]
    out = np.empty((T, NECK + 1), dtype=np.complex128)
    out[:, NECK] = Pc[NECK] + scale * np.where(L_ok[:, NECK], L[:, NECK] - Lr[NECK], 0)
    for parent, child in LIMB_EDGES:
        v_rest = Lr[child] - Lr[parent]
        v_now = L[:, child] - L[:, parent]
        ok = L_ok[:, child] & L_ok[:, parent] & Lr_ok[child] & Lr_ok[parent]
        pv = Pc[child] - Pc[parent]
        if abs(v_rest) > 1e-3 * loop_sw:
            ratio = v_now / v_rest
            mag = np.abs(ratio)
            ratio = ratio / np.maximum(mag, 1e-12) * np.clip(mag, _MIN_STRETCH, _MAX_STRETCH)
            v = pv * ratio
        else:
            v = scale * v_now  # a zero-length rest bone has no direction to turn
        out[:, child] = out[:, parent] + np.where(ok, v, pv)
    for name, (anchor, members) in GROUPS.items():
        idx = np.asarray(members)
        a = Lr[idx] - Lr[anchor]  # [K]
        b = L[:, idx] - L[:, anchor][:, None]  # [T, K]
        ok = L_ok[:, idx] & Lr_ok[idx][None, :] & L_ok[:, anchor][:, None]
        z, tau, valid = _fit_similarity(np.broadcast_to(a, b.shape), b, ok.astype(np.float64))
        resid = np.where(ok, b - (z[:, None] * a[None, :] + tau[:, None]), 0)
        c = group_map[name]
        rel_p = Pc[idx] - Pc[anchor]
        out[:, idx] = out[:, anchor][:, None] + z[:, None] * rel_p[None, :] + c * (tau[:, None] + resid)

    res = np.empty((T, NUM_KEYPOINTS, 3), dtype=np.float32)
    res[..., 0] = out[:, :NUM_KEYPOINTS].real / pw
    res[..., 1] = out[:, :NUM_KEYPOINTS].imag / ph
    res[..., 2] = loop_kp[..., 2]
    return res
