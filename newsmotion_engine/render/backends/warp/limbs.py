"""Arm layers for the ``warp`` backend: cut each visible arm out of the portrait, fill the torso
behind it, and per frame deform the arm as-rigid-as-possible along its bones and composite it
over the body.

The approach is the one of Animated Drawings (H. J. Smith et al., "A method for animating
children's drawings of the human figure", ACM TOG 2023): a triangle mesh over a cut-out part,
deformed with ARAP (:mod:`newsmotion_engine.render.backends.warp.arap`) so that points on its bones follow the
skeleton. Here the parts come from a photo, so:

* **What is a part.** Per arm: upper arm (shoulder -> elbow), forearm (elbow -> wrist) and hand
  (wrist -> the hand's centre), each a capsule around its bone intersected with the person matte,
  minus the face; the upper arm's ends a quarter radius past the shoulder joint (a collar or
  helmet ring beyond it stays with the body and the bending neck). The radius comes from the
  matte (the distance from the upper-arm bone to the arm's outer silhouette, the smaller of the
  two arms), and on the side away from the body the cut reaches out to the matte's edge. A part is cut only when the portrait shows it: both ends'
  landmarks at least ``threshold`` confident and inside the portrait, its shoulder not on the face
  (a mislocated arm: cutting along it would tear the jaw), and its parent part cut. A
  forearm whose wrist is not shown is not animated (its bend would be invented); what the
  portrait shows of it rides rigidly on the upper arm, so the arm does not break at the elbow.
  :class:`LimbReport` says which parts were animated and why the others were not.
* **What is behind it.** The body layer loses the arm. Where the arm lay on the body (inside the
  torso polygon through the shoulders and hips, or nearer to the rest of the person than to the
  background: a held helmet, a coat) the hole is filled weights-free: OpenCV's fast-marching
  inpainting (A. Telea 2004) at half resolution, seeded only by the pixels around the arm that
  have the garment's typical colour (not a badge or strap that happens to touch the hole).
  Elsewhere the body becomes background, so a lifted arm uncovers green, not a ghost arm.
* **Per frame.** Each bone's motion is an affine map (rotation plus stretch along the bone for
  foreshortening) from its rest segment to the retargeted one; mesh vertices on the bones are
  ARAP handles pulled by those maps, the initial guess is their linear blend (skinning), and a few
  local/global iterations settle the rest. The deformed mesh is rasterized (triangle ids, half
  resolution, in depth order upper arm < forearm < hand), each pixel gets its triangle's
  backward affine map, and one ``cv2.remap`` samples the premultiplied RGBA layer, which is
  composited over the frame. The layers are drawn after the body, so an arm passes in front of
  the torso and the face.

Everything that depends only on the persona and the output size (cut, fill, mesh, factorized
ARAP system) is computed once by :func:`cut_arms` and kept with the backend's prepared persona.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from newsmotion_engine.render.backends.warp.arap import ArapMesh, grid_mesh
from newsmotion_engine.skeleton import BODY, LEFT_HAND_START, RIGHT_HAND_START

__all__ = ["ArmLayer", "LimbReport", "PART_NAMES", "SIDES", "cut_arms", "draw_arm", "pose_arm"]

SIDES = ("left", "right")
_PARTS = ("upper_arm", "forearm", "hand")
PART_NAMES: tuple[str, ...] = tuple(f"{side}_{part}" for side in SIDES for part in _PARTS)
_CHAIN = {
    "left": (BODY["left_shoulder"], BODY["left_elbow"], BODY["left_wrist"], LEFT_HAND_START),
    "right": (BODY["right_shoulder"], BODY["right_elbow"], BODY["right_wrist"], RIGHT_HAND_START),
}
# A virtual joint index for a hand's centre (mean of its visible points), past the 133.
_HAND_CENTRE = -1
_K3 = np.ones((3, 3), np.uint8)
# How far past the shoulder joint (in arm radii, against the bone) the upper arm's cut reaches.
SHOULDER_CAP = 0.25
# How far (a fraction of the frame height) the photo's edge across an arm may come into view
# before the arm's motion is held back (see :func:`pose_arm`).
EDGE_TOLERANCE = 0.004
# How far (a fraction of the frame height) an arm that runs off the frame continues past it.
APRON = 0.05
_EDGE_NAMES = ("left", "top", "right", "bottom")


@dataclass
class LimbReport:
    """Which arm parts a persona's render animates: ``animated`` part names, and for every other
    part the reason (``not_animated[name]``)."""

    animated: list[str] = field(default_factory=list)
    not_animated: dict[str, str] = field(default_factory=dict)
    limited: dict[str, str] = field(default_factory=dict)  # animated parts whose motion is held back, and why
    implausible: list[str] = field(default_factory=list)  # sides whose arm landmarks are mislocated (not in as_dict)
    unconfirmed: list[str] = field(default_factory=list)  # sides not cut because the other side is implausible (not in as_dict)

    def as_dict(self) -> dict[str, object]:
        return {"animated": list(self.animated), "not_animated": dict(self.not_animated), "limited": dict(self.limited)}


@dataclass
class ArmLayer:
    """One arm cut from the portrait, ready to deform (see the module docstring)."""

    side: str
    parts: tuple[str, ...]  # animated parts, proximal first (also the depth order)
    bones: np.ndarray  # [P, 2, 2] rest bone segments (start, end) in output pixels
    joints: tuple[tuple[int, int], ...]  # keypoint indices per bone (``_HAND_CENTRE`` = hand centre)
    hand_points: np.ndarray  # indices of the hand's visible points (for the hand centre)
    mesh: ArapMesh
    handle_weights: np.ndarray  # [K, P]: which bones' maps pull each handle
    skin: np.ndarray  # [V, P] linear-blend weights of each vertex (initial guess)
    draw_order: np.ndarray  # triangle indices, parts in depth order
    layer: np.ndarray  # uint8 [h, w, 4] premultiplied RGBA crop
    origin: tuple[int, int]  # (x, y) of the crop in output pixels
    iterations: int = 3
    # Where the photo's edge (or the frame's) cuts across the arm: mesh vertices on that cut, the
    # inward normal of the edge each lies on, and how far (px) they may come into view.
    edge_vertices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    edge_normals: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    edge_tolerance: float = 0.0
    distal: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the arm's keypoints past the shoulder
    # Vertices that move (partly) with the body, not the arm: the upper arm's cut near the shoulder
    # (toward the neck and the chest), and how much (0..1). See :func:`_body_attachment`.
    attached: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    attachment: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def orientation(self) -> float:
        """The sign of the rest triangles' area (all alike: the grid mesh is consistent)."""
        v, t = self.mesh.rest, self.mesh.triangles[0]
        e1, e2 = v[t[1]] - v[t[0]], v[t[2]] - v[t[0]]
        return float(np.sign(e1[0] * e2[1] - e2[0] * e1[1]))

    @property
    def rest_crop(self) -> np.ndarray:
        """Rest vertices in the layer crop's pixels."""
        return self.mesh.rest - np.asarray(self.origin, np.float64)


