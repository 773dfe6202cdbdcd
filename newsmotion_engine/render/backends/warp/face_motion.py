"""The warp backend's speaking face: the mouth from the viseme track (:mod:`.mouth`), blinks,
and small head motion driven by the speech.

**Blinks** (:func:`blink_track`): people blink every few seconds, irregularly, a little more often
while talking. Intervals are drawn from a seeded generator (2 s plus a gamma-distributed wait with
a 3.4 s mean, one blink in eight doubled); a blink closes in about 80 ms, stays shut for one frame
and opens in about 150 ms (opening is the slower half). Same seed, same blinks. The eyelid
(:func:`close_eyes`) comes down from the persona's own lid edge and is made of the persona's own
lid skin (the band between the lid and the brow, squeezed to the lid's height), shaded towards
its edge, with a lash line in the colour of the persona's lashes along it.

**Head motion** (:func:`head_motion`): speakers nod on stressed syllables and sway a little while
talking, and stay still in pauses. The nod follows the onsets of the speech's energy envelope
(rises of a 120 ms-smoothed envelope, low-passed to about 2 Hz), a downward dip of the face of
at most :data:`NOD` eye distances; the sway is seeded slow noise (about 0.3 Hz) scaled by a
one-second average of the energy, a roll of at most :data:`SWAY_DEG` degrees about the neck.
Both are added to the head motion the loop already asks for, so a gesture loop keeps its
gesture and talks over it. Silence (zero energy) adds nothing.

:class:`FacePerformance` precomputes all of it for one clip and applies it per frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.render.backends.warp.mouth import (
    MouthGeometry,
    MouthShape,
    mouth_geometry,
    patch_box,
    shape_mouth,
    to_local,
)
from newsmotion_engine.skeleton import FACE_START

__all__ = [
    "EyeGeometry",
    "FacePerformance",
    "blink_track",
    "close_eyes",
    "eye_geometry",
    "head_motion",
]

BLINK_MIN_S = 2.0
BLINK_MEAN_EXTRA_S = 3.4
DOUBLE_BLINK = 0.125
_CLOSE_S, _SHUT_S, _OPEN_S = 0.08, 0.034, 0.15
NOD = 0.16  # largest nod dip, in eye distances
SWAY_DEG = 1.6
# A mouth narrower than this share of its jaw scale is a face in profile (frontal sample faces:
# 0.91-0.96; the cameraman in profile: 0.53).
PROFILE_MOUTH = 0.7
_EYES = ((36, 37, 38, 39, 40, 41), (42, 43, 44, 45, 46, 47))  # outer/inner corner, upper x2, corner, lower x2


def blink_track(frames: int, fps: float, seed: int) -> np.ndarray:
    """Eyelid closure per frame, float32 ``[frames]`` in 0..1 (1 = shut), deterministic per ``seed``.

    Example::

        closure = blink_track(300, 30.0, seed=0)  # 10 s: about two or three blinks
    """
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0xB1]) if frames else None
    out = np.zeros(frames, np.float32)
    if not frames or fps <= 0:
        return out
    dur = frames / fps
    # The first blink comes at a random point of an interval, not at the clip's start.
    t = float(rng.uniform(0.3, BLINK_MIN_S + BLINK_MEAN_EXTRA_S))
    times = np.arange(frames) / fps
    while t < dur:
        starts = [t]
        if rng.random() < DOUBLE_BLINK:
            starts.append(t + _CLOSE_S + _SHUT_S + _OPEN_S + 0.05)
        for s in starts:
            closing = np.clip((times - s) / _CLOSE_S, 0.0, 1.0)
            opening = np.clip(1.0 - (times - s - _CLOSE_S - _SHUT_S) / _OPEN_S, 0.0, 1.0)
            lid = np.minimum(closing, opening)
            # Sampled at the frame rate a 60 ms shut phase can fall between frames: the frame
            # nearest the middle of the shut phase is shut.
            mid = s + _CLOSE_S + _SHUT_S / 2
            k = int(round(mid * fps))
            if 0 <= k < frames:
                lid[k] = 1.0
            np.maximum(out, lid.astype(np.float32), out=out)
        t = starts[-1] + BLINK_MIN_S + float(rng.gamma(2.0, BLINK_MEAN_EXTRA_S / 2.0))
    return out


def _smooth(x: np.ndarray, sigma_frames: float) -> np.ndarray:
    if sigma_frames <= 0.3 or x.size < 2:
        return x.astype(np.float64)
    r = int(np.ceil(3 * sigma_frames))
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma_frames) ** 2)
    k /= k.sum()
    return np.convolve(np.pad(x.astype(np.float64), r, mode="edge"), k, mode="valid")


def head_motion(energy: np.ndarray, fps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nod, sway)`` per frame from the speech energy (0..1): ``nod`` in 0..1 (times :data:`NOD`
    eye distances down), ``sway`` in -1..1 (times :data:`SWAY_DEG` degrees of roll). Zero energy
    gives zeros; deterministic per ``seed``."""
    e = np.clip(np.asarray(energy, np.float64), 0.0, 1.0)
    T = e.size
    if T == 0 or fps <= 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    env = _smooth(e, 0.12 * fps)
    onset = np.clip(np.diff(env, prepend=env[0]) * fps, 0.0, None)  # rise per second
    nod = _smooth(onset, 0.08 * fps)
    nod = np.clip(nod / 4.0, 0.0, 1.0)  # a rise of 4/s (silence to loud in a quarter second) is a full nod
    activity = np.clip(_smooth(e, 0.5 * fps) * 1.6, 0.0, 1.0)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x5A])
    knots = rng.uniform(-1.0, 1.0, int(T / fps * 0.6) + 3)  # a new direction about every 1.7 s
    x = np.arange(T) / fps * 0.6
    i = np.floor(x).astype(int)
    f = x - i
    f = f * f * (3 - 2 * f)
    sway = (knots[i] * (1 - f) + knots[i + 1] * f) * activity
    return nod.astype(np.float32), sway.astype(np.float32)


