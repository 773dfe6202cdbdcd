"""Fitting SMPL joint rotations to a loop's 2D keypoints (the champ backend's Tier-1 step).

Champ's official preprocessing fits SMPL to every driving frame with 4D-Humans (HMR2, a learned
3D regressor) and transfers the motion onto the reference's SMPL. We have no such network here;
what we have are the loop's 2D whole-body keypoints, so :func:`fit_pose` does the simplest honest
thing: a small torch optimisation (Adam) of the 24 joint rotations (axis-angle, the root's
included) and a per-frame weak-perspective camera (scale and 2D offset; the camera looks along
-z, fixed orientation) so that the projected SMPL joints land on the keypoints.

What the fit does: 12 body joints (shoulders, elbows, wrists, hips, knees, ankles) against their
COCO points, the hands' ends against the middle-finger knuckles, the head joint against the
ears' midpoint and the model's nose (its head vertex furthest forward at rest) against the nose,
each weighted by the keypoint's confidence; a small prior pulls rotations toward the rest pose,
a smoothness term toward the neighbouring frames, and a hinge pushes elbows, wrists and hands
that go behind the chest forward (a presenter gestures in front of the body).

What it does not do: no body shape (betas stay 0, the mean shape), no fingers, no face, no
feet orientation; depth is not observed, so a limb bending toward or away from the camera is
resolved only by the priors (the smaller rotation, and arms in front of the chest). The retargeting onto the persona happens
at render time, by a camera refit per frame (:mod:`.maps`), not by re-fitting the pose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from newsmotion_engine import skeleton as sk
from newsmotion_engine.render.backends.champ.raster import one_cpu_thread
from newsmotion_engine.render.backends.champ.smpl import SmplModel, kinematics, rodrigues

__all__ = ["FIT_VERSION", "FitConfig", "FitResult", "JOINT_PAIRS", "fit_pose", "head_vertex", "target_points"]

FIT_VERSION = 1

# (SMPL joint, COCO-WholeBody keypoint): the joints the fit matches one to one.
JOINT_PAIRS = (
    (16, sk.BODY["left_shoulder"]), (17, sk.BODY["right_shoulder"]), (18, sk.BODY["left_elbow"]),
    (19, sk.BODY["right_elbow"]), (20, sk.BODY["left_wrist"]), (21, sk.BODY["right_wrist"]),
    (1, sk.BODY["left_hip"]), (2, sk.BODY["right_hip"]), (4, sk.BODY["left_knee"]), (5, sk.BODY["right_knee"]),
    (7, sk.BODY["left_ankle"]), (8, sk.BODY["right_ankle"]),
    (22, sk.LEFT_HAND_START + 9), (23, sk.RIGHT_HAND_START + 9),  # hand ends <-> middle-finger knuckles
)  # fmt: skip
HEAD_JOINT = 15
CHEST_JOINT = 9  # spine3
ARM_JOINTS = [18, 19, 20, 21, 22, 23]  # elbows, wrists, hand ends
EARS = (sk.BODY["left_ear"], sk.BODY["right_ear"])
NOSE = sk.BODY["nose"]


@dataclass(frozen=True)
class FitConfig:
    """The optimisation's settings (part of the Tier-1 cache key)."""

    iterations: int = 100
    lr: float = 0.08
    # Against the data term (torso lengths squared): 1e-2 held a lowered arm visibly short of its
    # joints on the synthetic body; 1e-3 meets test_fit_recovers_a_posed_body_from_its_2d_joints.
    prior: float = 1e-3  # pull of every rotation toward the rest pose
    smooth: float = 1e-2  # pull of each frame's rotations toward its neighbours'
    # Push on elbows, wrists and hands that go behind the chest (squared metres): a presenter's
    # arms work in front of the body, and 2D cannot tell front from back.
    front: float = 1.0
    conf_threshold: float = 0.3

    def as_dict(self) -> dict:
        return {"version": FIT_VERSION, "iterations": self.iterations, "lr": self.lr, "prior": self.prior,
                "smooth": self.smooth, "front": self.front, "conf_threshold": self.conf_threshold}  # fmt: skip


@dataclass(frozen=True)
class FitResult:
    """``pose`` float32 ``[T, 24, 3]`` axis-angle; ``error`` float32 ``[T]``: each frame's
    confidence-weighted mean distance of the matched points, in torso lengths."""

    pose: np.ndarray
    error: np.ndarray


def head_vertex(model: SmplModel) -> int:
    """The vertex that stands for the nose: of those skinned mostly to the head, the one furthest
    forward (+z) in the rest pose (SMPL's nose tip; any body in SMPL's layout has one)."""
    head = np.flatnonzero(model.part_labels() == HEAD_JOINT)
    if head.size == 0:
        return int(np.argmax(model.v_template[:, 2]))
    return int(head[np.argmax(model.v_template[head, 2])])