def _seg_dist(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances ``[N]`` from points ``[N, 2]`` to the segment ``a``-``b``."""
    ab = b - a
    t = np.clip(((p - a) @ ab) / max(float(ab @ ab), 1e-9), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def _outer_radius(alpha: np.ndarray, a: np.ndarray, b: np.ndarray, away: float, limit: float) -> float | None:
    """Median distance from the bone ``a``-``b`` to the matte's edge, walking perpendicular to the
    bone on the side away from the body (``away`` = +1/-1 along the image x axis)."""
    u = (b - a) / max(float(np.linalg.norm(b - a)), 1e-9)
    n = np.array([-u[1], u[0]])
    if n[0] * away < 0:
        n = -n
    H, W = alpha.shape
    steps = np.arange(1.0, limit, 1.0)
    found = []
    for t in np.linspace(0.25, 0.75, 7):
        p = a + t * (b - a)
        q = p[None] + steps[:, None] * n[None]
        xi, yi = np.round(q[:, 0]).astype(int), np.round(q[:, 1]).astype(int)
        inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
        if not inside.any():
            continue
        vals = np.zeros(len(steps))
        vals[inside] = alpha[yi[inside], xi[inside]]
        out = np.nonzero(vals < 0.5)[0]
        if out.size:
            found.append(steps[out[0]])
    return float(np.median(found)) if found else None


def _capsule(shape: tuple[int, int], a: np.ndarray, b: np.ndarray, r: float) -> np.ndarray:
    """Float32 ``[H, W]`` capsule (segment ``a``-``b`` with radius ``r``), antialiased edge."""
    m = np.zeros(shape, np.uint8)
    pa, pb = (int(round(a[0] * 16)), int(round(a[1] * 16))), (int(round(b[0] * 16)), int(round(b[1] * 16)))
    cv2.line(m, pa, pb, 255, max(1, int(round(2 * r))), cv2.LINE_AA, 4)
    cv2.circle(m, pa, int(round(r * 16)), 255, -1, cv2.LINE_AA, 4)
    cv2.circle(m, pb, int(round(r * 16)), 255, -1, cv2.LINE_AA, 4)
    return m.astype(np.float32) * (1.0 / 255.0)


def _bone_map(a0: np.ndarray, b0: np.ndarray, a1: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """Affine ``[2, 3]`` taking segment a0-b0 onto a1-b1: rotation, plus a stretch along the
    bone only (foreshortening); the bone's width is kept."""
    v0, v1 = b0 - a0, b1 - a1
    l0, l1 = float(np.linalg.norm(v0)), float(np.linalg.norm(v1))
    if l0 < 1e-6 or l1 < 1e-6:
        L = np.eye(2)
    else:
        u0, u1 = v0 / l0, v1 / l1
        n0, n1 = np.array([-u0[1], u0[0]]), np.array([-u1[1], u1[0]])
        s = float(np.clip(l1 / l0, 0.35, 1.6))
        L = s * np.outer(u1, u0) + np.outer(n1, n0)
    return np.concatenate([L, (a1 - L @ a0)[:, None]], axis=1)


def cut_arms(
    *,
    portrait: np.ndarray,
    alpha: np.ndarray,
    face: np.ndarray,
    rest_px: np.ndarray,
    rest_conf: np.ndarray,
    portrait_box: tuple[int, int, int, int],
    background: tuple[int, int, int],
    threshold: float,
    iterations: int = 3,
) -> tuple[list[ArmLayer], np.ndarray, LimbReport]:
    """Cut the visible arms out of a placed portrait.

    Args:
        portrait: uint8 ``[H, W, 3]`` the portrait placed on the output frame.
        alpha: float32 ``[H, W]`` person matte in 0..1 (same placement).
        face: float32 ``[H, W]`` face/hair mask in 0..1 (never cut into an arm).
        rest_px: ``[133, 2]`` landmarks in output pixels; ``rest_conf`` ``[133]`` confidences.
        portrait_box: ``(x0, y0, x1, y1)`` where the portrait lies on the frame (a joint outside it
            is not shown).
        background: the frame's background colour (RGB).
        threshold: the confidence a part's end joints need for it to be cut.

    Returns:
        ``(layers, body, report)``: the arm layers, the body composited over the background with
        the arms removed (uint8 ``[H, W, 3]``), and which parts are animated.

    The steps: which parts the portrait shows (:func:`_plan_arms`), the arm's radius
    (:func:`_arm_radius`), each arm's cut region (:func:`_cut_region`), the body with the arms
    removed (:func:`_body_without_arms`), and each arm's layer and mesh (:func:`_arm_layer`).
    """
    report = LimbReport()
    rest = _Rest(rest_px, rest_conf, face, portrait_box, threshold)
    plans = _plan_arms(rest, report)
    r = _arm_radius(alpha, rest, plans)
    face_keep = (cv2.dilate((face > 0.3).astype(np.uint8), np.ones((5, 5), np.uint8)) == 0).astype(np.float32)
    cuts = [_cut_region(plan, rest, face_keep, r) for plan in plans]
    union = np.zeros(alpha.shape, np.float32)
    for cut in cuts:
        union = np.maximum(union, cut.region)
    body = _body_without_arms(portrait, alpha, rest, cuts, union, background)
    built = [_arm_layer(cut, portrait, alpha, rest, iterations, report) for cut in cuts]
    layers = [layer for layer in built if layer is not None]
    report.limited = {p: report.limited[p] for p in PART_NAMES if p in report.limited}
    return layers, body, report


@dataclass(frozen=True)
class _Rest:
    """The rest pose as the cut sees it: landmarks in output pixels with their confidences, the
    face mask, where the portrait lies on the frame, the confidence a cut joint needs, and the
    shoulders' width and centre line (a quarter of the frame and its middle without shoulders)."""

    px: np.ndarray
    conf: np.ndarray
    face: np.ndarray
    box: tuple[int, int, int, int]
    threshold: float

    @property
    def shape(self) -> tuple[int, int]:
        return self.face.shape

    def shown(self, j: int) -> str | None:
        """``None`` when joint ``j`` is shown, else why not."""
        x, y = self.px[j]
        bx0, by0, bx1, by1 = self.box
        if self.conf[j] < self.threshold:
            return f"confidence {self.conf[j]:.2f} < {self.threshold:g}"
        if not (bx0 + 1 <= x < bx1 - 1 and by0 + 1 <= y < by1 - 1):
            return "outside the portrait"
        return None

    def on_face(self, j: int) -> bool:
        H, W = self.shape
        x, y = (int(round(v)) for v in self.px[j])
        return 0 <= x < W and 0 <= y < H and float(self.face[y, x]) > 0.5

    @property
    def shoulders_shown(self) -> bool:
        return self.shown(BODY["left_shoulder"]) is None and self.shown(BODY["right_shoulder"]) is None

    @property
    def shoulder_width(self) -> float:
        ls, rs = self.px[BODY["left_shoulder"]], self.px[BODY["right_shoulder"]]
        return float(np.linalg.norm(ls - rs)) if self.shoulders_shown else 0.25 * self.shape[1]

    @property
    def mid_x(self) -> float:
        ls, rs = self.px[BODY["left_shoulder"]], self.px[BODY["right_shoulder"]]
        return float((ls[0] + rs[0]) / 2) if self.shoulders_shown else self.shape[1] / 2.0


@dataclass
class _ArmPlan:
    """The parts of one arm to cut: their names, bones (keypoint index pairs), the hand's shown
    points, and a forearm carried rigidly on the upper arm (its joint pair) when its wrist is not
    shown."""

    side: str
    parts: list[str]
    joints: list[tuple[int, int]]
    hand_pts: np.ndarray
    carried: tuple[int, int] | None


@dataclass
class _ArmCut:
    """One arm's cut: its plan, the rest bones, the capsule segments and the bone moving each,
    the hard cut region, and the arm's radius."""

    plan: _ArmPlan
    bones: np.ndarray
    segs: np.ndarray
    seg_bone: list[int]
    region: np.ndarray
    r: float


def _plan_arms(rest: _Rest, report: LimbReport) -> list[_ArmPlan]:
    """Which parts of each arm are cut (see the module docstring); the others, with the reason,
    go into ``report``, and the report lists the parts in the fixed part order."""
    plans: list[_ArmPlan] = []
    for side in SIDES:
        sh, el, wr, h0 = _CHAIN[side]
        parts: list[str] = []
        joints: list[tuple[int, int]] = []
        hand_pts = np.zeros(0, dtype=np.int64)
        carried: tuple[int, int] | None = None
        for part, (a, b) in zip(_PARTS, ((sh, el), (el, wr), (wr, _HAND_CENTRE))):
            name = f"{side}_{part}"
            if part == "hand":
                hp = np.arange(h0, h0 + 21)
                ok = np.array([rest.shown(int(j)) is None for j in hp])
                hand_pts = hp[ok] if ok.sum() >= 11 else hand_pts
                why = None if ok.sum() >= 11 else f"not in the portrait ({int(ok.sum())} of 21 hand points shown)"
            else:
                which = a if rest.shown(a) else b
                why = rest.shown(which)
                why = None if why is None else f"not in the portrait ({_joint_name(which)}: {why})"
                if why is None and part == "upper_arm" and rest.on_face(sh):
                    # A shoulder on the face is a mislocated arm (the profile cameraman's left
                    # shoulder lands on his cheek): cutting along it tears the jaw and what the
                    # hand holds, so the arm rides with the body instead.
                    why = f"its landmarks are implausible ({_joint_name(sh)} lies on the face)"
                    report.implausible.append(side)
            if why is not None:
                if parts and part == "forearm":
                    # What the portrait shows of it rides rigidly on the upper arm (its pixels are
                    # real; only its own bend is not invented).
                    carried = (a, b)
                    why += f"; what shows of it moves rigidly with the {parts[-1]}"
                report.not_animated[name] = why
                for later in _PARTS[_PARTS.index(part) + 1 :]:
                    report.not_animated[f"{side}_{later}"] = "its parent part is not animated"
                break
            parts.append(name)
            joints.append((a, b))
        if parts:
            plans.append(_ArmPlan(side, parts, joints, hand_pts, carried))
        else:
            for part in _PARTS:
                report.not_animated.setdefault(f"{side}_{part}", "its parent part is not animated")
    if report.implausible:
        # One arm read with its shoulder on the face means the extractor misread this body (the
        # profile cameraman): the other arm's elbow and wrist come from the same reading, and
        # without a hand found where its wrist is, nothing confirms them (his right elbow lies on
        # the coat's pocket, its wrist on the camera: cut there, a piece of coat swung onto his
        # head). Such an arm rides with the body too; its shoulder still steers the body's warp.
        for plan in [p for p in plans if p.side not in report.implausible and p.hand_pts.size == 0]:
            side, bad = plan.side, report.implausible[0]
            plans.remove(plan)
            report.unconfirmed.append(side)
            report.not_animated[f"{side}_upper_arm"] = (
                f"its landmarks are unconfirmed (the {bad} arm's shoulder lies on the face, and no {side} hand was found)")
            for name in (f"{side}_{later}" for later in _PARTS[1:]):
                why = report.not_animated.get(name, "").split("; what shows of it")[0]
                report.not_animated[name] = why if why.startswith("not in the portrait") else "its parent part is not animated"
    # Report in the fixed part order.
    report.animated = [p for p in PART_NAMES if any(p in plan.parts for plan in plans)]
    report.not_animated = {p: report.not_animated[p] for p in PART_NAMES if p in report.not_animated}
    return plans


def _arm_radius(alpha: np.ndarray, rest: _Rest, plans: list[_ArmPlan]) -> float:
    """The arm's radius: the distance from the upper-arm bone to the matte's outer edge. Arms are
    alike, and one side may have something held against it (its edge then lies far out), so the
    smaller measurement serves both; bounded by plausible proportions of the shoulders."""
    sw, mid_x = rest.shoulder_width, rest.mid_x
    measured = []
    for plan in plans:
        a, b = rest.px[plan.joints[0][0]], rest.px[plan.joints[0][1]]
        d = _outer_radius(alpha, a, b, 1.0 if a[0] >= mid_x else -1.0, 0.6 * sw)
        if d is not None:
            measured.append(d)
    return float(np.clip(1.15 * min(measured) if measured else 0.18 * sw, 0.08 * sw, 0.25 * sw))


def _cut_region(plan: _ArmPlan, rest: _Rest, face_keep: np.ndarray, r: float) -> _ArmCut:
    """One arm's hard cut: a capsule per bone (and per carried forearm), reaching out to the
    matte's edge on the side away from the body, the hand grown round its points, minus the
    face."""
    H, W = rest.shape
    rest_px, parts, joints, hand_pts = rest.px, plan.parts, plan.joints, plan.hand_pts

    def pos(j: int) -> np.ndarray:
        return rest_px[hand_pts].mean(axis=0) if j == _HAND_CENTRE else rest_px[j]

    bones = np.array([[pos(a), pos(b)] for a, b in joints])
    away = _away(bones, rest.mid_x)
    # Capsule segments (the animated bones, then a carried forearm) and the bone moving each.
    segs = [tuple(seg) for seg in bones]
    seg_bone = list(range(len(bones)))
    radii = [r, 0.85 * r, 0.75 * r][: len(parts)]
    if plan.carried is not None:
        a, b = plan.carried
        start = rest_px[a]
        end = rest_px[b] if rest.conf[b] > 0 else start + 0.85 * (bones[-1, 1] - bones[-1, 0])
        segs.append((start, end))
        seg_bone.append(len(bones) - 1)
        radii.append(0.85 * r)
    region = np.zeros((H, W), np.float32)
    yy, xx = np.mgrid[0:H, 0:W]
    for k, ((a, b), rad) in enumerate(zip(segs, radii)):
        cap = _capsule((H, W), a, b, rad)
        # On the side away from the body the arm ends at the matte's edge, wherever that is
        # within 1.5 radii: no sliver of sleeve is left behind on the body.
        u = (b - a) / max(float(np.linalg.norm(b - a)), 1e-9)
        n = np.array([-u[1], u[0]])
        n = n if n[0] * away >= 0 else -n
        outside = ((xx - a[0]) * n[0] + (yy - a[1]) * n[1]) > 0
        cap = np.maximum(cap, _capsule((H, W), a, b, 1.5 * rad) * outside)
        if k == 0:
            # The upper arm starts at the shoulder joint: what lies beyond it, toward the neck
            # (a collar, the astronaut's helmet ring), moves with the body; cut into the arm
            # it would leave with the arm and tear where the neck bends.
            cap *= (((xx - a[0]) * u[0] + (yy - a[1]) * u[1]) >= -SHOULDER_CAP * rad).astype(np.float32)
        if k < len(parts) and parts[k].endswith("hand"):
            # The hand: its points and the wrist, grown by the arm's radius (the palm and the
            # outline lie past the finger joints).
            pts = np.concatenate([rest_px[hand_pts], rest_px[[joints[-1][0]]]])
            hull = cv2.convexHull(np.round(pts).astype(np.int32))
            hm = np.zeros((H, W), np.uint8)
            cv2.fillConvexPoly(hm, hull, 255)
            size = 2 * int(round(r)) + 1
            hm = cv2.dilate(hm, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size)))
            cap = np.maximum(cap, hm.astype(np.float32) / 255.0)
        region = np.maximum(region, cap)
    # A hard cut (the matte keeps the person's soft outline): a soft cut would leave, once
    # the arm moves, a one-pixel ghost of the arm's outline on the body.
    region = ((region >= 0.5) & (face_keep > 0)).astype(np.float32)
    return _ArmCut(plan, bones, np.array(segs), seg_bone, region, r)