@dataclass(frozen=True)
class EyeGeometry:
    """One eye in output pixels (rest pose): its frame and lid curves, the colour of its lashes,
    and the patch a blink touches."""

    centre: np.ndarray  # [2]
    axis_u: np.ndarray  # [2] corner to corner
    axis_v: np.ndarray  # [2] downwards
    width: float  # corner to corner, px
    lid_u: np.ndarray  # u samples (eye widths), ascending, corner to corner
    lid_v: np.ndarray  # upper lid edge at lid_u
    low_v: np.ndarray  # lower lid edge at lid_u
    lash_rgb: np.ndarray  # float32 [3] the darkest of the lash line
    box: tuple[int, int, int, int]
    grid_u: np.ndarray  # float32 [h, w]
    grid_v: np.ndarray


# The lid skin a closing lid is made of: this band above the rest lid edge, in eye widths
# (clear of the lashes below and of the brow above).
_SKIN_NEAR, _SKIN_FAR = 0.0, 0.1


def eye_geometry(rest_px: np.ndarray, rest_ok: np.ndarray, points: tuple[int, ...], image: np.ndarray) -> EyeGeometry | None:
    """One eye from its six iBUG points (two corners, two upper, two lower lid points); ``None``
    when any is missing or the eye is under 5 px wide. ``image``: the body image (uint8 RGB) the
    lid's and lashes' colours are read from."""
    idx = np.array([FACE_START + i for i in points])
    if not bool(np.all(rest_ok[idx])):
        return None
    p = rest_px[idx].astype(np.float64)
    a, b = p[0], p[3]
    width = float(np.linalg.norm(b - a))
    if width < 5.0:
        return None
    axis_u = (b - a) / width
    axis_v = np.array([-axis_u[1], axis_u[0]])
    if axis_v[1] < 0:  # corners listed right to left: keep v pointing down the face
        axis_u, axis_v = -axis_u, -axis_v
    centre = (a + b) / 2
    uv = (p - centre) @ np.stack([axis_u, axis_v], axis=1) / width
    upper = uv[[0, 1, 2, 3]]
    lower = uv[[0, 5, 4, 3]]
    if upper[1:3, 1].mean() > lower[1:3, 1].mean():  # lid points listed the other way round
        upper, lower = lower, upper
    upper = upper[np.argsort(upper[:, 0])]
    lower = lower[np.argsort(lower[:, 0])]
    lid_u = np.linspace(upper[0, 0], upper[-1, 0], 17)
    # The mesh's lid points sit on the lid's edge; the lashes lie a little outside: widen the
    # opening the blink covers, most in the middle, none at the corners (no kink).
    half = max(1e-6, (lid_u[-1] - lid_u[0]) / 2)
    bulge = 1.0 - ((lid_u - (lid_u[0] + lid_u[-1]) / 2) / half) ** 2
    lid_v = np.interp(lid_u, upper[:, 0], upper[:, 1]) - 0.11 * bulge
    low_v = np.interp(lid_u, lower[:, 0], lower[:, 1]) + 0.03 * bulge
    top = float(lid_v.min()) - 0.35
    bottom = float(low_v.max()) + 0.15
    box = patch_box(centre, axis_u, axis_v, width, 0.7, (top, bottom), (image.shape[1], image.shape[0]), min_side=3)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    grid_u = to_local(xs, ys, centre, axis_u, width).astype(np.float32)
    grid_v = to_local(xs, ys, centre, axis_v, width).astype(np.float32)
    # The lashes' colour: the darkest quarter of the pixels on the lid's edge.
    patch = image[y0:y1, x0:x1].astype(np.float32)
    up_here = np.interp(grid_u, lid_u, lid_v)
    edge = patch[(np.abs(grid_u) < 0.35) & (np.abs(grid_v - up_here) < 0.05)]
    if edge.size == 0:
        return None
    e_luma = edge.mean(axis=1)
    lash_rgb = edge[e_luma <= np.percentile(e_luma, 25)].mean(axis=0)
    return EyeGeometry(
        centre=centre, axis_u=axis_u, axis_v=axis_v, width=width, lid_u=lid_u, lid_v=lid_v, low_v=low_v,
        lash_rgb=lash_rgb.astype(np.float32),
        box=box, grid_u=grid_u, grid_v=grid_v,
    )  # fmt: skip