def target_points(keypoints: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The fit's targets from ``keypoints [T, 133, 3]`` (any 2D units): ``points [T, P, 2]`` and
    ``weights [T, P]`` in the order of :data:`JOINT_PAIRS`, then the head joint (ears' midpoint,
    half weight, both ears needed), then the nose."""
    kp = np.asarray(keypoints, np.float32)
    conf = kp[..., 2]
    pts = [kp[:, c, :2] for _, c in JOINT_PAIRS]
    wts = [np.where(conf[:, c] >= threshold, conf[:, c], 0.0) for _, c in JOINT_PAIRS]
    ears_ok = (conf[:, EARS[0]] >= threshold) & (conf[:, EARS[1]] >= threshold)
    pts.append(0.5 * (kp[:, EARS[0], :2] + kp[:, EARS[1], :2]))
    wts.append(np.where(ears_ok, 0.5 * np.minimum(conf[:, EARS[0]], conf[:, EARS[1]]), 0.0))
    pts.append(kp[:, NOSE, :2])
    wts.append(np.where(conf[:, NOSE] >= threshold, conf[:, NOSE], 0.0))
    return np.stack(pts, 1), np.stack(wts, 1).astype(np.float32)


def _torso(points: np.ndarray, weights: np.ndarray) -> float:
    """Median shoulder-to-hip distance (or shoulder width x 1.5 without hips) of the targets."""
    ls, rs, lh, rh = 0, 1, 6, 7
    sh = 0.5 * (points[:, ls] + points[:, rs])
    sh_ok = (weights[:, ls] > 0) & (weights[:, rs] > 0)
    hip_ok = sh_ok & (weights[:, lh] > 0) & (weights[:, rh] > 0)
    if hip_ok.any():
        hip = 0.5 * (points[:, lh] + points[:, rh])
        return float(np.median(np.linalg.norm(sh - hip, axis=-1)[hip_ok]))
    if sh_ok.any():
        return 1.5 * float(np.median(np.linalg.norm(points[:, ls] - points[:, rs], axis=-1)[sh_ok]))
    raise ValueError("no frame has both shoulders")


def model_points(model: SmplModel, pose, nose_offset):
    """The model's points matching :func:`target_points`, 3D ``[T, P, 3]``, and all joints
    ``[T, 24, 3]`` (torch)."""
    import torch

    R, J = kinematics(rodrigues(pose), torch.from_numpy(model.rest_joints()), model.parents)
    nose = (R[:, HEAD_JOINT] @ nose_offset[:, None])[..., 0] + J[:, HEAD_JOINT]
    idx = [j for j, _ in JOINT_PAIRS] + [HEAD_JOINT]
    return torch.cat([J[:, idx], nose[:, None]], 1), J


def weak_perspective(points3d, weights, targets):
    """Per frame, the scale ``s`` and offset ``t`` minimising ``sum w |s (X, -Y) + t - q|^2``
    (closed form; torch or numpy-compatible torch tensors): ``(s [T], t [T, 2])``."""
    import torch

    p = torch.stack([points3d[..., 0], -points3d[..., 1]], -1)
    w = weights[..., None]
    wsum = w.sum(1).clamp_min(1e-8)
    pm, qm = (w * p).sum(1) / wsum, (w * targets).sum(1) / wsum
    pc, qc = p - pm[:, None], targets - qm[:, None]
    s = (w * pc * qc).sum((1, 2)) / (w * pc * pc).sum((1, 2)).clamp_min(1e-8)
    return s, qm - s[:, None] * pm


def fit_pose(model: SmplModel, keypoints: np.ndarray, frame_size: tuple[int, int], config: FitConfig = FitConfig()) -> FitResult:
    """Fit SMPL joint rotations to ``keypoints [T, 133, 3]`` (normalized to a frame of
    ``frame_size = (width, height)`` pixels); see the module docstring.

    Raises:
        ValueError: no frame has both shoulders confident (nothing to anchor the body on).
    """
    import torch

    w_px, h_px = frame_size
    kp = np.array(keypoints, np.float32, copy=True)
    kp[..., 0] *= w_px
    kp[..., 1] *= h_px
    pts_np, wts_np = target_points(kp, config.conf_threshold)
    torso = _torso(pts_np, wts_np)
    T = kp.shape[0]
    pts, wts = torch.from_numpy(pts_np / torso), torch.from_numpy(wts_np)
    nose_offset = torch.from_numpy(model.v_template[head_vertex(model)] - model.rest_joints()[HEAD_JOINT])
    with one_cpu_thread():
        pose = _optimise(model, pts, wts, nose_offset, T, config)
    with torch.no_grad():
        P, _ = model_points(model, pose, nose_offset)
        s, t = weak_perspective(P, wts, pts)
        proj = torch.stack([P[..., 0], -P[..., 1]], -1) * s[:, None, None] + t[:, None]
        err = (wts * (proj - pts).norm(dim=-1)).sum(1) / wts.sum(1).clamp_min(1e-8)
    return FitResult(pose.detach().numpy().astype(np.float32), err.numpy().astype(np.float32))


def _optimise(model: SmplModel, pts, wts, nose_offset, T: int, config: FitConfig):
    import torch

    pose = torch.zeros(T, 24, 3, requires_grad=True)
    opt = torch.optim.Adam([pose], lr=config.lr)
    for _ in range(config.iterations):
        opt.zero_grad()
        P, J = model_points(model, pose, nose_offset)
        s, t = weak_perspective(P, wts, pts)
        proj = torch.stack([P[..., 0], -P[..., 1]], -1) * s[:, None, None] + t[:, None]
        data = (wts * ((proj - pts) ** 2).sum(-1)).sum() / wts.sum().clamp_min(1e-8)
        loss = data + config.prior * (pose[:, 1:] ** 2).sum((-1, -2)).mean()  # the root turns freely
        behind = torch.relu(J[:, CHEST_JOINT, None, 2] - J[:, ARM_JOINTS, 2])
        loss = loss + config.front * (behind**2).sum(-1).mean()
        if T > 1:
            loss = loss + config.smooth * ((pose[1:] - pose[:-1]) ** 2).sum((-1, -2)).mean()
        loss.backward()
        opt.step()
    return pose.detach()