def _body_without_arms(
    portrait: np.ndarray, alpha: np.ndarray, rest: _Rest, cuts: list[_ArmCut], union: np.ndarray,
    background: tuple[int, int, int],
) -> np.ndarray:
    """The body layer composited over the background: the torso behind the arms filled, and
    elsewhere under an arm whatever is nearer, the rest of the person or the background."""
    H, W = alpha.shape
    body_rgb = portrait.astype(np.float32)
    body_alpha = alpha.copy()
    if cuts:
        # The torso behind the arms: a polygon from the shoulders (and a band above them, the
        # neck) down to the hips (or the matte's bottom under the shoulders).
        rest_px = rest.px
        ls, rs = rest_px[BODY["left_shoulder"]], rest_px[BODY["right_shoulder"]]
        bottom = float(np.nonzero((alpha > 0.5).any(axis=1))[0].max()) if (alpha > 0.5).any() else H - 1.0
        lh, rh = BODY["left_hip"], BODY["right_hip"]
        lhp = rest_px[lh] if rest.shown(lh) is None else np.array([ls[0], bottom])
        rhp = rest_px[rh] if rest.shown(rh) is None else np.array([rs[0], bottom])
        # The torso's sides run down from about the shoulder joints (which sit inside the arms).
        up = 0.35 * rest.shoulder_width
        poly = np.array([rs, rs - (0, up), ls - (0, up), ls, lhp, rhp])
        torso = np.zeros((H, W), np.uint8)
        cv2.fillPoly(torso, [np.round(poly * 16).astype(np.int32)], 255, cv2.LINE_8, 4)
        behind = torso > 0
        # Elsewhere under an arm: whatever is nearer, the rest of the person (a torso side, a
        # held helmet, a coat the forearm lies on) or the background around the person. A lifted
        # arm uncovers the body where it lay on the body and the background where it stuck out.
        rest_body = ((alpha > 0.5) & (union <= 0)).astype(np.uint8)
        # The background around the person, not a matte's small holes inside the figure (the
        # dark inside of the astronaut's glove rings): a hole must not claim the arm's place.
        rest_bg = (alpha <= 0.5).astype(np.uint8)
        _, bg_ids, bg_stats, _ = cv2.connectedComponentsWithStats(rest_bg, connectivity=4)
        small = np.nonzero(bg_stats[1:, cv2.CC_STAT_AREA] < 0.01 * H * W)[0] + 1  # label 0: not background
        rest_bg[np.isin(bg_ids, small)] = 0
        d_body = cv2.distanceTransform(1 - rest_body, cv2.DIST_L2, 3)
        d_bg = cv2.distanceTransform(1 - rest_bg, cv2.DIST_L2, 3)
        behind |= (union > 0) & (d_body <= d_bg)
        torso_f = behind.astype(np.float32)
        # One fill per arm, from what lies around that arm.
        filled = portrait.astype(np.float32)
        for cut in cuts:
            one = _fill_behind(portrait, alpha, cut.region, torso_f)
            filled[cut.region > 0] = one[cut.region > 0]
        # The body changes only where the arm layer is opaque: at rest, arm over body gives back
        # the portrait (no fill or background showing through the layer's antialiased rim).
        opaque = union >= 0.999
        body_rgb[opaque] = filled[opaque]
        # Outside the torso the body gives way to the background; inside it, the fill is solid
        # only where the matte is (the arm's soft outline is the person's edge: at rest the arm
        # layer's own soft alpha must not show a fill through it).
        # On the layer's antialiased rim (coverage u < 1, arm alpha = alpha * u) the body keeps
        # what makes "arm over body" equal the portrait: 1 - (1 - alpha) / (1 - alpha * u).
        rim = 1.0 - (1.0 - alpha) / np.maximum(1.0 - alpha * union, 1e-6)
        body_alpha = np.where(opaque, torso_f * (alpha >= 0.98), np.clip(rim, 0.0, 1.0)).astype(np.float32)
        # Where the layer's cut moves with the body (``_body_attachment``), a sub-pixel shift of
        # its edge would show a hairline of fill: a thin band inside that cut keeps the portrait.
        keep = _attached_rim(cuts, rest.mid_x, (H, W))
        body_rgb[keep] = portrait[keep]
        body_alpha[keep] = alpha[keep] >= 0.98  # the soft outline stays the rim's (arm over body = portrait)
    bg = np.asarray(background, np.float32)
    return np.clip(body_rgb * body_alpha[..., None] + bg * (1.0 - body_alpha[..., None]) + 0.5, 0, 255).astype(np.uint8)