def close_eyes(source: np.ndarray, target: np.ndarray, eyes: list[EyeGeometry], closure: float) -> None:
    """Write each eye's patch at lid ``closure`` (0 open .. 1 shut) into ``target``: the upper
    lid comes down from its edge over ``closure`` of the opening. The lid is the persona's own
    skin: the band just above the lid edge (below the brow) squeezed into the lid's height,
    shaded a little towards its edge, its top feathered into the photo, with the lash line in the
    lashes' colour along its lower edge; everything else is ``source``."""
    for e in eyes:
        x0, y0, x1, y1 = e.box
        orig = source[y0:y1, x0:x1]
        if closure <= 1e-3:
            target[y0:y1, x0:x1] = orig
            continue
        w = np.float32(e.width)
        u, v = e.grid_u, e.grid_v
        up = np.interp(u, e.lid_u, e.lid_v).astype(np.float32)
        low = np.interp(u, e.lid_u, e.low_v).astype(np.float32)
        inside = (u > e.lid_u[0]) & (u < e.lid_u[-1])
        reach = np.where(inside, np.float32(closure) * np.maximum(low - up, 0.0), 0.0).astype(np.float32)
        edge_v = up + reach  # the lid's lower edge now
        # The lid's skin: from the lid's edge upwards, the band _SKIN_NEAR.._SKIN_FAR above the
        # rest edge, squeezed (never stretched) into the lid's height.
        squeeze = np.minimum(1.0, (_SKIN_FAR - _SKIN_NEAR) / np.maximum(reach, 1e-3))
        sv = up - _SKIN_NEAR - (edge_v - v) * squeeze
        map_x = np.float32(e.centre[0]) + w * (u * np.float32(e.axis_u[0]) + sv * np.float32(e.axis_v[0]))
        map_y = np.float32(e.centre[1]) + w * (u * np.float32(e.axis_u[1]) + sv * np.float32(e.axis_v[1]))
        skin = cv2.remap(source, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
        depth = np.clip((edge_v - v) / np.maximum(reach, 1e-3), 0.0, 1.0)
        lid = skin * (0.7 + 0.18 * depth)[..., None]
        # Coverage in px: below the top (feathered over 4 px, into the lid's crease) and above the
        # moving edge (1 px).
        cover = np.clip((v - up) * w / 4.0 + 0.5, 0.0, 1.0) * np.clip((edge_v - v) * w + 0.5, 0.0, 1.0)
        cover *= np.clip(reach * w, 0.0, 1.0)
        # The lashes: a line along the edge, thickest in the middle.
        thick = (0.06 * w) * (1.0 - (2.0 * u / max(1e-6, e.lid_u[-1] - e.lid_u[0])) ** 2)
        lash = np.clip(thick - np.abs(v - edge_v) * w + 0.5, 0.0, 1.0) * np.clip(reach * w - 1.0, 0.0, 1.0)
        lid += (e.lash_rgb[None, None, :] - lid) * lash[..., None]
        alpha = np.maximum(cover, lash)[..., None]
        out = orig.astype(np.float32)
        out += (lid - out) * alpha
        target[y0:y1, x0:x1] = np.clip(out + 0.5, 0, 255).astype(np.uint8)


class FacePerformance:
    """What a viseme track does to one clip's face on one prepared persona: the mouth shape, the
    eyelids and the extra head motion of every frame.

    Args:
        rest_px, rest_ok: the persona's landmarks in output pixels and which are present.
        source: the body image (uint8 RGB) in rest coordinates, which the shapes resample.
        visemes: the track (``open``, ``wide``, ``round``, ``energy``, ``fps``), one frame per frame.
        seed: blinks and sway (the render spec's seed).
    """

    def __init__(self, rest_px: np.ndarray, rest_ok: np.ndarray, source: np.ndarray, visemes: Any, seed: int):
        self.frames = len(visemes)
        fps = float(visemes.fps)
        self.mouth: MouthGeometry | None = mouth_geometry(rest_px, rest_ok, source)
        self.eyes = [g for g in (eye_geometry(rest_px, rest_ok, pts, source) for pts in _EYES) if g is not None]
        # A face seen from the side (its mouth much narrower than the face is tall): the mesh's eye
        # points land on the brow's shadow (the sample cameraman), so a lid drawn there is a blot.
        self.profile = self.mouth is not None and self.mouth.width < PROFILE_MOUTH * self.mouth.jaw_scale
        if self.profile:
            self.eyes = []
        self.open = np.clip(np.asarray(visemes.open, np.float32), 0.0, 1.0)
        self.wide = np.clip(np.asarray(visemes.wide, np.float32), 0.0, 1.0)
        self.round = np.clip(np.asarray(visemes.round, np.float32), 0.0, 1.0)
        self.blink = blink_track(self.frames, fps, seed) if self.eyes else np.zeros(self.frames, np.float32)
        self.nod, self.sway = head_motion(np.asarray(visemes.energy, np.float32), fps, seed)
        self.eye_distance = float(np.linalg.norm(self.eyes[0].centre - self.eyes[1].centre)) if len(self.eyes) == 2 else (
            self.mouth.width * 1.3 if self.mouth is not None else 0.0
        )

    @property
    def moves_lips(self) -> bool:
        return self.mouth is not None

    def adjust_head(self, head: np.ndarray, neck_rest: np.ndarray) -> np.ndarray:
        """The loop's head similarities ``[T, 2]`` complex (z, t) with the speech's nod and sway
        added about the neck (``neck_rest``: a point below the chin, rest pixels)."""
        out = head.copy()
        if self.eye_distance <= 0:
            return out
        pivot_rest = complex(neck_rest[0], neck_rest[1])
        for t in range(min(len(head), self.frames)):
            z, tr = head[t]
            pivot = z * pivot_rest + tr  # where the neck is in this frame
            rot = np.exp(1j * np.deg2rad(SWAY_DEG * float(self.sway[t])))
            dip = 1j * NOD * self.eye_distance * float(self.nod[t]) * (z / abs(z) if abs(z) > 0 else 1.0)
            out[t, 0] = rot * z
            out[t, 1] = rot * (tr - pivot) + pivot + dip
        return out

    def paint(self, t: int, source: np.ndarray, target: np.ndarray) -> None:
        """Write frame ``t``'s mouth and eyelids into ``target`` (a copy of ``source``)."""
        if self.mouth is not None:
            shape_mouth(source, target, self.mouth, MouthShape(float(self.open[t]), float(self.wide[t]), float(self.round[t])))
        if self.eyes:
            close_eyes(source, target, self.eyes, float(self.blink[t]))

    def report(self) -> dict[str, Any]:
        """For telemetry: what the clip's face did."""
        shut = self.blink >= 0.99
        blinks = int(np.count_nonzero(shut[1:] & ~shut[:-1]) + (1 if shut.size and shut[0] else 0))
        out: dict[str, Any] = {"moved": self.moves_lips, "frames": self.frames}
        if self.mouth is None:
            out["reason"] = "the portrait shows no confident mouth (face landmarks missing or too small): lips not animated"
        else:
            out["mouth_width_px"] = round(self.mouth.width, 1)
            out["open_mean"] = round(float(self.open.mean()), 3) if self.frames else 0.0
        out["blinks"] = blinks if self.eyes else 0
        if self.profile:
            out["blink_reason"] = "the face is seen from the side (its eye landmarks are not reliable): no blinks"
        elif not self.eyes:
            out["blink_reason"] = "no eye landmarks: no blinks"
        out["nod_px_max"] = round(float(NOD * self.eye_distance * (self.nod.max() if self.frames else 0.0)), 2)
        out["sway_deg_max"] = round(float(SWAY_DEG * (np.abs(self.sway).max() if self.frames else 0.0)), 2)
        return out
