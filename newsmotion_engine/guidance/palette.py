"""The canonical motion-loop palette, authored procedurally in the canonical skeleton.

Seven loops (``LOOP_IDS``): welcome, breaking_alert, left_gesture, right_gesture, deep_thought,
nod, signoff. Each is a deterministic, seamless whole-body pose sequence (float32 ``[T, 133, 3]``,
see :mod:`newsmotion_engine.skeleton`) of a waist-up news anchor framed in a 720x1280 portrait
frame, 4 s at 30 fps by default.

How a loop is made:

1. A small rig of pose parameters (torso lean/sway/turn, shoulder shrug, per side: upper-arm,
   forearm and hand angles with foreshortening, palm facing, finger curls; head yaw/pitch/roll,
   mouth, smile, brows, blink). ``REST`` is the anchor's neutral pose: upright, hands resting
   together in front of the waist.
2. Keyframes per loop at loop phases in [0, 1). Each parameter is interpolated through the keys
   that mention it with a *periodic* monotone cubic (PCHIP-style) Hermite spline: the curve wraps
   from phase 1 back to 0 with matching value and slope (the loop is seamless) and never
   overshoots its keys (curls stay in [0, 1], holds stay still).
3. Idle layers on top so nothing is frozen: one breath per ~4 s, tiny head drift, blinks.
4. Forward kinematics in pixel space (720x1280): torso from the hips up, arms as chains of
   angles, head as a rotated 3-D face template projected orthographically (yaw compresses and
   shifts features, pitch moves them vertically, roll rotates), hands from a template with
   per-finger curl. Then normalized to the frame.

Every loop starts (phase 0) exactly in ``REST`` with the idle layers at their phase-0 values, so
any loop can cut to any other at a loop boundary without a jump.

Sides: "left" is the *person's* left, as in the skeleton. The anchor faces the camera, so the
person's left arm is on the **image's right** (larger x); ``left_gesture`` presents toward the
right of the frame, ``right_gesture`` toward the left.

Angles in the rig are degrees. Arm angles are measured from straight down, positive away from the
body's midline (outward), 180 = straight up, negative = across the body; they are relative to the
torso, so a torso sway carries the arms with it.

Example::

    from newsmotion_engine.guidance.palette import author_loop, canonical_loops
    kp = author_loop("nod")                  # float32 [120, 133, 3]
    canonical_loops()["nod"].prompt          # text for diffusion backends
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from newsmotion_engine import skeleton as sk
from newsmotion_engine.errors import NewsmotionError

LOOP_IDS: tuple[str, ...] = (
    "welcome", "breaking_alert", "left_gesture", "right_gesture", "deep_thought", "nod", "signoff",
)
DEFAULT_FPS = 30
DEFAULT_SECONDS = 4.0
# Bump whenever the rig, keyframes or idle layers change: caches keyed on it become stale.
PALETTE_VERSION = "1.0.0"

FRAME_WIDTH = 720
FRAME_HEIGHT = 1280


@dataclass(frozen=True)
class LoopSpec:
    """What a canonical loop is: id, a short title, what the motion shows, and a text prompt for
    diffusion backends that take one."""

    loop_id: str
    title: str
    description: str
    prompt: str


_SPECS: dict[str, LoopSpec] = {
    spec.loop_id: spec
    for spec in (
        LoopSpec(
            "welcome", "Welcome",
            "Both forearms open outward with open palms while the anchor smiles and gives a small nod.",
            "a news anchor warmly welcomes viewers, opening both hands outward with open palms, "
            "smiling and nodding slightly",
        ),
        LoopSpec(
            "breaking_alert", "Breaking alert",
            "A quick lean toward the camera, the right hand raised with the index finger up, "
            "emphatic beats of hand and head, brows raised.",
            "a news anchor leans in urgently and raises one index finger to announce breaking news, "
            "emphatic serious expression",
        ),
        LoopSpec(
            "left_gesture", "Present to the left",
            "The anchor's left arm sweeps out to present something on the image's right, palm open, "
            "head and shoulders turning toward it.",
            "a news anchor gestures with an open hand to present something at the side of the frame, "
            "turning the head toward it",
        ),
        LoopSpec(
            "right_gesture", "Present to the right",
            "The anchor's right arm sweeps out to present something on the image's left, palm open, "
            "head and shoulders turning toward it.",
            "a news anchor gestures with an open hand to present something at the side of the frame, "
            "turning the head toward it",
        ),
        LoopSpec(
            "deep_thought", "Deep thought",
            "A slow hand-to-chin pose: the right hand rises to the chin, the other arm folds across "
            "the waist, the head tilts and the eyes look up.",
            "a news anchor thoughtfully rests a hand on the chin, head tilted, looking up, "
            "contemplative",
        ),
        LoopSpec(
            "nod", "Nod",
            "Three affirming head nods with a slight shoulder bounce and a light smile.",
            "a news anchor nods in agreement with a slight smile",
        ),
        LoopSpec(
            "signoff", "Sign-off",
            "A small wave of the raised right hand with a smile, then a slight bow before settling.",
            "a news anchor smiles and gives a small wave goodbye, then a slight bow",
        ),
    )
}
assert tuple(_SPECS) == LOOP_IDS


def canonical_loops() -> dict[str, LoopSpec]:
    """The canonical loops in ``LOOP_IDS`` order: ``{loop_id: LoopSpec}`` (a fresh dict)."""
    return dict(_SPECS)


def is_canonical(loop_id: str) -> bool:
    """True when ``loop_id`` names one of the authored loops (anything else needs a driving video)."""
    return loop_id in _SPECS


# --------------------------------------------------------------------------------------------
# The rig: body geometry in pixels of the 720x1280 frame.
# --------------------------------------------------------------------------------------------
# Head height (crown to chin) is the unit; proportions are an adult's. The figure is sized so the
# gestures keep wrists and hands inside the narrow portrait frame.
_H = 195.0
RIG: dict[str, float] = {
    "hip_x": 360.0,             # hip centre (fixed: the anchor sits/stands at a desk)
    "hip_y": 1225.0,            # hips near the bottom of the frame
    "hip_half": 0.48 * _H,      # hip joint half-separation
    "torso": 2.35 * _H,         # hip centre to shoulder centre
    "shoulder_half": 0.76 * _H,
    "neck": 0.62 * _H,          # shoulder centre up to the head pivot (top of the spine)
    "upper_arm": 1.22 * _H,
    "forearm": 1.04 * _H,
    "hand": 0.7 * _H,           # wrist to middle fingertip
    "face_width": 0.6 * _H,     # jaw width; the face template's unit
    "lean_scale": 0.55,         # how much nearer (bigger) the upper body gets per sin(lean)
    "breath_shoulder": 0.014 * _H,  # shoulder rise at the top of a breath
    "breath_seconds": 4.0,      # about one breath per 4 s
    "blink_half_seconds": 0.09,
}

# Neutral pose. Units: degrees for angles; 0..1 for curls, mouth, smile, blink, brow; lengths are
# foreshortening factors (1 = segment parallel to the image plane); palm is -1 (back of the hand
# to camera) .. 1 (palm to camera), its magnitude is how much of the hand's width shows.
_SIDE_REST = {
    "upper": 8.0, "upper_len": 0.95, "fore": -64.0, "fore_len": 0.7, "wrist": -22.0,
    "hand_len": 0.62, "palm": -0.5, "curl": 0.45, "index": 0.4, "thumb": 0.35, "spread": 0.25,
}
REST: dict[str, float] = {
    "lean": 0.0, "sway": 0.0, "turn": 0.0, "shrug_l": 0.0, "shrug_r": 0.0,
    **{f"l_{k}": v for k, v in _SIDE_REST.items()},
    **{f"r_{k}": v for k, v in _SIDE_REST.items()},
    "yaw": 0.0, "pitch": 0.0, "roll": 0.0, "mouth": 0.0, "smile": 0.15, "blink": 0.0, "brow": 0.0,
}
PARAMS: tuple[str, ...] = tuple(REST)


# --------------------------------------------------------------------------------------------
# Keyframe authoring helpers.
# --------------------------------------------------------------------------------------------
Key = tuple[float, "dict[str, float] | str"]

# Hand shapes: finger curls (0 straight .. 1 fist), index curl, thumb fold, finger spread.
_SHAPES = {
    "open": {"curl": 0.05, "index": 0.05, "thumb": 0.05, "spread": 0.85},
    "soft": {"curl": 0.3, "index": 0.22, "thumb": 0.25, "spread": 0.45},
    "point": {"curl": 0.95, "index": 0.0, "thumb": 0.85, "spread": 0.1},
    "chin": {"curl": 0.75, "index": 0.25, "thumb": 0.3, "spread": 0.15},
}


def _hand(side: str, shape: str, **extra: float) -> dict[str, float]:
    """Keys for one hand's shape (plus any other per-side values, e.g. ``palm=0.8``)."""
    return {f"{side}_{k}": v for k, v in {**_SHAPES[shape], **extra}.items()}