def _arm_layer(
    cut: _ArmCut, portrait: np.ndarray, alpha: np.ndarray, rest: _Rest, iterations: int, report: LimbReport
) -> ArmLayer | None:
    """One arm's layer: its premultiplied RGBA crop (continued past the frame's edge where the arm
    runs off it), a grid mesh over it, each triangle's bone and draw order, the vertices' skinning
    weights, the ARAP handles along the bones, the vertices on the photo's cut and those that move
    with the body. ``None`` (and the parts reported so) where the matte is empty."""
    H, W = alpha.shape
    plan, bones, segs, seg_bone, r = cut.plan, cut.bones, cut.segs, cut.seg_bone, cut.r
    parts, joints, hand_pts = plan.parts, plan.joints, plan.hand_pts
    bx0, by0, bx1, by1 = rest.box
    a_layer = alpha * cut.region
    ys, xs = np.nonzero(a_layer > 1e-3)
    if ys.size == 0:
        for p in parts:
            report.animated.remove(p)
            report.not_animated[p] = "the matte is empty there"
        return None
    pad = 6
    x0, y0 = max(0, xs.min() - pad), max(0, ys.min() - pad)
    x1, y1 = min(W, xs.max() + 1 + pad), min(H, ys.max() + 1 + pad)
    crop_a = a_layer[y0:y1, x0:x1]
    rgba = np.empty((y1 - y0, x1 - x0, 4), np.uint8)
    rgba[..., :3] = np.clip(portrait[y0:y1, x0:x1].astype(np.float32) * crop_a[..., None] + 0.5, 0, 255)
    rgba[..., 3] = np.clip(crop_a * 255 + 0.5, 0, 255)
    shown_box = (max(0, bx0), max(0, by0), min(W, bx1), min(H, by1))
    edge_cut = _cut_edges(crop_a, (x0, y0), shown_box)
    # Where the arm runs off the frame, the layer continues past the frame's edge (its last
    # line of pixels repeated, ``APRON`` of the frame height): a swing may bring that much of
    # it into view before its cut shows. Only past the frame: at rest nothing invented shows.
    apron = int(round(APRON * H))
    grow = [apron if k in edge_cut and shown_box[k] == (0, 0, W, H)[k] == (x0, y0, x1, y1)[k] else 0 for k in range(4)]
    if any(grow):
        rgba = cv2.copyMakeBorder(rgba, grow[1], grow[3], grow[0], grow[2], cv2.BORDER_REPLICATE)
        crop_a = cv2.copyMakeBorder(crop_a, grow[1], grow[3], grow[0], grow[2], cv2.BORDER_REPLICATE)
        x0, y0 = x0 - grow[0], y0 - grow[1]
    cell = int(np.clip(round(0.5 * r), 6, 32))
    cover = cv2.dilate((crop_a > 1e-3).astype(np.uint8), np.ones((3, 3), np.uint8), iterations=4) > 0
    verts, tris = grid_mesh(cover, cell, origin=(x0, y0))
    # Part of each triangle: the nearest bone to its centre.
    cent = verts[tris].mean(axis=1)
    sb = np.asarray(seg_bone)
    dist_t = np.stack([_seg_dist(cent, a, b) for a, b in segs], axis=1)
    tri_part = sb[np.argmin(dist_t, axis=1)]
    # Only triangles with something of the arm in them are drawn (the rest of the mesh only
    # carries the deformation); the draw grows ids past the drawn ones for the soft edge.
    tri_box = np.concatenate([np.floor(verts[tris].min(axis=1)), np.ceil(verts[tris].max(axis=1))], axis=1)
    tri_box = (tri_box - (x0, y0, x0, y0)).astype(int)
    tri_box[:, 0::2] = np.clip(tri_box[:, 0::2], 0, x1 - x0)
    tri_box[:, 1::2] = np.clip(tri_box[:, 1::2], 0, y1 - y0)
    integral = cv2.integral((crop_a > 1e-3).astype(np.uint8))
    content = (integral[tri_box[:, 3], tri_box[:, 2]] - integral[tri_box[:, 1], tri_box[:, 2]]
               - integral[tri_box[:, 3], tri_box[:, 0]] + integral[tri_box[:, 1], tri_box[:, 0]]) > 0  # fmt: skip
    order = np.argsort(tri_part, kind="stable")
    draw_order = order[content[order]]
    dist_s = np.stack([_seg_dist(verts, a, b) for a, b in segs], axis=1)
    # Per bone: the distance to the nearest segment it moves.
    dist_v = np.stack([dist_s[:, sb == k].min(axis=1) for k in range(len(bones))], axis=1)
    skin = np.exp(-((dist_v - dist_v.min(axis=1, keepdims=True)) / (0.5 * r)) ** 2)
    skin /= skin.sum(axis=1, keepdims=True)
    # Handles: the vertices nearest to points along each bone.
    handles: dict[int, np.ndarray] = {}
    for k, (a, b) in enumerate(bones):
        ts = (0.0, 0.25, 0.5, 0.75, 1.0) if k == 0 else (0.25, 0.5, 0.75, 1.0)
        for t in ts:
            q = a + t * (b - a)
            d = np.linalg.norm(verts - q, axis=1)
            v = int(np.argmin(d))
            if d[v] > 1.5 * cell:
                continue
            w = handles.setdefault(v, np.zeros(len(bones)))
            w[k] += 1.0
    idx = np.array(sorted(handles), dtype=np.int64)
    hw = np.stack([handles[v] / handles[v].sum() for v in idx]) if idx.size else np.zeros((0, len(bones)))
    mesh = ArapMesh(verts, tris, idx)
    attach = _body_attachment(verts, bones[0], r, _away(bones, rest.mid_x))
    attached = np.nonzero(attach > 0)[0]
    edge_v, edge_n = _edge_vertices(verts, edge_cut, shown_box, cell)
    edges = [_EDGE_NAMES[k] for k in sorted(edge_cut)]
    if edges:
        report.limited[parts[0]] = (
            f"the visible photo ends across it at its {' and '.join(edges)} edge{'s' if len(edges) > 1 else ''}: "
            "its motion is held back where the cut would come into view (the arm beyond the "
            "photo is not invented)"
        )
    distal = sorted({j for pair in joints for j in pair if j not in (joints[0][0], _HAND_CENTRE)} | set(hand_pts.tolist()))
    return ArmLayer(plan.side, tuple(parts), bones, tuple(joints), hand_pts, mesh, hw, skin, draw_order,
                    rgba, (int(x0), int(y0)), iterations, edge_v, edge_n,
                    (apron if any(grow) else 0) + EDGE_TOLERANCE * H,
                    np.asarray(distal, np.int64), attached, attach[attached])  # fmt: skip


