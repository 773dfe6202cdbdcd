"""The ``warp`` backend: CPU, no weights. Each frame is the persona's portrait as a layered
cut-out: the body bent by a smooth displacement field so that its landmarks land on the
retargeted pose, and each arm the portrait shows as its own layer, deformed as-rigid-as-possible
along its bones and drawn over the body (:mod:`newsmotion_engine.render.backends.warp.limbs`).

Per frame:

1. Control points of the body: the shoulders go from the persona's rest position to the
   retargeted one and the torso follows them with a falloff to the hips; an arm that is *not* a
   layer (the portrait does not show it well enough) contributes its visible joints as before,
   softly limited in reach; the hips and points on the frame border stay put; the head moves as
   one similarity transform (rotation, scale, shift) fitted to the nose, eyes and inner face.
2. Field: a thin-plate spline (F. L. Bookstein, "Principal warps: thin-plate splines and the
   decomposition of deformations", PAMI 1989) interpolating the *backward* map (output pixel ->
   portrait pixel) through the control points, evaluated on a coarse grid (one node per
   ``grid_step`` pixels) covering only the region the person can reach; inside the face mask the
   map is blended towards the head's exact similarity, so the face moves rigidly (no rubber face).
3. The coarse map is upsampled bilinearly (a TPS is smooth, so this loses nothing visible) and
   ``cv2.remap`` samples the body image (the portrait with the arm layers taken out and the torso
   behind them filled).
4. The arm layers: ARAP solve, rasterized backward map, remap, composite over the body in depth
   order (upper arm, forearm, hand), so an arm lifts off the torso.

Compositing of the body is folded into its remap: the body image is already composited over the
background with its matte. The background is one constant colour, so bilinear sampling of the
composited image equals compositing the bilinearly warped body with the identically warped
matte; the matte edge cannot tear, and there is no separate per-frame composite pass. Outside
the reachable region the frame is the constant composite of the rest pose (a prefilled template).

The backend precomputes everything that depends only on (persona, spec) once (``prepare``: the
placement, the arm layers and their meshes, the filled body) and everything that depends on the
clip once per clip (region, grid), so the per-frame work is one small linear solve, a coarse
field, one remap of the region and, per arm, a few sparse back-substitutions and one small remap.
Which arm parts were animated (and why the others were not) is in ``describe()["last_render"]``
after a render, hence in the render's telemetry (``backend_info``).

Speech (``frames(..., visemes=track)``, ``moves_lips = True``): before each frame's remap, the
mouth and eyelids of the body image are reshaped in rest coordinates from the viseme frame and
the seeded blink schedule (:class:`~newsmotion_engine.render.backends.warp.face_motion.FacePerformance`),
and the speech's nods and sway are added to the head's similarity, so the warp carries the talking
face with the gesture. ``describe()["last_render"]["face"]`` says what the face did.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import cv2
import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import BackendNeeds, BackendOptions, RenderSpec, check_visemes
from newsmotion_engine.render.placement import place_portrait
from newsmotion_engine.render.backends.warp.face_motion import FacePerformance
from newsmotion_engine.render.backends.warp.limbs import ArmLayer, LimbReport, cut_arms, draw_arm, pose_arm
from newsmotion_engine.skeleton import BODY, FACE_START, LEFT_HAND_START, NUM_KEYPOINTS, RIGHT_HAND_START

__all__ = ["WarpBackend", "WarpOptions", "PreparedPersona"]

_HEAD_POINTS = np.array(list(range(0, 5)) + list(range(FACE_START, FACE_START + 68)))
# The points the head's rigid motion is fitted to: nose, eyes and the inner face (nose, eyes,
# mouth of the iBUG 68), not the ears, jaw line or brows. Under a nod or a turn the inner face
# travels furthest while the ears (near the pivot) and the outline barely move; fitted to
# everything, a nod shrinks to half and turns into a zoom.
_HEAD_FIT_POINTS = np.array(list(range(0, 3)) + list(range(FACE_START + 27, FACE_START + 68)))
_ARM_CHAINS = (
    (BODY["left_shoulder"], BODY["left_elbow"], BODY["left_wrist"], LEFT_HAND_START),
    (BODY["right_shoulder"], BODY["right_elbow"], BODY["right_wrist"], RIGHT_HAND_START),
)
_HIPS = (BODY["left_hip"], BODY["right_hip"])


@dataclass
class PreparedPersona:
    """Everything the warp needs from one persona at one output size (computed once)."""

    key: tuple
    width: int
    height: int
    # Portrait placement on the output frame: px = offset + normalized * size.
    offset: np.ndarray  # [2] float (ox, oy)
    size: np.ndarray  # [2] float (placed width, placed height)
    source: np.ndarray  # uint8 [H, W, 3]: the portrait composited over the background
    face_weight: np.ndarray  # float32 [H/4, W/4]: soft face mask, sampled on the coarse grid
    person_box: tuple[int, int, int, int]  # x0, y0, x1, y1 of the matte in output pixels
    rest_px: np.ndarray  # float64 [133, 2] persona landmarks in output pixels
    rest_ok: np.ndarray  # bool [133]
    rest_conf: np.ndarray  # float [133]
    face_ctrl_rest: np.ndarray  # float64 [F, 2] points spanning the head (output pixels)
    anchors: np.ndarray  # float64 [A, 2] fixed points (frame border, hips)
    arms: list[ArmLayer]  # the arms cut into their own layers (drawn over the body)
    limbs: LimbReport  # which arm parts are animated, why the others are not


def _fingerprint(persona: Any) -> str:
    """Content hash of the appearance arrays: a persona rebuilt under the same id must not hit a
    stale prepared entry."""
    h = hashlib.blake2b(digest_size=16)
    for name in ("portrait", "person_mask", "face_mask", "landmarks"):
        a = np.ascontiguousarray(getattr(persona, name))
        h.update(name.encode())
        h.update(str(a.shape).encode() + str(a.dtype).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def _tps_kernel(d2: np.ndarray) -> np.ndarray:
    """TPS radial basis r^2 log r, written on squared distances (0 at 0). The log runs in
    float32 (3x faster; the basis needs no more precision than the pixels it moves)."""
    d32 = np.maximum(d2, 1e-20).astype(np.float32)
    return 0.5 * d2 * np.log(d32)


def _similarity(a: np.ndarray, b: np.ndarray) -> tuple[complex, complex]:
    """Least-squares similarity ``b ~ z * a + t`` for complex point sets (rotation+scale ``z``)."""
    ma, mb = a.mean(), b.mean()
    A, B = a - ma, b - mb
    den = float(np.sum(np.abs(A) ** 2))
    if den < 1e-9:
        return 1.0 + 0j, complex(mb - ma)
    z = complex(np.sum(np.conj(A) * B) / den)
    return z, complex(mb - z * ma)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and np.isfinite(value)


@dataclass(frozen=True)
class WarpOptions(BackendOptions):
    """Options of the ``warp`` backend (``get_backend("warp", **options)``, CLI ``-o KEY=VALUE``).

    Args:
        threads: OpenCV worker threads (process-wide, set in ``load``); 2 fits a 2-core box where
            ffmpeg runs in parallel; 0 leaves OpenCV's setting alone.
        grid_step: pixels between coarse field nodes (smaller = more exact, slower); ``None``
            scales it with the frame: 1/45 of the shorter side (16 at 720x1280), at least 4.
        margin: extra border (fraction of the frame width) around the region the person can
            reach, so hands and hair past the keypoints are not clipped.
        regularization: TPS smoothing (0 = exact interpolation); a little keeps near-coincident
            control points from folding the field.
        face_rigidity: 0..1, how strictly the face mask follows the head's similarity transform.
        threshold: landmark confidence a keypoint needs to count as present (0..1).
        limb_reach: soft limit on how far an arm control point travels, in shoulder widths.
        limb_threshold: landmark confidence an elbow/wrist/hand needs to become a control point
            (stricter than ``threshold``: a guessed elbow inside a jacket must not steer the warp).
        layered_arms: cut the arms the portrait shows into their own layers, deformed
            as-rigid-as-possible along their bones over an inpainted torso
            (:mod:`newsmotion_engine.render.backends.warp.limbs`); off = the whole portrait is one warped sheet.
        part_threshold: landmark confidence both ends of an arm part need for it to be cut and
            animated (a part below it, or outside the portrait, is not animated and is reported).
        arap_iterations: ARAP local/global iterations per arm per frame.
        prepared_cache: how many (persona, spec) preparations to keep.
    """

    backend: ClassVar[str] = "warp"
    threads: int = 2
    grid_step: int | None = None
    margin: float = 0.06
    regularization: float = 1e-4
    face_rigidity: float = 1.0
    threshold: float = 0.3
    limb_reach: float = 0.3
    limb_threshold: float = 0.5
    layered_arms: bool = True
    part_threshold: float = 0.3
    arap_iterations: int = 3
    prepared_cache: int = 4

    def __post_init__(self) -> None:
        if not _is_int(self.threads) or self.threads < 0:
            raise self.option_error("threads", "use an integer >= 0 (0 = leave OpenCV's thread count alone)")
        if self.grid_step is not None and (not _is_int(self.grid_step) or self.grid_step < 2):
            raise self.option_error("grid_step", "use an integer >= 2 pixels, or null to scale it with the frame")
        for name in ("margin", "regularization", "limb_reach"):
            if not _is_number(getattr(self, name)) or getattr(self, name) < 0:
                raise self.option_error(name, "use a number >= 0")
        if not isinstance(self.layered_arms, bool):
            raise self.option_error("layered_arms", "use true or false")
        if not _is_int(self.arap_iterations) or not 1 <= self.arap_iterations <= 50:
            raise self.option_error("arap_iterations", "use an integer in 1..50")
        for name in ("face_rigidity", "threshold", "limb_threshold", "part_threshold"):
            if not _is_number(getattr(self, name)) or not 0 <= getattr(self, name) <= 1:
                raise self.option_error(name, "use a number in 0..1")
        if not _is_int(self.prepared_cache) or self.prepared_cache < 1:
            raise self.option_error("prepared_cache", "use an integer >= 1")


class WarpBackend:
    """Layered warp of the portrait (see the module docstring); options in
    :class:`WarpOptions` (``get_backend("warp", threads=1)`` validates them)."""

    name = "warp"
    moves_lips = True
    hears_speech = False  # its mouth follows the viseme track; a speech track is accepted and ignored
    needs = BackendNeeds(
        guidance=frozenset({"keypoints"}),
        persona=frozenset({"portrait", "person_mask", "face_mask", "landmarks"}),
    )

    def __init__(self, options: WarpOptions | None = None):
        o = self.options = options if options is not None else WarpOptions()
        self.threads = int(o.threads)
        self.grid_step = None if o.grid_step is None else int(o.grid_step)
        self.margin = float(o.margin)
        self.regularization = float(o.regularization)
        self.face_rigidity = float(o.face_rigidity)
        self.threshold = float(o.threshold)
        self.limb_reach = float(o.limb_reach)
        self.limb_threshold = float(o.limb_threshold)
        self.layered_arms = bool(o.layered_arms)
        self.part_threshold = float(o.part_threshold)
        self.arap_iterations = int(o.arap_iterations)
        self.last_parts: dict[str, Any] | None = None
        self.last_arm_motion: dict[str, dict[str, float]] = {}
        self.last_face: dict[str, Any] | None = None
        self._cache: OrderedDict[tuple, PreparedPersona] = OrderedDict()
        self._cache_size = int(o.prepared_cache)
        self._loaded = False
        self.stats: dict[str, float] = {}
        self.reset_stats()

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """No sub-caches: the warp reads the guidance cache's keypoints directly. Returns False."""
        return False

    def prepare_persona(self, persona: Any, spec: RenderSpec) -> bool:
        """No on-disk sub-caches (per-persona precomputation is in memory, see :meth:`prepare`).
        Returns False."""
        return False

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Set OpenCV's thread count (process-wide). Idempotent."""
        if self.threads:
            cv2.setNumThreads(self.threads)
        self._loaded = True

    def close(self) -> None:
        """Drop prepared personas. Idempotent."""
        self._cache.clear()
        self._loaded = False

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": self.name,
            "weights": "none",
            "device": "cpu",
            "threads": self.threads,
            "grid_step": self.grid_step or "auto",
            "layered_arms": self.layered_arms,
            "opencv": cv2.__version__,
        }
        if self.last_parts is not None:
            # Which arm parts the last render animated, and why the others were not (a part the
            # portrait does not show is never invented). A run report, not an input.
            info["last_render"] = {"parts": self.last_parts}
            if self.last_arm_motion:
                # Per arm, how much of the loop's arm motion the render kept (below 1 where the
                # photo ends across the arm and its cut would come into view).
                info["last_render"]["arm_motion_kept"] = {
                    side: {"mean": round(m["kept_sum"] / max(1, m["frames"]), 3), "min": round(m["min_kept"], 3)}
                    for side, m in sorted(self.last_arm_motion.items())
                }
            if self.last_face is not None:
                # A speaking render: whether the lips moved (or why not), blinks, head motion.
                info["last_render"]["face"] = self.last_face
        return info

    def reset_stats(self) -> None:
        """Zero the per-stage timers (``stats``: frames, field_ms, remap_ms, composite_ms, arms_ms,
        face_ms: the speaking face's mouth and eyelids)."""
        self.stats = {"frames": 0, "prepare_ms": 0.0, "field_ms": 0.0, "remap_ms": 0.0, "composite_ms": 0.0, "arms_ms": 0.0,
                      "face_ms": 0.0}  # fmt: skip

    # -- per (persona, spec) ---------------------------------------------------------------
    def prepare(self, persona: Any, spec: RenderSpec) -> PreparedPersona:
        """Precompute (or fetch) what depends only on the persona and the output spec."""
        key = (getattr(persona, "persona_id", None), _fingerprint(persona), spec.width, spec.height, spec.background)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        t0 = time.perf_counter()
        prepared = self._prepare(persona, spec, key)
        self.stats["prepare_ms"] += (time.perf_counter() - t0) * 1e3
        self._cache[key] = prepared
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return prepared

    def _prepare(self, persona: Any, spec: RenderSpec, key: tuple) -> PreparedPersona:
        pid = getattr(persona, "persona_id", "?")
        portrait = np.asarray(persona.portrait)
        pmask = np.asarray(persona.person_mask)
        fmask = np.asarray(persona.face_mask)
        lm = np.asarray(persona.landmarks, dtype=np.float64)
        if portrait.ndim != 3 or portrait.shape[2] != 3 or portrait.dtype != np.uint8:
            raise NewsmotionError(f"persona {pid}: portrait must be uint8 [H, W, 3], got {portrait.dtype} {portrait.shape}")
        if pmask.shape != portrait.shape[:2] or fmask.shape != portrait.shape[:2]:
            raise NewsmotionError(
                f"persona {pid}: masks {pmask.shape} / {fmask.shape} do not match the portrait {portrait.shape[:2]}"
            )
        if lm.shape != (NUM_KEYPOINTS, 3):
            raise NewsmotionError(f"persona {pid}: landmarks have shape {lm.shape}, expected [{NUM_KEYPOINTS}, 3]")

        W, H = spec.width, spec.height
        ox, oy, pw, ph = place_portrait(portrait.shape[:2], W, H)
        x0, y0 = int(round(ox)), int(round(oy))
        w_px, h_px = int(round(pw)), int(round(ph))
        w_px, h_px = min(w_px, W - x0), min(h_px, H - y0)

        def placed(img: np.ndarray, interp: int) -> np.ndarray:
            if img.shape[1] == w_px and img.shape[0] == h_px:
                return img
            return cv2.resize(img, (w_px, h_px), interpolation=interp)

        area = cv2.INTER_AREA if pw < portrait.shape[1] else cv2.INTER_LINEAR
        # The portrait, its matte and face mask placed on the output frame.
        full_rgb = np.zeros((H, W, 3), dtype=np.uint8)
        full_rgb[y0 : y0 + h_px, x0 : x0 + w_px] = placed(portrait, area)
        full_alpha = np.zeros((H, W), dtype=np.float32)
        full_alpha[y0 : y0 + h_px, x0 : x0 + w_px] = placed(pmask, area).astype(np.float32) * (1.0 / 255.0)
        full_face = np.zeros((H, W), dtype=np.float32)
        full_face[y0 : y0 + h_px, x0 : x0 + w_px] = placed(fmask, area).astype(np.float32) * (1.0 / 255.0)

        if not (full_alpha > 8 / 255).any():
            raise NewsmotionError(f"persona {pid}: the person mask is empty; nothing to animate")

        offset = np.array([ox, oy])
        size = np.array([pw, ph])
        rest_px = lm[:, :2] * size + offset
        rest_ok = lm[:, 2] >= self.threshold
        # The arms the portrait shows become their own layers; the body keeps the rest, with the
        # torso behind the arms filled in (composited over the background once, in float, so the
        # matte's soft edge blends exactly).
        arms, source, limbs = cut_arms(
            portrait=full_rgb,
            alpha=full_alpha,
            face=full_face,
            rest_px=rest_px,
            rest_conf=lm[:, 2],
            portrait_box=(x0, y0, x0 + w_px, y0 + h_px),
            background=tuple(int(c) for c in spec.background),
            threshold=self.part_threshold if self.layered_arms else 2.0,
            iterations=self.arap_iterations,
        )
        if not self.layered_arms:
            limbs = LimbReport([], {name: "layered arms are off (layered_arms=false)" for name in limbs.not_animated})

        # A soft edge so the rigid head blends into the bending neck instead of shearing at a seam.
        sigma = max(1.0, 0.012 * W)
        full_face = cv2.GaussianBlur(full_face, (0, 0), sigma)
        face_weight = cv2.resize(full_face, (max(1, W // 4), max(1, H // 4)), interpolation=cv2.INTER_AREA)
        face_weight *= self.face_rigidity

        full_mask = np.zeros((H, W), dtype=np.uint8)
        full_mask[y0 : y0 + h_px, x0 : x0 + w_px] = placed(pmask, cv2.INTER_NEAREST)
        pts = cv2.findNonZero((full_mask > 8).astype(np.uint8))
        if pts is None:
            raise NewsmotionError(f"persona {pid}: the person mask is empty; nothing to animate")
        bx, by, bw, bh = cv2.boundingRect(pts)
        person_box = (bx, by, bx + bw, by + bh)

        # The head's extent: the face mask's box (face + hair), else the head keypoints' box.
        face_pts = cv2.findNonZero((full_face > 0.5).astype(np.uint8)) if self.face_rigidity > 0 else None
        head_ok = rest_ok[_HEAD_POINTS]
        if face_pts is not None:
            fx, fy, fw, fh = cv2.boundingRect(face_pts)
            hx0, hy0, hx1, hy1 = fx, fy, fx + fw, fy + fh
        elif head_ok.sum() >= 2:
            hp = rest_px[_HEAD_POINTS[head_ok]]
            hx0, hy0 = hp.min(axis=0)
            hx1, hy1 = hp.max(axis=0)
        else:
            hx0 = hy0 = hx1 = hy1 = None
        if hx0 is None:
            face_ctrl_rest = np.zeros((0, 2))
        else:
            cx, cy = (hx0 + hx1) / 2, (hy0 + hy1) / 2
            # Corners pulled in a little: the TPS carries the head's motion into the neck while
            # the face-mask blend takes over inside.
            sx, sy = 0.4 * (hx1 - hx0), 0.4 * (hy1 - hy0)
            face_ctrl_rest = np.array(
                [[cx, cy], [cx - sx, cy - sy], [cx + sx, cy - sy], [cx - sx, cy + sy], [cx + sx, cy + sy]]
            )

        # Fixed anchors: the frame border (about every 1/4 of its side) and the hips when visible.
        nx, ny = 4, 6
        border = []
        for i in range(nx + 1):
            border += [[i * (W - 1) / nx, 0.0], [i * (W - 1) / nx, H - 1.0]]
        for j in range(1, ny):
            border += [[0.0, j * (H - 1) / ny], [W - 1.0, j * (H - 1) / ny]]
        anchors = [np.array(border)]
        hips = [rest_px[i] for i in _HIPS if rest_ok[i] and 0 <= rest_px[i][1] < H]
        if hips:
            anchors.append(np.array(hips))
        return PreparedPersona(
            key=key,
            width=W,
            height=H,
            offset=offset,
            size=size,
            source=source,
            face_weight=face_weight,
            person_box=person_box,
            rest_px=rest_px,
            rest_ok=rest_ok,
            rest_conf=lm[:, 2].copy(),
            face_ctrl_rest=face_ctrl_rest,
            anchors=np.concatenate(anchors, axis=0),
            arms=arms,
            limbs=limbs,
        )

    # -- per clip --------------------------------------------------------------------------
    def _moving_points(self, prep: PreparedPersona, kp_px: np.ndarray, kp_ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Body control points: rest ``[M, 2]`` and per-frame destination ``[T, M, 2]``.

        Joints the persona shows clearly, points at 1/3 and 2/3 of each arm bone (so a bone moves
        as a bar, not just at its ends) and the visible hand's centre. A joint the loop lacks in
        some frame stays at rest there, so the control set is the same in every frame (a changing
        set would make the field jump).

        Arm points travel at most about ``limb_reach`` shoulder widths (a soft limit): a warp
        cannot lift an arm off the torso, and an elbow dragged across the chest would smear the
        torso; the shoulders and head carry the gesture instead.
        """
        rest, ok = prep.rest_px, prep.rest_ok
        limb_ok = ok & (prep.rest_conf >= self.limb_threshold)
        dst = np.where(kp_ok[..., None], kp_px, rest[None])  # [T, 133, 2]
        R: list[np.ndarray] = []
        D: list[np.ndarray] = []
        # A layered arm, or one whose landmarks nothing confirms: the body field follows only its shoulder.
        layered = {int(_ARM_CHAINS[0][0]) if side == "left" else int(_ARM_CHAINS[1][0])
                   for side in [arm.side for arm in prep.arms] + list(prep.limbs.unconfirmed)}  # fmt: skip
        implausible = {(_ARM_CHAINS[0] if side == "left" else _ARM_CHAINS[1])[0] for side in prep.limbs.implausible}
        for sh, el, wr, hand0 in _ARM_CHAINS:
            if sh in implausible:
                # Mislocated landmarks (the cameraman's left shoulder on his cheek, its wrist on the
                # camera): following them would drag whatever they lie on (his camera and tripod bent).
                continue
            chain = [sh] if ok[sh] else []
            if sh in layered:
                R.extend(rest[j] for j in chain)
                D.extend(dst[:, j] for j in chain)
                continue
            for j in (el, wr):
                if limb_ok[j] and (chain or j == el):
                    chain.append(j)
                else:
                    break  # a joint past an unseen one has no reliable place in the portrait
            for j in chain:
                R.append(rest[j])
                D.append(dst[:, j])
            for a, b in zip(chain, chain[1:]):
                for f in (1 / 3, 2 / 3):
                    R.append(rest[a] * (1 - f) + rest[b] * f)
                    D.append(dst[:, a] * (1 - f) + dst[:, b] * f)
            hand = np.arange(hand0, hand0 + 21)
            hv = hand[limb_ok[hand]]
            if hv.size >= 3 and wr in chain:
                R.append(rest[hv].mean(axis=0))
                D.append(dst[:, hv].mean(axis=1))
        ls, rs = BODY["left_shoulder"], BODY["right_shoulder"]
        if R and ok[ls] and ok[rs] and self.limb_reach > 0:
            shoulders = {tuple(rest[ls]), tuple(rest[rs])}
            reach = self.limb_reach * float(np.linalg.norm(rest[ls] - rest[rs]))
            for i, r in enumerate(R):
                if tuple(r) in shoulders:
                    continue
                d = D[i] - r
                n = np.linalg.norm(d, axis=-1, keepdims=True)
                # Soft limit: ~identity for small moves, tends to ``reach`` for large ones.
                D[i] = r + d * (reach * np.tanh(n / reach) / np.maximum(n, 1e-9))
        # The torso: points from each shoulder (and the neck) down to the hip (or, for a waist-up
        # portrait without hips, the bottom of the matte) follow the shoulders with a falloff to
        # zero at the hips, so the trunk sways as one piece and a swinging arm does not drag it.
        if ok[ls] and ok[rs]:
            bottom = float(prep.person_box[3])
            for top, hip in ((ls, BODY["left_hip"]), (rs, BODY["right_hip"]), (None, None)):
                if top is None:
                    r_top = (rest[ls] + rest[rs]) / 2
                    d_top = (dst[:, ls] + dst[:, rs]) / 2
                    r_hip = (self._hip_rest(prep, BODY["left_hip"], ls) + self._hip_rest(prep, BODY["right_hip"], rs)) / 2
                else:
                    r_top, d_top = rest[top], dst[:, top]
                    r_hip = self._hip_rest(prep, hip, top)
                r_hip = np.array([r_hip[0], min(r_hip[1], bottom)])
                for f in (1 / 3, 2 / 3):
                    R.append(r_top * (1 - f) + r_hip * f)
                    D.append(d_top * (1 - f) + r_hip * f)
        if not R:
            return np.zeros((0, 2)), np.zeros((kp_px.shape[0], 0, 2))
        return np.stack(R), np.stack(D, axis=1)

    @staticmethod
    def _neck_rest(prep: PreparedPersona) -> np.ndarray:
        """Where the head turns about (rest pixels): the shoulders' midpoint, else below the chin."""
        ls, rs = BODY["left_shoulder"], BODY["right_shoulder"]
        if prep.rest_ok[ls] and prep.rest_ok[rs]:
            return (prep.rest_px[ls] + prep.rest_px[rs]) / 2
        chin, nose = FACE_START + 8, BODY["nose"]
        if prep.rest_ok[chin] and prep.rest_ok[nose]:
            return prep.rest_px[chin] + 0.8 * (prep.rest_px[chin] - prep.rest_px[nose])
        return prep.face_ctrl_rest[0] if len(prep.face_ctrl_rest) else np.array([prep.width / 2, prep.height / 2])

    @staticmethod
    def _hip_rest(prep: PreparedPersona, hip: int, shoulder: int) -> np.ndarray:
        """The hip's rest position, or a point under the shoulder at the matte's bottom."""
        if prep.rest_ok[hip]:
            return prep.rest_px[hip]
        return np.array([prep.rest_px[shoulder][0], float(prep.person_box[3])])

    def _head_motion(self, prep: PreparedPersona, kp_px: np.ndarray, kp_ok: np.ndarray) -> np.ndarray:
        """Per frame head similarity ``[T, 2]`` complex (z, t): ``current = z * rest + t``."""
        T = kp_px.shape[0]
        out = np.zeros((T, 2), dtype=np.complex128)
        out[:, 0] = 1.0
        rest_ok = prep.rest_ok[_HEAD_FIT_POINTS]
        rest_c = prep.rest_px[_HEAD_FIT_POINTS, 0] + 1j * prep.rest_px[_HEAD_FIT_POINTS, 1]
        cur_c = kp_px[:, _HEAD_FIT_POINTS, 0] + 1j * kp_px[:, _HEAD_FIT_POINTS, 1]
        for t in range(T):
            sel = rest_ok & kp_ok[t, _HEAD_FIT_POINTS]
            if sel.sum() >= 2:
                out[t] = _similarity(rest_c[sel], cur_c[t, sel])
        return out

    def frames(
        self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec, *, visemes: Any = None, speech: Any = None
    ) -> Iterator[np.ndarray]:
        """Yield ``len(keypoints)`` uint8 RGB ``[spec.height, spec.width, 3]`` frames.

        ``keypoints``: the retargeted pose ``[T, 133, 3]`` normalized to the persona's canvas.
        ``visemes``: a viseme track of ``T`` frames, or ``None`` for a silent clip. ``speech``
        (the audio itself) is ignored: the lips follow ``visemes``.
        """
        if not self._loaded:
            self.load()
        kp = np.asarray(keypoints, dtype=np.float64)
        if kp.ndim != 3 or kp.shape[1:] != (NUM_KEYPOINTS, 3):
            raise NewsmotionError(f"retargeted keypoints have shape {kp.shape}; expected [T, {NUM_KEYPOINTS}, 3]")
        check_visemes(visemes, kp.shape[0])
        prep = self.prepare(persona, spec)
        self.last_parts = prep.limbs.as_dict()
        self.last_arm_motion = {}
        face = None
        if visemes is not None:
            face = FacePerformance(prep.rest_px, prep.rest_ok, prep.source, visemes, spec.seed)
        self.last_face = face.report() if face is not None else None
        return self._frames(prep, kp, face)

    def _frames(self, prep: PreparedPersona, kp: np.ndarray, face: FacePerformance | None = None) -> Iterator[np.ndarray]:
        W, H = prep.width, prep.height
        step = self.grid_step or max(4, round(min(W, H) / 45))
        T = kp.shape[0]
        kp_px = kp[..., :2] * prep.size + prep.offset
        kp_ok = kp[..., 2] >= self.threshold

        body_rest, body_dst = self._moving_points(prep, kp_px, kp_ok)
        head = self._head_motion(prep, kp_px, kp_ok)
        if face is not None:
            head = face.adjust_head(head, self._neck_rest(prep))
        fr = prep.face_ctrl_rest[:, 0] + 1j * prep.face_ctrl_rest[:, 1]
        face_dst_c = head[:, :1] * fr[None, :] + head[:, 1:]  # [T, F]
        face_dst = np.stack([face_dst_c.real, face_dst_c.imag], axis=-1)

        # The region anything can reach: the matte, every destination control point, a margin.
        reach = [np.array(prep.person_box, dtype=np.float64).reshape(2, 2)]
        if body_dst.size:
            reach.append(body_dst.reshape(-1, 2))
        if face_dst.size:
            reach.append(face_dst.reshape(-1, 2))
        reach_pts = np.concatenate(reach, axis=0)
        m = self.margin * W
        rx0 = int(np.clip(np.floor(reach_pts[:, 0].min() - m), 0, W))
        ry0 = int(np.clip(np.floor(reach_pts[:, 1].min() - m), 0, H))
        rx1 = int(np.clip(np.ceil(reach_pts[:, 0].max() + m), 0, W))
        ry1 = int(np.clip(np.ceil(reach_pts[:, 1].max() + m), 0, H))
        rw, rh = rx1 - rx0, ry1 - ry0
        if rw < 2 or rh < 2:
            rx0, ry0, rw, rh = 0, 0, W, H
        gw, gh = max(2, -(-rw // step)), max(2, -(-rh // step))
        # Node positions matching cv2.resize's pixel-centre convention, so upsampling the
        # coarse map with INTER_LINEAR is exact bilinear interpolation between nodes.
        gx = rx0 + (np.arange(gw) + 0.5) * (rw / gw) - 0.5
        gy = ry0 + (np.arange(gh) + 0.5) * (rh / gh) - 0.5
        GX, GY = np.meshgrid(gx, gy)
        grid = np.stack([GX.ravel(), GY.ravel()], axis=1)  # [G, 2]

        # TPS in units of the frame height keeps the system well conditioned at any size.
        norm = float(H)
        anchors = prep.anchors / norm
        n_moving = body_rest.shape[0] + face_dst.shape[1]
        moving_dst = np.concatenate([body_dst, face_dst], axis=1) / norm  # [T, M, 2]
        src_pts = np.concatenate([body_rest, prep.face_ctrl_rest, prep.anchors], axis=0) / norm  # [N, 2]
        N = src_pts.shape[0]
        gn = grid / norm
        gg = (gn**2).sum(axis=1)[:, None]
        # Grid basis [G, N + 3]: moving-point kernels (refilled per frame), fixed-anchor kernels
        # and the affine part (both the same every frame).
        basis = np.empty((gn.shape[0], N + 3))
        basis[:, n_moving:N] = _tps_kernel(_sqdist(gn, gg, anchors))
        basis[:, N] = 1.0
        basis[:, N + 1 :] = gn
        # The TPS system; only the moving rows/columns change per frame.
        system = np.zeros((N + 3, N + 3))
        system[n_moving:N, n_moving:N] = _tps_kernel(_sqdist(anchors, (anchors**2).sum(1)[:, None], anchors))
        system[:N, :N] += self.regularization * np.eye(N)
        system[:N, N] = 1.0
        system[N, :N] = 1.0
        system[n_moving:N, N + 1 :] = anchors
        system[N + 1 :, n_moving:N] = anchors.T
        rhs = np.zeros((N + 3, 2))
        rhs[:N] = src_pts
        eye_m = self.regularization * np.eye(n_moving)

        # Face weight (stored at 1/4 resolution), sampled at each node's rest position.
        fw = prep.face_weight
        fsx, fsy = fw.shape[1] / W, fw.shape[0] / H
        grid_c = grid[:, 0] + 1j * grid[:, 1]
        use_face = face_dst.shape[1] > 0 and self.face_rigidity > 0

        template = prep.source
        # A speaking face reshapes the mouth and eyelids of the body image in rest coordinates
        # (a copy per clip); the frame's warp then carries them with the head.
        sampled = template.copy() if face is not None else template
        stats = self.stats
        y1, x1 = ry0 + rh, rx0 + rw

        for t in range(T):
            t0 = time.perf_counter()
            q = moving_dst[t]
            if n_moving:
                qq = (q**2).sum(1)
                system[:n_moving, :n_moving] = _tps_kernel(_sqdist(q, qq[:, None], q)) + eye_m
                k_qa = _tps_kernel(_sqdist(q, qq[:, None], anchors))
                system[:n_moving, n_moving:N] = k_qa
                system[n_moving:N, :n_moving] = k_qa.T
                system[:n_moving, N + 1 :] = q
                system[N + 1 :, :n_moving] = q.T
                basis[:, :n_moving] = _tps_kernel(_sqdist(gn, gg, q))
            # OpenCV's LU: single-threaded, so it does not wake BLAS threads that would fight the
            # remap's threads for the cores (np.linalg.solve is many times slower here than alone).
            ok, coef = cv2.solve(system, rhs, flags=cv2.DECOMP_LU)
            if not ok:
                coef = cv2.solve(system, rhs, flags=cv2.DECOMP_SVD)[1]
            mapped = basis @ coef
            mapped *= norm  # [G, 2]: the source pixel each node samples

            if use_face:
                z, tr = head[t]
                rest_c = (grid_c - tr) / z  # inverse similarity: where the node's pixel sat at rest
                sx = (rest_c.real * fsx + 0.5 * fsx - 0.5).astype(np.float32).reshape(gh, gw)
                sy = (rest_c.imag * fsy + 0.5 * fsy - 0.5).astype(np.float32).reshape(gh, gw)
                w = cv2.remap(fw, sx, sy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
                w = w.reshape(-1).astype(np.float64)
                mapped[:, 0] += w * (rest_c.real - mapped[:, 0])
                mapped[:, 1] += w * (rest_c.imag - mapped[:, 1])

            coarse = mapped.astype(np.float32).reshape(gh, gw, 2)
            fine = cv2.resize(coarse, (rw, rh), interpolation=cv2.INTER_LINEAR)
            map1, map2 = cv2.convertMaps(fine, None, cv2.CV_16SC2)
            t1 = time.perf_counter()
            # Fresh frame (the consumer may keep it): the constant part from the template, the
            # region straight from the remap.
            frame = np.empty_like(template)
            frame[:ry0] = template[:ry0]
            frame[y1:] = template[y1:]
            frame[ry0:y1, :rx0] = template[ry0:y1, :rx0]
            frame[ry0:y1, x1:] = template[ry0:y1, x1:]
            t2 = time.perf_counter()
            if face is not None:
                face.paint(t, template, sampled)
            t_face = time.perf_counter()
            cv2.remap(sampled, map1, map2, cv2.INTER_LINEAR, dst=frame[ry0:y1, rx0:x1], borderMode=cv2.BORDER_REPLICATE)
            t3 = time.perf_counter()
            if prep.arms:
                dst_t = np.where(kp_ok[t][:, None], kp_px[t], prep.rest_px)
                for arm in prep.arms:
                    verts, kept = pose_arm(arm, prep.rest_px, dst_t, _forward_body(fine, arm, rx0, ry0))
                    draw_arm(frame, arm, verts)
                    motion = self.last_arm_motion.setdefault(arm.side, {"frames": 0, "kept_sum": 0.0, "min_kept": 1.0})
                    motion["frames"] += 1
                    motion["kept_sum"] += kept
                    motion["min_kept"] = min(motion["min_kept"], kept)
            t4 = time.perf_counter()
            stats["arms_ms"] += (t4 - t3) * 1e3
            stats["frames"] += 1
            stats["field_ms"] += (t1 - t0) * 1e3
            stats["composite_ms"] += (t2 - t1) * 1e3
            stats["face_ms"] += (t_face - t2) * 1e3
            stats["remap_ms"] += (t3 - t_face) * 1e3
            yield frame


def _forward_body(backward: np.ndarray, arm: ArmLayer, rx0: int, ry0: int) -> np.ndarray:
    """Where the body's warp carries the arm's attached vertices this frame. ``backward`` is the
    frame's map (output pixel -> source pixel) over the region at ``(rx0, ry0)``; to first order
    its inverse moves a source point ``v`` to ``2 v - backward(v)`` (the field is smooth)."""
    rest = arm.mesh.rest[arm.attached]
    if rest.size == 0:
        return rest
    mx = (rest[:, 0] - rx0).astype(np.float32)[None, :]
    my = (rest[:, 1] - ry0).astype(np.float32)[None, :]
    src = cv2.remap(backward, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)[0].astype(np.float64)
    return 2.0 * rest - src


def _sqdist(a: np.ndarray, aa: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared distances ``[len(a), len(b)]`` via one small matrix product (``aa`` = row norms
    of ``a``, ``[len(a), 1]``); an order of magnitude faster than broadcasting differences."""
    d = a @ (-2.0 * b.T)
    d += aa
    d += (b**2).sum(axis=1)[None, :]
    np.maximum(d, 0.0, out=d)
    return d