def _arm(side: str, upper: float, fore: float, **extra: float) -> dict[str, float]:
    return {f"{side}_upper": upper, f"{side}_fore": fore, **{f"{side}_{k}": v for k, v in extra.items()}}


def _merge(*parts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        out.update(part)
    return out


def _mirror_pose(pose: dict[str, float]) -> dict[str, float]:
    """The same pose performed by the other side: swap l_/r_ and negate lateral angles."""
    flip = {"yaw", "roll", "sway", "turn"}
    out: dict[str, float] = {}
    for name, value in pose.items():
        if name.startswith(("l_", "r_")):
            name = ("r_" if name[0] == "l" else "l_") + name[2:]
        elif name in ("shrug_l", "shrug_r"):
            name = "shrug_r" if name == "shrug_l" else "shrug_l"
        out[name] = -value if name in flip else value
    return out


def _mirror(keys: list[Key]) -> list[Key]:
    """A whole loop performed by the other side ("rest" keys stay as they are)."""
    return [(phase, pose if isinstance(pose, str) else _mirror_pose(pose)) for phase, pose in keys]


def _both(pose: dict[str, float]) -> dict[str, float]:
    """A one-side pose made symmetric: the pose plus its mirror."""
    return _merge(pose, _mirror_pose(pose))


# --------------------------------------------------------------------------------------------
# The loops. Phase 0 (and 1) is REST; "rest" as a key means every animated parameter at REST.
# --------------------------------------------------------------------------------------------
def _welcome() -> list[Key]:
    # Forearms swing from resting across the waist, forward (foreshortened), out to the sides with
    # palms open and fingers up-and-out; smile, a nod while the arms are open, then back.
    forward_l = _merge(_arm("l", 9, 5, fore_len=0.42, wrist=40, hand_len=0.45, palm=0.4), _hand("l", "soft"))
    open_l = _merge(_arm("l", 8, 80, fore_len=0.42, wrist=68, hand_len=0.7, palm=0.8), _hand("l", "open"))
    wide_l = _arm("l", 10, 86, fore_len=0.44, wrist=62)
    return [
        (0.0, "rest"),
        (0.14, _merge(_both(forward_l), {"smile": 0.5, "lean": 2, "brow": 0.2})),
        (0.3, _merge(_both(open_l), {"smile": 0.9, "mouth": 0.25, "brow": 0.45, "lean": 3, "pitch": 2})),
        (0.42, {"pitch": -9, "mouth": 0.1}),
        (0.52, {"pitch": 1, "mouth": 0.3}),
        (0.6, _merge(_both(wide_l), {"smile": 0.95})),
        (0.64, {"pitch": -6, "mouth": 0.05}),
        (0.78, _merge(_both(forward_l), {"smile": 0.7, "lean": 1, "pitch": 0, "brow": 0.1})),
        (0.93, "rest"),
    ]


def _breaking_alert() -> list[Key]:
    # Fore angles below -90 point up across the front of the body, so the hand rises in front of
    # the chest (as people raise a hand) rather than swinging out to the side.
    # A beat: the forearm tips toward the camera (shorter in the image) and the hand chops forward.
    up = dict(upper=38, upper_len=0.62, fore=-177, fore_len=0.95, wrist=-4, hand_len=0.95, palm=0.55)
    beat = dict(upper=36, upper_len=0.62, fore=-171, fore_len=0.78, wrist=16)
    return [
        (0.0, "rest"),
        (0.1, _merge(_arm("r", **up), _hand("r", "point"),
                     {"lean": 10, "brow": 0.7, "mouth": 0.35, "smile": 0.0, "pitch": -2, "shrug_r": 0.05})),
        (0.2, _merge(_arm("r", **beat), {"pitch": -7, "mouth": 0.1, "lean": 11})),
        (0.29, _merge(_arm("r", **up), {"pitch": 0, "mouth": 0.4})),
        (0.38, _merge(_arm("r", **beat), {"pitch": -7, "mouth": 0.1})),
        (0.47, _merge(_arm("r", **up), {"pitch": 0, "mouth": 0.45})),
        (0.56, _merge(_arm("r", **beat), {"pitch": -8, "mouth": 0.05, "lean": 10})),
        (0.66, _merge(_arm("r", **up), {"pitch": -1, "mouth": 0.3, "brow": 0.6})),
        (0.8, _merge(_arm("r", 10, -110, fore_len=0.72, wrist=-10, hand_len=0.65, palm=-0.2), _hand("r", "soft"),
                     {"lean": 4, "brow": 0.2, "mouth": 0.1, "smile": 0.05, "shrug_r": 0.01})),
        (0.93, "rest"),
    ]


def _left_gesture() -> list[Key]:
    # The person's LEFT arm (image right) swings forward and out to present, palm up and open;
    # head and torso turn toward it (positive yaw/turn = toward the person's left = image right).
    present = _merge(_arm("l", 14, 82, upper_len=0.92, fore_len=0.4, wrist=45, hand_len=0.45, palm=0.7),
                     _hand("l", "open"))
    return [
        (0.0, "rest"),
        (0.13, _merge(_arm("l", 12, 8, fore_len=0.38, wrist=40, hand_len=0.45, palm=0.4), _hand("l", "soft"),
                      {"yaw": 7, "turn": 4})),
        (0.3, _merge(present, {"yaw": 18, "turn": 12, "roll": 3, "smile": 0.45, "brow": 0.3, "mouth": 0.2})),
        (0.5, _merge(_arm("l", 16, 86), {"yaw": 20, "mouth": 0.05, "pitch": -3})),
        (0.64, _merge(_arm("l", 13, 76), {"yaw": 15, "mouth": 0.25, "pitch": 1})),
        (0.8, _merge(_arm("l", 11, 0, fore_len=0.4, wrist=30, hand_len=0.45, palm=0.2), _hand("l", "soft"),
                     {"yaw": 6, "turn": 3, "roll": 0.5, "smile": 0.25, "brow": 0.05})),
        (0.94, "rest"),
    ]


def _deep_thought() -> list[Key]:
    # Right hand to the chin (knuckles under it), left forearm folded across the waist to support
    # the right elbow; head tilts toward the hand, chin up, brows up: "eyes look up". Slow.
    chin = _merge(_arm("r", -18, -160, upper_len=0.5, fore_len=0.8, wrist=-6, hand_len=0.5, palm=-0.55),
                  _hand("r", "chin"))
    fold = _merge(_arm("l", 4, -106, fore_len=0.95, wrist=-6, hand_len=0.55, palm=-0.6), _hand("l", "soft"))
    return [
        (0.0, "rest"),
        (0.3, _merge(chin, fold, {"roll": -7, "pitch": 8, "yaw": -6, "brow": 0.6, "smile": 0.0, "sway": -1.5,
                                  "lean": 2})),
        (0.48, {"roll": -9, "pitch": 11, "yaw": -9, "r_index": 0.05, "brow": 0.7}),
        (0.62, {"roll": -6, "pitch": 9, "yaw": -4, "r_index": 0.35, "brow": 0.55}),
        (0.74, _merge(chin, fold, {"roll": -7, "pitch": 7, "yaw": -7, "r_index": 0.1, "brow": 0.5, "smile": 0.05,
                                   "sway": -1.5, "lean": 2})),
        (0.97, "rest"),
    ]


def _nod() -> list[Key]:
    keys: list[Key] = [(0.0, "rest")]
    # Three nods: down (chin toward chest) then back up, each with a small shoulder bounce.
    for i, start in enumerate((0.06, 0.34, 0.62)):
        depth = (-13.0, -15.0, -11.0)[i]
        keys.append((start + 0.1, {"pitch": depth, "shrug_l": 0.03, "shrug_r": 0.03, "lean": 2.5, "smile": 0.35,
                                   "brow": 0.15}))
        keys.append((start + 0.22, {"pitch": 3.0, "shrug_l": 0.0, "shrug_r": 0.0, "lean": 0.5, "smile": 0.4,
                                    "brow": 0.05}))
    keys.append((0.95, "rest"))
    return keys


def _signoff() -> list[Key]:
    # Right hand rises in front of the chest to a palm-forward wave, comes down, then a slight bow.
    raised = dict(upper=32, fore=-172, fore_len=0.92, hand_len=0.95, palm=0.9, upper_len=0.7)
    keys: list[Key] = [
        (0.0, "rest"),
        (0.13, _merge(_arm("r", wrist=0, **raised), _hand("r", "open"), {"smile": 0.8, "brow": 0.3, "yaw": -4})),
    ]
    for phase, w in ((0.21, 15), (0.29, -15), (0.37, 15), (0.45, -15), (0.52, 5)):
        keys.append((phase, _merge(_arm("r", 32, -172 - 0.25 * w, wrist=w), {"smile": 0.9})))
    keys += [
        (0.63, _merge(_arm("r", 9, -100, fore_len=0.65, wrist=-15, hand_len=0.6, palm=-0.3), _hand("r", "soft"),
                      {"yaw": 0, "lean": 2, "pitch": -2})),
        (0.74, {"pitch": -14, "lean": 7, "smile": 0.85, "brow": 0.0}),
        (0.84, {"pitch": -1, "lean": 2, "smile": 0.6}),
        (0.96, "rest"),
    ]
    return keys


_LOOP_KEYS: dict[str, list[Key]] = {
    "welcome": _welcome(),
    "breaking_alert": _breaking_alert(),
    "left_gesture": _left_gesture(),
    "right_gesture": _mirror(_left_gesture()),
    "deep_thought": _deep_thought(),
    "nod": _nod(),
    "signoff": _signoff(),
}
# Blink centres (loop phase) per loop; placed away from phase 0 so every loop starts eyes open.
_BLINKS: dict[str, tuple[float, ...]] = {
    "welcome": (0.5, 0.86),
    "breaking_alert": (0.74,),
    "left_gesture": (0.21, 0.72),
    "right_gesture": (0.21, 0.72),
    "deep_thought": (0.18, 0.85),
    "nod": (0.3, 0.81),
    "signoff": (0.58, 0.9),
}
assert tuple(_LOOP_KEYS) == LOOP_IDS and tuple(_BLINKS) == LOOP_IDS


def _tracks(keys: list[Key]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-parameter key times and values. A parameter is keyed only where a pose names it (or at
    a "rest" key); parameters no pose names stay at REST."""
    animated = sorted({name for _, pose in keys if not isinstance(pose, str) for name in pose})
    unknown = [n for n in animated if n not in REST]
    if unknown:
        raise ValueError(f"unknown pose parameters {unknown}; known: {list(PARAMS)}")
    per: dict[str, dict[float, float]] = {name: {} for name in animated}
    for phase, pose in keys:
        if not 0.0 <= phase < 1.0:
            raise ValueError(f"key phase {phase} outside [0, 1)")
        items = {n: REST[n] for n in animated} if pose == "rest" else pose
        for name, value in items.items():
            per[name][float(phase)] = float(value)
    out = {}
    for name, kv in per.items():
        times = np.array(sorted(kv), dtype=np.float64)
        out[name] = (times, np.array([kv[t] for t in times], dtype=np.float64))
    return out


def _periodic_pchip(times: np.ndarray, values: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Evaluate a periodic (period 1) monotone cubic Hermite spline through ``(times, values)``.

    Slopes follow Fritsch & Carlson's harmonic-mean rule (as in PCHIP), applied with wrap-around
    so every key is interior: value and slope match across phase 1 -> 0, extremes are flat, and
    the curve never leaves the range of its neighbouring keys.
    """
    n = len(times)
    if n == 1:
        return np.full(phase.shape, values[0])
    # Extend one key each side by periodicity.
    t = np.concatenate([[times[-1] - 1.0], times, [times[0] + 1.0]])
    v = np.concatenate([[values[-1]], values, [values[0]]])
    h = np.diff(t)
    delta = np.diff(v) / h
    d0, d1 = delta[:-1], delta[1:]
    h0, h1 = h[:-1], h[1:]
    w1, w2 = 2 * h1 + h0, h1 + 2 * h0
    same_sign = d0 * d1 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(same_sign, (w1 + w2) / (w1 / d0 + w2 / d1), 0.0)
    m = np.concatenate([[m[-1]], m, [m[0]]])  # slopes at the extended keys
    # Segment index into the extended arrays: t[k] <= phase < t[k+1].
    k = np.clip(np.searchsorted(t, phase, side="right") - 1, 0, len(t) - 2)
    hk = t[k + 1] - t[k]
    s = (phase - t[k]) / hk
    s2, s3 = s * s, s * s * s
    return ((2 * s3 - 3 * s2 + 1) * v[k] + (s3 - 2 * s2 + s) * hk * m[k]
            + (-2 * s3 + 3 * s2) * v[k + 1] + (s3 - s2) * hk * m[k + 1])


# --------------------------------------------------------------------------------------------
# Templates: face (3-D, in face widths) and hand (2-D, in hand lengths).
# --------------------------------------------------------------------------------------------
def _face_template() -> dict[str, np.ndarray]:
    """iBUG-68 face in head coordinates: x to the image right, y down, z toward the camera; unit
    = jaw width, origin between the eyes. Returns the neutral points and per-expression offsets."""
    pts = np.zeros((68, 3))
    # Jaw 0-16: from the person's right (image left) ear, down round the chin, to the left ear.
    t = np.linspace(0.0, math.pi, 17)
    c, s = np.cos(t), np.sin(t)
    pts[0:17, 0] = -0.5 * np.sign(c) * np.abs(c) ** 0.8
    pts[0:17, 1] = 0.02 + 0.76 * s ** 1.3
    pts[0:17, 2] = -0.38 * np.abs(c) ** 1.5 + 0.06 * s
    # Brows: right 17-21 outer -> inner, left 22-26 inner -> outer (mirror).
    u = np.linspace(0.0, 1.0, 5)
    brow = np.stack([-0.42 + 0.29 * u, -0.09 - 0.06 * np.sin(math.pi * u) + 0.02 * u, -0.06 + 0.14 * u], axis=1)
    pts[17:22] = brow
    pts[22:27] = brow[::-1] * [-1, 1, 1]
    # Nose bridge 27-30 (top -> tip) and lower nose 31-35 (image left -> right).
    pts[27:31] = [[0, -0.03, 0.07], [0, 0.06, 0.12], [0, 0.15, 0.18], [0, 0.24, 0.24]]
    pts[31:36] = [[-0.09, 0.28, 0.1], [-0.045, 0.3, 0.14], [0, 0.31, 0.16], [0.045, 0.3, 0.14], [0.09, 0.28, 0.1]]
    # Eyes, iBUG order: right 36 outer, 37-38 upper lid, 39 inner, 40-41 lower lid; left mirrored
    # (42 inner, 43-44 upper, 45 outer, 46-47 lower).
    right_eye = np.array([[-0.285, 0.0, -0.06], [-0.235, -0.035, 0.0], [-0.165, -0.035, 0.01],
                          [-0.115, 0.005, 0.0], [-0.165, 0.03, 0.01], [-0.235, 0.03, 0.0]])
    pts[36:42] = right_eye
    pts[42:48] = right_eye[[3, 2, 1, 0, 5, 4]] * [-1, 1, 1]
    # Outer lip 48-59 (corner, upper lip to the other corner, lower lip back), inner lip 60-67.
    pts[48:60] = [[-0.18, 0.51, 0.03], [-0.12, 0.46, 0.09], [-0.05, 0.44, 0.12], [0, 0.45, 0.13],
                  [0.05, 0.44, 0.12], [0.12, 0.46, 0.09], [0.18, 0.51, 0.03], [0.12, 0.56, 0.08],
                  [0.06, 0.585, 0.1], [0, 0.59, 0.11], [-0.06, 0.585, 0.1], [-0.12, 0.56, 0.08]]
    pts[60:68] = [[-0.15, 0.51, 0.05], [-0.05, 0.495, 0.1], [0, 0.5, 0.11], [0.05, 0.495, 0.1],
                  [0.15, 0.51, 0.05], [0.05, 0.52, 0.1], [0, 0.525, 0.11], [-0.05, 0.52, 0.1]]

    mouth = np.zeros_like(pts)  # jaw drops: lower lip and chin move down, corners a little
    mouth[[55, 56, 57, 58, 59], 1] = [0.09, 0.11, 0.12, 0.11, 0.09]
    mouth[[65, 66, 67], 1] = [0.1, 0.11, 0.1]
    mouth[[48, 54, 60, 64], 1] = 0.03
    mouth[4:13, 1] = 0.09 * np.sin(np.linspace(0.15, math.pi - 0.15, 9)) ** 2
    smile = np.zeros_like(pts)  # corners out and up, lips stretch
    smile[[48, 60], 0], smile[[54, 64], 0] = -0.035, 0.035
    smile[[48, 54, 60, 64], 1] = -0.04
    smile[[49, 59, 61, 67], 0], smile[[53, 55, 63, 65], 0] = -0.015, 0.015
    smile[[49, 53, 55, 59], 1] = -0.015
    blink = np.zeros_like(pts)  # upper lids close onto the lower ones
    blink[[37, 38, 43, 44], 1] = 0.058
    blink[[40, 41, 46, 47], 1] = -0.006
    brow = np.zeros_like(pts)
    brow[17:27, 1] = -0.055
    ears = np.array([[0.52, 0.12, -0.5], [-0.52, 0.12, -0.5]])  # person's left (image right), right
    return {"points": pts, "mouth": mouth, "smile": smile, "blink": blink, "brow": brow, "ears": ears}


_FACE = _face_template()
# Head rotation pivot (top of the spine) in face coordinates: below the eyes and behind the face.
_HEAD_PIVOT = np.array([0.0, 0.62, -0.5])

# Hand template in hand lengths: u along the hand (wrist -> fingers), v toward the thumb side.
_MCP = np.array([[0.43, 0.15], [0.45, 0.04], [0.43, -0.06], [0.40, -0.15]])  # index..pinky
_PHALANX = np.array([[0.24, 0.14, 0.11], [0.26, 0.16, 0.12], [0.24, 0.15, 0.11], [0.19, 0.11, 0.10]])
_SPREAD_DEG = np.array([9.0, 1.0, -7.0, -16.0])
_FLEX_DEG = np.array([75.0, 95.0, 65.0])  # MCP, PIP, DIP flexion of a full curl
_THUMB_OPEN = np.array([[0.1, 0.12], [0.22, 0.27], [0.33, 0.37], [0.43, 0.45]])
_THUMB_FOLDED = np.array([[0.1, 0.1], [0.22, 0.16], [0.32, 0.08], [0.4, 0.0]])


def _hand_local(curl: np.ndarray, index: np.ndarray, thumb: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """Hand points ``[T, 21, 2]`` in (u, v) hand coordinates for per-frame curls.

    A curling finger folds toward the palm, i.e. toward or away from the camera; in the image that
    shows as the finger's projected segments shortening and folding back (cos of the cumulative
    flexion), which is what a front view of a closing hand looks like.
    """
    frames = curl.shape[0]
    out = np.zeros((frames, 21, 2))
    t = thumb[:, None, None]
    out[:, 1:5] = (1 - t) * _THUMB_OPEN + t * _THUMB_FOLDED
    curls = np.stack([index, curl, curl, curl], axis=1)  # [T, 4] index, middle, ring, pinky
    ang = np.radians(_SPREAD_DEG)[None, :] * (0.4 + spread[:, None])  # [T, 4]
    direction = np.stack([np.cos(ang), np.sin(ang)], axis=-1)  # [T, 4, 2]
    cum = np.cumsum(np.radians(_FLEX_DEG))[None, None, :] * curls[:, :, None]  # [T, 4, 3]
    steps = _PHALANX[None] * np.cos(cum)  # projected length of each phalanx
    joints = _MCP[None, :, None, :] + np.cumsum(steps, axis=-1)[..., None] * direction[:, :, None, :]
    for f in range(4):
        base = 5 + 4 * f
        out[:, base] = _MCP[f]
        out[:, base + 1:base + 4] = joints[:, f]
    return out


# --------------------------------------------------------------------------------------------
# Forward kinematics.
# --------------------------------------------------------------------------------------------
def _rot2(vectors: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotate 2-D image vectors ``[T, ..., 2]`` by ``angle`` [T] radians (positive = clockwise on
    screen, i.e. +x toward +y, since y points down)."""
    c, s = np.cos(angle), np.sin(angle)
    extra = (None,) * (vectors.ndim - 2)
    c, s = c[(slice(None),) + extra], s[(slice(None),) + extra]
    x, y = vectors[..., 0], vectors[..., 1]
    return np.stack([c * x - s * y, s * x + c * y], axis=-1)


def _limb_dir(sign: float, angle_deg: np.ndarray) -> np.ndarray:
    """Unit image vector for an arm angle (0 = down, + outward) on a side (+1 left, -1 right)."""
    a = np.radians(angle_deg)
    return np.stack([sign * np.sin(a), np.cos(a)], axis=-1)


def _pose(p: dict[str, np.ndarray]) -> np.ndarray:
    """Pose parameters (each ``[T]``) -> keypoints ``[T, 133, 3]`` in pixels (confidence 1)."""
    frames = p["lean"].shape[0]
    kp = np.zeros((frames, sk.NUM_KEYPOINTS, 3))
    lean = np.radians(p["lean"])
    sway = np.radians(p["sway"])  # positive sway tilts the upper body toward image right
    turn = np.radians(p["turn"])
    scale = 1.0 + RIG["lean_scale"] * np.sin(lean)  # nearer the camera = bigger
    hip = np.array([RIG["hip_x"], RIG["hip_y"]])

    # Hips barely move; shoulders ride the torso (sway about the hips, lean foreshortens it).
    hip_off = np.stack([RIG["hip_half"] * np.cos(0.5 * turn), np.zeros(frames)], axis=-1)
    kp[:, sk.BODY["left_hip"], :2] = hip + hip_off
    kp[:, sk.BODY["right_hip"], :2] = hip - hip_off
    up = _rot2(np.stack([np.zeros(frames), -RIG["torso"] * np.cos(lean)], axis=-1), sway)
    chest = hip + up + np.stack([np.zeros(frames), -p["breath"]], axis=-1)
    across = _rot2(np.stack([RIG["shoulder_half"] * scale * np.cos(turn), np.zeros(frames)], axis=-1), sway)
    torso_up = _rot2(np.tile([0.0, -1.0], (frames, 1)), sway)  # unit "up" along the torso

    shoulders = {}
    for side, sign in (("l", 1.0), ("r", -1.0)):
        shrug = (p[f"shrug_{side}"] * _H + 0.5 * p["breath"]) * scale
        shoulders[side] = chest + sign * across + torso_up * shrug[:, None]

    # Head: rotate the 3-D face template about the pivot, project, place the pivot on the neck.
    neck_top = chest + torso_up * (RIG["neck"] * scale)[:, None]
    fw = RIG["face_width"] * scale
    face = (_FACE["points"][None]
            + p["mouth"][:, None, None] * _FACE["mouth"] + p["smile"][:, None, None] * _FACE["smile"]
            + np.clip(p["blink"], 0, 1)[:, None, None] * _FACE["blink"]
            + p["brow"][:, None, None] * _FACE["brow"])
    ears = np.broadcast_to(_FACE["ears"], (frames, 2, 3))
    head = np.concatenate([face, ears], axis=1) - _HEAD_PIVOT
    yaw = np.radians(p["yaw"] + 0.5 * p["turn"])
    pitch = np.radians(p["pitch"] - 0.3 * p["lean"])  # the head dips a little with a lean
    cy, sy, cp, sp = np.cos(yaw)[:, None], np.sin(yaw)[:, None], np.cos(pitch)[:, None], np.sin(pitch)[:, None]
    x, y, z = head[..., 0], head[..., 1], head[..., 2]
    y, z = y * cp - z * sp, y * sp + z * cp  # pitch: positive lifts the face (chin up)
    x, z = x * cy + z * sy, -x * sy + z * cy  # yaw: positive turns the face toward image right
    roll = np.radians(p["roll"]) + sway  # the head rides the torso's sway
    head2d = _rot2(np.stack([x, y], axis=-1), roll) * fw[:, None, None] + neck_top[:, None, :]
    kp[:, sk.PARTS["face"], :2] = head2d[:, :68]
    kp[:, sk.BODY["nose"], :2] = head2d[:, 30]
    kp[:, sk.BODY["right_eye"], :2] = head2d[:, 36:42].mean(axis=1)
    kp[:, sk.BODY["left_eye"], :2] = head2d[:, 42:48].mean(axis=1)
    kp[:, sk.BODY["left_ear"], :2] = head2d[:, 68]
    kp[:, sk.BODY["right_ear"], :2] = head2d[:, 69]

    # Arms: shoulder -> elbow -> wrist -> hand, angles relative to the torso.
    for side, sign, start in (("l", 1.0, sk.LEFT_HAND_START), ("r", -1.0, sk.RIGHT_HAND_START)):
        g = {k: p[f"{side}_{k}"] for k in _SIDE_REST}
        shoulder = shoulders[side]
        upper_px = RIG["upper_arm"] * g["upper_len"] * scale
        fore_px = RIG["forearm"] * g["fore_len"] * scale
        elbow = shoulder + _rot2(_limb_dir(sign, g["upper"]), sway) * upper_px[:, None]
        wrist = elbow + _rot2(_limb_dir(sign, g["fore"]), sway) * fore_px[:, None]
        hand_angle = g["fore"] + g["wrist"]
        u_dir = _rot2(_limb_dir(sign, hand_angle), sway)
        a = np.radians(hand_angle)
        # Thumb side of a palm-forward hand: outward when hanging, inward when raised (mirror per side).
        v_dir = _rot2(np.stack([sign * np.cos(a), -np.sin(a)], axis=-1), sway)
        local = _hand_local(np.clip(g["curl"], 0, 1), np.clip(g["index"], 0, 1),
                            np.clip(g["thumb"], 0, 1), np.clip(g["spread"], 0, 1.2))
        size = (RIG["hand"] * scale)[:, None, None]
        hand = (wrist[:, None, :]
                + local[..., :1] * (g["hand_len"][:, None, None] * u_dir[:, None, :]) * size
                + local[..., 1:] * (g["palm"][:, None, None] * v_dir[:, None, :]) * size)
        kp[:, start:start + 21, :2] = hand
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_shoulder"], :2] = shoulder
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_elbow"], :2] = elbow
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_wrist"], :2] = wrist

    present = np.ones(sk.NUM_KEYPOINTS, dtype=bool)
    present[13:23] = False  # knees, ankles, feet: below the frame of a waist-up shot
    kp[:, present, 2] = 1.0
    return kp


def _idle(phase: np.ndarray, duration: float, frames: int, blinks: tuple[float, ...]) -> dict[str, np.ndarray]:
    """Layers added to every loop: breathing, a slight head drift, blinks. All periodic in the
    loop (whole cycles per loop) and zero-offset at phase 0, so loops still start in REST."""
    cycles = max(1, round(duration / RIG["breath_seconds"]))
    breath = RIG["breath_shoulder"] * 0.5 * (1 - np.cos(2 * math.pi * cycles * phase))
    drift_yaw = 1.2 * np.sin(2 * math.pi * phase)
    drift_roll = 0.6 * np.sin(2 * math.pi * 2 * phase)
    # Blink: a raised-cosine bump ~0.18 s wide (never narrower than 3 frames, so it is sampled).
    half = max(RIG["blink_half_seconds"] / duration, 1.5 / frames)
    blink = np.zeros_like(phase)
    for centre in blinks:
        d = np.abs((phase - centre + 0.5) % 1.0 - 0.5)  # wrapped distance in phase
        blink = np.maximum(blink, np.where(d < half, 0.5 * (1 + np.cos(math.pi * d / half)), 0.0))
    return {"breath": breath, "yaw": drift_yaw, "roll": drift_roll, "blink": blink}


def _check_loop(loop_id: str) -> None:
    if loop_id not in _SPECS:
        raise NewsmotionError(f"unknown loop {loop_id!r}; canonical loops: {', '.join(LOOP_IDS)}")


def _frame_count(fps: int, frames: int | None) -> int:
    if not isinstance(fps, (int, np.integer)) or isinstance(fps, bool) or fps < 1:
        raise NewsmotionError(f"fps must be a positive integer; got {fps!r}")
    count = round(fps * DEFAULT_SECONDS) if frames is None else frames
    if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 2:
        raise NewsmotionError(f"frames must be an integer >= 2; got {frames!r}")
    return int(count)


def author_loop(loop_id: str, fps: int = DEFAULT_FPS, frames: int | None = None) -> np.ndarray:
    """Author a canonical loop: float32 ``[frames, 133, 3]`` in the canonical skeleton.

    Args:
        loop_id: one of ``LOOP_IDS``; anything else raises :class:`NewsmotionError`.
        fps: frame rate; with ``frames`` unset the loop lasts ``DEFAULT_SECONDS`` (120 frames at 30).
        frames: frame count. The whole motion always plays once per loop, so more frames at the
            same fps make it slower (it lasts ``frames / fps`` seconds).

    Frame ``i`` samples loop phase ``i / frames``, so frame ``frames - 1`` flows into frame 0.
    Points are normalized to the 720x1280 frame; knees, ankles and feet have confidence 0; any
    other point that would leave the frame gets confidence 0 (none do in the canonical loops).

    Example::

        kp = author_loop("welcome")             # [120, 133, 3]
        kp60 = author_loop("welcome", fps=60)   # [240, 133, 3], same 4 s motion sampled finer
    """
    _check_loop(loop_id)
    count = _frame_count(fps, frames)
    duration = count / fps
    phase = np.arange(count, dtype=np.float64) / count
    params = {name: np.full(count, value) for name, value in REST.items()}
    for name, (times, values) in _tracks(_LOOP_KEYS[loop_id]).items():
        params[name] = _periodic_pchip(times, values, phase)
    idle = _idle(phase, duration, count, _BLINKS[loop_id])
    params["yaw"] = params["yaw"] + idle["yaw"]
    params["roll"] = params["roll"] + idle["roll"]
    params["blink"] = np.maximum(params["blink"], idle["blink"])
    params["breath"] = idle["breath"]

    kp = _pose(params)
    kp[..., 0] /= FRAME_WIDTH
    kp[..., 1] /= FRAME_HEIGHT
    outside = ((kp[..., :2] < 0) | (kp[..., :2] > 1)).any(axis=-1)
    kp[..., 2] = np.where(outside, 0.0, kp[..., 2])
    kp[..., :2] = np.clip(kp[..., :2], 0, 1)
    kp[:, 13:23, :2] = 0.0  # absent parts carry no position
    return kp.astype(np.float32)


def authoring_params(loop_id: str, fps: int, frames: int) -> dict[str, Any]:
    """Everything :func:`author_loop`'s output depends on, JSON-able: the palette version, fps,
    frames, the frame size, the rig, the rest pose, the loop's keyframes and blinks. A cache whose
    stored params differ from these is stale."""
    _check_loop(loop_id)
    count = _frame_count(fps, frames)
    keys = [[phase, pose if isinstance(pose, str) else dict(sorted(pose.items()))]
            for phase, pose in _LOOP_KEYS[loop_id]]
    return {
        "palette_version": PALETTE_VERSION,
        "loop_id": loop_id,
        "fps": int(fps),
        "frames": count,
        "frame_size": [FRAME_WIDTH, FRAME_HEIGHT],
        "rig": dict(RIG),
        "rest": dict(REST),
        "keys": keys,
        "blinks": list(_BLINKS[loop_id]),
    }


__all__ = [
    "LOOP_IDS", "DEFAULT_FPS", "DEFAULT_SECONDS", "PALETTE_VERSION", "FRAME_WIDTH", "FRAME_HEIGHT",
    "LoopSpec", "canonical_loops", "is_canonical", "author_loop", "authoring_params",
]