# Per edge of a rectangle (left, top, right, bottom): is it vertical, and its inward normal.
_EDGE_GEOMETRY = ((True, (1.0, 0.0)), (False, (0.0, 1.0)), (True, (-1.0, 0.0)), (False, (0.0, -1.0)))


def _cut_edges(crop_a: np.ndarray, origin: tuple[int, int], shown: tuple[int, int, int, int]) -> dict[int, tuple[int, int]]:
    """Which edges of the visible rectangle ``shown`` (the photo within the frame, ``(x0, y0, x1,
    y1)`` output pixels) cut across the arm whose alpha crop ``crop_a`` lies at ``origin``:
    ``{edge index (as in _EDGE_NAMES): (first, last) output pixel along the edge where the arm
    touches it}``, from the arm's pixels in the two lines inside that edge."""
    x0, y0 = origin
    h, w = crop_a.shape
    arm = crop_a > 0.05
    cut = {}
    for k, (vertical, normal) in enumerate(_EDGE_GEOMETRY):
        first = (shown[k] - (x0 if vertical else y0)) - (2 if normal[0] + normal[1] < 0 else 0)
        if first < 0 or first + 2 > (w if vertical else h):
            continue  # the arm's crop does not reach this edge
        band = arm[:, first : first + 2] if vertical else arm[first : first + 2]
        on = np.nonzero(band.any(axis=1) if vertical else band.any(axis=0))[0]
        if on.size:
            start = y0 if vertical else x0
            cut[k] = (int(on.min()) + start, int(on.max()) + start)
    return cut


