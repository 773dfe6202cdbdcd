"""The choreography of the canonical loops: keyframes per loop, played on the rig.

How a loop is made (float32 ``[T, 133, 3]`` in the canonical skeleton, 4 s at 30 fps by default):

1. Keyframes per loop at loop phases in [0, 1), each naming a few of the rig's pose parameters
   (:mod:`newsmotion_engine.guidance.rig`). Each parameter is interpolated through the keys that
   mention it with a *periodic* monotone cubic (PCHIP-style) Hermite spline: the curve wraps from
   phase 1 back to 0 with matching value and slope (the loop is seamless) and never overshoots
   its keys (curls stay in [0, 1], holds stay still).
2. Idle layers on top so nothing is frozen: one breath per ~4 s, tiny head drift, blinks.
3. The rig's forward kinematics in pixel space, then normalized to the 720x1280 frame.

Every loop starts (phase 0) exactly in ``REST`` with the idle layers at their phase-0 values, so
any loop can cut to any other at a loop boundary without a jump.

Example::

    from newsmotion_engine.guidance.choreography import author_loop
    kp = author_loop("nod")                  # float32 [120, 133, 3]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.guidance import rig
from newsmotion_engine.guidance.catalogue import LOOP_IDS, is_canonical
from newsmotion_engine.guidance.rig import FRAME_HEIGHT, FRAME_WIDTH, PARAMS, REST, RIG

DEFAULT_FPS = 30
DEFAULT_SECONDS = 4.0
# Bump whenever the rig, keyframes or idle layers change: caches keyed on it become stale.
PALETTE_VERSION = "1.0.0"


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
# The idle loop's blinks (author_idle).
IDLE_BLINKS = (0.3, 0.77)


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
    if not is_canonical(loop_id):
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
    return _perform(_LOOP_KEYS[loop_id], _BLINKS[loop_id], fps, _frame_count(fps, frames))


def author_idle(fps: int = DEFAULT_FPS, frames: int | None = None) -> np.ndarray:
    """The idle loop: ``REST`` with only the idle layers (breathing, head drift, two blinks), as
    float32 ``[frames, 133, 3]`` like :func:`author_loop`; a story fills the time between gestures
    with it. Not a canonical loop: it shows no gesture, so it is not rendered or cached on its own."""
    return _perform([(0.0, "rest")], IDLE_BLINKS, fps, _frame_count(fps, frames))


def _perform(keys: list[Key], blinks: tuple[float, ...], fps: int, count: int) -> np.ndarray:
    """Keyframes ``keys`` and the idle layers (with ``blinks``) played on the rig for ``count``
    frames at ``fps``, normalized to the frame (see :func:`author_loop`)."""
    duration = count / fps
    phase = np.arange(count, dtype=np.float64) / count
    params = {name: np.full(count, value) for name, value in REST.items()}
    for name, (times, values) in _tracks(keys).items():
        params[name] = _periodic_pchip(times, values, phase)
    idle = _idle(phase, duration, count, blinks)
    params["yaw"] = params["yaw"] + idle["yaw"]
    params["roll"] = params["roll"] + idle["roll"]
    params["blink"] = np.maximum(params["blink"], idle["blink"])
    params["breath"] = idle["breath"]

    kp = rig.pose(params)
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


__all__ = ["DEFAULT_FPS", "DEFAULT_SECONDS", "PALETTE_VERSION", "author_loop", "authoring_params"]