def _edge_vertices(verts: np.ndarray, cut: dict[int, tuple[int, int]], shown: tuple[int, int, int, int],
                   cell: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The mesh vertices on the cuts (:func:`_cut_edges`) and the inward normal of their edge
    (averaged at a corner)."""
    picked: dict[int, np.ndarray] = {}
    for k, (lo, hi) in cut.items():
        vertical, normal = _EDGE_GEOMETRY[k]
        coord, other = (verts[:, 0], verts[:, 1]) if vertical else (verts[:, 1], verts[:, 0])
        near = (np.abs(coord - shown[k]) <= cell) & (other >= lo - cell) & (other <= hi + cell)
        for v in np.nonzero(near)[0]:
            picked[int(v)] = picked.get(int(v), np.zeros(2)) + np.asarray(normal)
    if not picked:
        return np.zeros(0, np.int64), np.zeros((0, 2))
    idx = np.array(sorted(picked), dtype=np.int64)
    normals = np.stack([picked[v] for v in idx])
    return idx, normals / np.linalg.norm(normals, axis=1, keepdims=True)


def _away(bones: np.ndarray, mid_x: float) -> float:
    """+1 for an arm right of the body's midline (its outside is +x), -1 for one left of it."""
    return 1.0 if bones[0, 0, 0] >= mid_x else -1.0


def _attached_rim(cuts: list[_ArmCut], mid_x: float, shape: tuple[int, int], width: int = 2) -> np.ndarray:
    """bool ``[H, W]``: the ``width`` px inside each arm region's cut where that cut moves at
    least half with the body."""
    keep = np.zeros(shape, bool)
    for cut in cuts:
        bones, region, r = cut.bones, cut.region, cut.r
        inside = region.astype(np.uint8)
        ys, xs = np.nonzero(inside & (cv2.erode(inside, _K3, iterations=width) == 0))
        w = _body_attachment(np.stack([xs, ys], axis=1).astype(np.float64), bones[0], r, _away(bones, mid_x))
        keep[ys[w >= 0.5], xs[w >= 0.5]] = True
    return keep


def _body_attachment(verts: np.ndarray, bone: np.ndarray, r: float, away: float) -> np.ndarray:
    """How much each vertex moves with the body instead of the arm, 0..1.

    The layer's cut near the shoulder runs through what belongs to the body — the chest beside
    the arm, a collar, the astronaut's helmet ring — and a rigidly moving arm shows that cut as a
    seam. Skin does not: near the shoulder, the inner side of the upper arm (from a quarter radius
    in from the bone to the cut, over the upper half of the bone) and the cap above the joint
    stay with the body at the cut and blend into the arm's motion away from it."""
    a, b = bone
    length = max(float(np.linalg.norm(b - a)), 1e-9)
    u = (b - a) / length
    n = np.array([-u[1], u[0]])
    n = n if n[0] * away >= 0 else -n
    d = verts - a
    along, lateral = d @ u, d @ n  # px along the bone from the joint; px outward from it

    def ramp(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, 0.0, 1.0)
        return x * x * (3.0 - 2.0 * x)

    inner = ramp((-lateral - 0.25 * r) / (0.75 * r)) * np.clip(1.0 - along / (0.5 * length), 0.0, 1.0)
    cap = ramp(-along / (SHOULDER_CAP * r))
    return np.maximum(inner, cap)


def _joint_name(j: int) -> str:
    from newsmotion_engine.skeleton import KEYPOINT_NAMES

    return KEYPOINT_NAMES[j]


def _fill_behind(portrait: np.ndarray, alpha: np.ndarray, hole: np.ndarray, torso: np.ndarray) -> np.ndarray:
    """The body's colours under ``hole`` (float32 ``[H, W, 3]``, meaningful where ``hole`` > 0):
    inpainted from the person's pixels outside the arms only (not the arm, not the photo's
    background), at half resolution over the hole's box."""
    H, W = alpha.shape
    ys, xs = np.nonzero(hole > 0)
    out = portrait.astype(np.float32)
    if ys.size == 0:
        return out
    m = 12
    x0, y0, x1, y1 = max(0, xs.min() - m), max(0, ys.min() - m), min(W, xs.max() + 1 + m), min(H, ys.max() + 1 + m)
    known = (alpha[y0:y1, x0:x1] > 0.6) & (hole[y0:y1, x0:x1] <= 0)
    if not known.any():
        return out
    crop = portrait[y0:y1, x0:x1]
    # Fill from the garment's typical colour, not from a badge or a strap that happens to touch
    # the hole: only known pixels near the hole and near their median colour (Lab) seed it.
    lab = cv2.cvtColor(crop, cv2.COLOR_RGB2LAB).astype(np.float32)
    ring = cv2.dilate((hole[y0:y1, x0:x1] > 0).astype(np.uint8), np.ones((3, 3), np.uint8), iterations=m) > 0
    near = known & ring
    if near.sum() >= 16:
        med = np.median(lab[near], axis=0)
        # Shading varies more than hue on a garment: lightness counts a quarter.
        dist = np.linalg.norm((lab - med) * (0.25, 1.0, 1.0), axis=2)
        typical = known & (dist < 30.0)
        if (typical & ring).sum() >= max(16, 0.1 * near.sum()):
            known = typical
    h, w = crop.shape[:2]
    sw_, sh_ = max(1, w // 2), max(1, h // 2)
    small = cv2.resize(crop, (sw_, sh_), interpolation=cv2.INTER_AREA)
    small_known = cv2.resize(known.astype(np.uint8), (sw_, sh_), interpolation=cv2.INTER_AREA) > 0.99
    fill = cv2.inpaint(small, (~small_known).astype(np.uint8) * 255, 3, cv2.INPAINT_TELEA)
    fill = cv2.resize(fill, (w, h), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    out[y0:y1, x0:x1] = fill
    return out


def pose_arm(layer: ArmLayer, rest_px: np.ndarray, dst_px: np.ndarray,
             body_px: np.ndarray | None = None) -> tuple[np.ndarray, float]:  # fmt: skip
    """Deformed mesh vertices ``[V, 2]`` for one frame, and the fraction of the arm's own motion
    kept. ``dst_px`` ``[133, 2]`` are the frame's keypoints in output pixels (rest positions where
    the loop lacks a joint). ``body_px`` ``[len(layer.attached), 2]``: where the body's warp puts
    the attached vertices this frame (they blend toward it by ``layer.attachment``); ``None``:
    the arm alone.

    Where the photo ends across the arm (the astronaut's forearms are below it), swinging the arm
    would bring that cut into view: a limb ending in mid-air, the fill and the background behind
    it. The arm's motion relative to its shoulder is then scaled down (bisection on the skinned
    guess) until the cut comes at most ``layer.edge_tolerance`` px into view; the shoulder itself
    still follows the body.
    """
    guess, moved = _skinned(layer, dst_px)
    kept = 1.0
    if layer.edge_vertices.size:
        shift = dst_px[layer.joints[0][0]] - rest_px[layer.joints[0][0]]
        if _exposure(layer, guess, shift) > layer.edge_tolerance:
            lo, hi = 0.0, 1.0
            for _ in range(7):
                mid = 0.5 * (lo + hi)
                if _exposure(layer, _skinned(layer, _toward_rest(layer, rest_px, dst_px, shift, mid))[0], shift) <= layer.edge_tolerance:
                    lo = mid
                else:
                    hi = mid
            kept = lo
            guess, moved = _skinned(layer, _toward_rest(layer, rest_px, dst_px, shift, kept))
    if layer.mesh.handles.size:
        targets = np.einsum("kp,kpi->ki", layer.handle_weights, moved[layer.mesh.handles])
        guess = layer.mesh.solve(targets, guess, layer.iterations)
    if body_px is not None and layer.attached.size:
        v = layer.attached  # guess is this call's own array (skinned or solved)
        guess[v] += layer.attachment[:, None] * (body_px - guess[v])
    return guess, kept


def _skinned(layer: ArmLayer, dst_px: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Linear-blend-skinned vertices ``[V, 2]`` for joint positions ``dst_px``, and every vertex
    moved by every bone's map ``[V, P, 2]``."""

    def pos(pts: np.ndarray, j: int) -> np.ndarray:
        return pts[layer.hand_points].mean(axis=0) if j == _HAND_CENTRE else pts[j]

    maps = np.stack([_bone_map(a0, b0, pos(dst_px, a), pos(dst_px, b))
                     for (a0, b0), (a, b) in zip(layer.bones, layer.joints)])  # fmt: skip  # [P, 2, 3]
    rest = layer.mesh.rest
    moved = np.einsum("pij,vj->vpi", maps[:, :, :2], rest) + maps[None, :, :, 2]  # [V, P, 2]
    return np.einsum("vp,vpi->vi", layer.skin, moved), moved


def _toward_rest(layer: ArmLayer, rest_px: np.ndarray, dst_px: np.ndarray, shift: np.ndarray, kept: float) -> np.ndarray:
    """``dst_px`` with the arm's joints past the shoulder moved back toward the rest pose carried
    by the shoulder's ``shift``: ``kept`` = 1 the loop's pose, 0 the rest arm riding the shoulder."""
    out = dst_px.copy()
    d = layer.distal
    base = rest_px[d] + shift
    out[d] = base + kept * (dst_px[d] - base)
    return out


def _exposure(layer: ArmLayer, verts: np.ndarray, shift: np.ndarray) -> float:
    """How far (px) the cut vertices come into view, beyond riding the shoulder's shift."""
    v = layer.edge_vertices
    return float(np.max(((verts[v] - layer.mesh.rest[v] - shift) * layer.edge_normals).sum(axis=1)))


def draw_arm(frame: np.ndarray, layer: ArmLayer, verts: np.ndarray, scale: int = 2) -> None:
    """Composite the arm, deformed to ``verts``, over ``frame`` (uint8 ``[H, W, 3]``, in place).
    ``scale``: the triangle-id raster and the map are computed every ``scale`` pixels."""
    H, W = frame.shape[:2]
    lo = np.floor(verts.min(axis=0)).astype(int) - 2
    hi = np.ceil(verts.max(axis=0)).astype(int) + 2
    x0, y0 = max(0, int(lo[0])), max(0, int(lo[1]))
    x1, y1 = min(W, int(hi[0])), min(H, int(hi[1]))
    if x1 - x0 < 2 or y1 - y0 < 2:
        return
    tris = layer.mesh.triangles
    Q = verts[tris]  # [F, 3, 2] deformed
    P = layer.rest_crop[tris]  # [F, 3, 2] rest, in layer-crop pixels
    # Backward affine per triangle (deformed -> rest), closed form: A = F E^-1 on the edge
    # vectors, t = p0 - A q0. A folded-flat triangle (|det E| ~ 0) is not drawn.
    e1, e2 = Q[:, 1] - Q[:, 0], Q[:, 2] - Q[:, 0]
    f1, f2 = P[:, 1] - P[:, 0], P[:, 2] - P[:, 0]
    det = e1[:, 0] * e2[:, 1] - e2[:, 0] * e1[:, 1]
    # Folded-flat triangles are not drawn; flipped ones (where the mesh folds over, e.g. the
    # inside of a sharply bent elbow) are drawn first, under the others, so a fold is covered by
    # the unfolded mesh where there is one and never leaves a hole.
    good = np.abs(det) > 1e-3
    upright = np.sign(det) == layer.orientation
    inv_det = np.where(good, 1.0 / np.where(good, det, 1.0), 0.0)
    # E^-1 = [[e2y, -e2x], [-e1y, e1x]] / det
    i00, i01 = e2[:, 1] * inv_det, -e2[:, 0] * inv_det
    i10, i11 = -e1[:, 1] * inv_det, e1[:, 0] * inv_det
    tab = np.zeros((len(tris) + 1, 6), np.float32)  # row 0: no triangle
    a00 = f1[:, 0] * i00 + f2[:, 0] * i10
    a01 = f1[:, 0] * i01 + f2[:, 0] * i11
    a10 = f1[:, 1] * i00 + f2[:, 1] * i10
    a11 = f1[:, 1] * i01 + f2[:, 1] * i11
    tab[1:, 0], tab[1:, 1] = a00, a01
    tab[1:, 2] = P[:, 0, 0] - a00 * Q[:, 0, 0] - a01 * Q[:, 0, 1]
    tab[1:, 3], tab[1:, 4] = a10, a11
    tab[1:, 5] = P[:, 0, 1] - a10 * Q[:, 0, 0] - a11 * Q[:, 0, 1]
    # Rasterize triangle ids at 1/scale resolution: coarse pixel (u, v) is centred on full-res
    # x0 + (u + 0.5) * scale - 0.5 (cv2.resize's convention, so upsampling the map is exact).
    S = int(scale)
    hw, hh = -(-(x1 - x0) // S), -(-(y1 - y0) // S)
    ids = np.zeros((hh, hw), np.uint16)
    half = np.round(((Q - (x0 - 0.5, y0 - 0.5)) / S - 0.5) * 16.0).astype(np.int32)  # 4 fractional bits
    order = layer.draw_order[good[layer.draw_order]]
    for k in np.concatenate([order[~upright[order]], order[upright[order]]]):
        cv2.fillConvexPoly(ids, half[k], int(k) + 1, cv2.LINE_8, 4)
    # Extend the ids past the drawn triangles (their affine maps continue there), so bilinear
    # upsampling never mixes in an empty pixel where the layer is drawn. What is drawn is only
    # where a triangle is (the mesh reaches a few pixels past the layer's matte): an
    # extrapolated map must not paint a sliver of some other part of the layer.
    grown = cv2.dilate(ids, _K3, iterations=3)
    covered = (ids > 0).astype(np.uint8)
    ids = np.where(ids > 0, ids, grown)
    # Each coarse pixel's triangle's map, gathered with a nearest-neighbour remap of the table
    # (vectorized in OpenCV, much faster than numpy fancy indexing).
    idx = ids.astype(np.float32)
    zero = np.zeros_like(idx)
    lin_x = cv2.remap(tab[None, :, 0:3], idx, zero, cv2.INTER_NEAREST)
    lin_y = cv2.remap(tab[None, :, 3:6], idx, zero, cv2.INTER_NEAREST)
    xs = (x0 + (np.arange(hw) + 0.5) * S - 0.5).astype(np.float32)[None, :]
    ys = (y0 + (np.arange(hh) + 0.5) * S - 0.5).astype(np.float32)[:, None]
    coarse = np.empty((hh, hw, 2), np.float32)
    coarse[..., 0] = lin_x[..., 0] * xs + lin_x[..., 1] * ys + lin_x[..., 2]
    coarse[..., 1] = lin_y[..., 0] * xs + lin_y[..., 1] * ys + lin_y[..., 2]
    bw, bh = x1 - x0, y1 - y0
    fine = cv2.resize(coarse, (S * hw, S * hh), interpolation=cv2.INTER_LINEAR)[:bh, :bw]
    cover = cv2.resize(covered, (S * hw, S * hh), interpolation=cv2.INTER_NEAREST)[:bh, :bw]
    m1, m2 = cv2.convertMaps(fine, None, cv2.CV_16SC2)
    rgba = cv2.remap(layer.layer, m1, m2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    # Premultiplied "over", frame * (1 - a) + rgb, over the whole box in three saturating uint8
    # passes (cheaper than gathering the soft rim); nothing outside a drawn triangle counts.
    rgba = cv2.bitwise_and(rgba, rgba, mask=cover)
    inv = cv2.cvtColor(cv2.bitwise_not(cv2.extractChannel(rgba, 3)), cv2.COLOR_GRAY2RGB)
    roi = frame[y0:y1, x0:x1]
    cv2.add(cv2.multiply(roi, inv, scale=1.0 / 255.0), cv2.cvtColor(rgba, cv2.COLOR_RGBA2RGB), dst=roi)
