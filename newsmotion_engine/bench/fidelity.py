"""Benchmark: pose fidelity of every canonical loop on every sample portrait.

Renders each (sample portrait x canonical loop) with the ``warp`` backend at 720x1280 through the
render job (:func:`~newsmotion_engine.render.job.render_persona_loop`, pose fidelity on), plus one
``wan-animate`` render with the ``tiny`` preset (random weights, a small frame: the honest low
baseline; its frames are noise), and reports each render's ``pose_fidelity`` and the aggregate
against the targets (``pck_body`` >= 0.9 over the visible head, torso and arm joints,
``motion_energy_ratio`` >= 0.8). With ``sheets`` it also writes one contact sheet per portrait
(every loop a row, evenly spaced frames) as PNG.

A control per portrait checks the measurement itself: the persona's rest frame repeated
(:data:`FROZEN_FRAMES` frames, a perfect render of a loop that does not move) must score
``pck_body`` 1. It is measured with the extractor the renders are read with (stills) and, for
comparison, with mediapipe's video mode (landmarks tracked between frames), which drifts on it.

A third check per render measures the measurement (``rigid_control``, bench only): the rest
frame moved by the similarity transform that best fits the loop's head, torso and arm motion per
frame — a render perfect by construction for that rigid part — read like a render. A perfect
judge scores it 1; the extractor's score is the ceiling any renderer can be credited with there.

A second check per render separates "the render did not move it" from "the extractor reads it
elsewhere" (``pixel_follow``, bench only, not in telemetry): dense optical flow (OpenCV DIS) from
the clip's first frame to each compared frame, sampled at each visible head, torso and arm joint's
rest position, gives where the render moved that pixel; the share of joint-frames within the same
PCK threshold of the intended position is ``pck_body`` of the pixels. Flow is trustworthy for
moderate motion; for a limb swung far or a part uncovered it is not (then it reads low).

Everything runs in the storage it is given (a private one from ``newsmotion bench fidelity``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from newsmotion_engine.render.fidelity import TARGET_MOTION_ENERGY, TARGET_PCK, FidelityConfig

__all__ = ["bench_fidelity", "aggregate"]

WAN_TINY_OPTIONS = {"preset": "tiny", "steps": 2, "device": "cpu", "dtype": "float32"}
WAN_TINY_SIZE = (64, 128)
SHEET_FRAMES = 6
SHEET_ROW_HEIGHT = 240
FROZEN_FRAMES = 30


def frozen_rest_control(persona: Any, spec: Any) -> dict[str, Any]:
    """``pck_body`` and per-part pck of the persona's rest frame repeated :data:`FROZEN_FRAMES`
    times against its own landmarks, read as stills (the measurement's extractor) and in video
    mode: what a perfect render of a still loop scores."""
    import numpy as np

    from newsmotion_engine.guidance.holistic import HolisticDetector
    from newsmotion_engine.render.fidelity import measure_frames, rest_frame

    rest = rest_frame(persona.portrait, persona.person_mask, spec.width, spec.height, spec.background)
    lm = np.asarray(persona.landmarks, np.float64)
    want = np.repeat(lm[None], FROZEN_FRAMES, axis=0)
    want[..., 2] = 1.0
    hw = np.asarray(persona.portrait).shape[:2]
    out: dict[str, Any] = {"frames": FROZEN_FRAMES}
    for label, still in (("stills", True), ("video_mode", False)):
        with HolisticDetector(static_image_mode=still) as det, HolisticDetector(static_image_mode=True) as rest_det:
            result, reason = measure_frames((rest for _ in range(FROZEN_FRAMES)), want, lm, portrait_hw=(int(hw[0]), int(hw[1])),
                                            config=FidelityConfig(stride=1), detector=det, rest_frame=rest,
                                            rest_detector=rest_det)  # fmt: skip
        out[label] = None if result is None else {
            "pck_body": result.pck_body, "per_part_pck": {k: v["pck"] for k, v in result.per_part.items()},
            "mean_px": result.mean_px,
        }  # fmt: skip
    return out


def similarity_fit(src: Any, dst: Any) -> Any:
    """The least-squares similarity (rotation, uniform scale, translation) taking 2-D points
    ``src`` to ``dst`` (Umeyama 1991), as a 2x3 matrix."""
    import numpy as np

    src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
    mu_s, mu_d = src.mean(0), dst.mean(0)
    a, b = src - mu_s, dst - mu_d
    u, sig, vt = np.linalg.svd(b.T @ a / len(src))
    d = np.diag([1.0, np.sign(np.linalg.det(u @ vt))])
    rot = u @ d @ vt
    var = (a**2).sum() / len(src)
    scale = float((sig * np.diag(d)).sum() / var) if var > 0 else 1.0
    return np.hstack([scale * rot, (mu_d - scale * rot @ mu_s)[:, None]])


def rigid_motion_control(persona: Any, spec: Any, intended: Any, stride: int, detector: Any = None) -> dict[str, Any] | None:
    """The measurement's ceiling on one loop's motion: per frame, the similarity transform that
    best takes the persona's visible head, torso and arm landmarks to where the loop wants them
    (least squares), applied to the rest frame — a render that is perfect by construction for
    the rigid part of the loop's motion — and read like a render against those landmarks moved
    by the same transform. A perfect judge scores it pck 1 and motion energy 1; what the
    extractor scores is the most any renderer can be credited with at this motion (bench only).
    ``detector``: read the frames (then the rest frame) with this one instead of the extractor
    (``benchmarks/fidelity_smoothing.py`` records and replays the readings)."""
    import cv2
    import numpy as np

    from newsmotion_engine.guidance.holistic import HolisticDetector
    from newsmotion_engine.render.fidelity import PARTS, TARGET_PARTS, VISIBLE_CONFIDENCE, frame_placement, measure_frames, persona_visible, rest_frame

    intended = np.asarray(intended, np.float64)
    rest = rest_frame(persona.portrait, persona.person_mask, spec.width, spec.height, spec.background)
    H, W = rest.shape[:2]
    hw = np.asarray(persona.portrait).shape[:2]
    ox, oy, w, h = frame_placement((int(hw[0]), int(hw[1])), W, H)
    lm = np.asarray(persona.landmarks, np.float64)
    visible = persona_visible(lm)
    body = np.asarray([j for name in TARGET_PARTS for j in PARTS[name] if visible[j]])
    if body.size < 2:
        return None
    to_px = lambda kp: np.stack([ox + kp[..., 0] * w, oy + kp[..., 1] * h], axis=-1)  # noqa: E731
    rest_px = to_px(lm)
    want = intended.copy()
    transforms = []
    for i in range(intended.shape[0]):
        use = body[intended[i, body, 2] >= VISIBLE_CONFIDENCE]
        m = similarity_fit(rest_px[use], to_px(intended[i])[use]) if use.size >= 2 else np.hstack([np.eye(2), np.zeros((2, 1))])
        moved = rest_px @ m[:, :2].T + m[:, 2]
        want[i, :, 0], want[i, :, 1] = (moved[:, 0] - ox) / w, (moved[:, 1] - oy) / h
        transforms.append(m)

    def frames():
        for i, m in enumerate(transforms):
            yield rest if i % stride else cv2.warpAffine(rest, m, (W, H), flags=cv2.INTER_LINEAR, borderValue=tuple(int(c) for c in spec.background))

    def measure(det: Any) -> Any:
        return measure_frames(frames(), want, lm, portrait_hw=(int(hw[0]), int(hw[1])), config=FidelityConfig(stride=stride),
                              detector=det, rest_frame=rest)[0]  # fmt: skip

    if detector is not None:
        result = measure(detector)
    else:
        with HolisticDetector(static_image_mode=True) as det:
            result = measure(det)
    if result is None:
        return None
    return {"pck_body": result.pck_body, "motion_energy_ratio": result.motion_energy_ratio, "mean_px": result.mean_px,
            "per_part_pck": {k: v["pck"] for k, v in result.per_part.items() if k in TARGET_PARTS},
            "per_part_energy": {k: v.get("motion_energy_ratio") for k, v in result.per_part.items() if k in TARGET_PARTS}}  # fmt: skip


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means and minima of ``pck_body``, ``pck`` and ``motion_energy_ratio`` over ``rows`` (renders
    with a measurement), and how many meet the targets."""
    measured = [r for r in rows if r.get("pose_fidelity")]

    def values(key: str) -> list[float]:
        return [r["pose_fidelity"][key] for r in measured if r["pose_fidelity"].get(key) is not None]

    out: dict[str, Any] = {"renders": len(rows), "measured": len(measured)}
    for key in ("pck_body", "pck", "motion_energy_ratio", "mean_px"):
        v = values(key)
        out[key] = {"mean": round(statistics.fmean(v), 4), "min": round(min(v), 4), "max": round(max(v), 4)} if v else None
    out["meets_pck"] = sum(1 for v in values("pck_body") if v >= TARGET_PCK)
    out["meets_motion_energy"] = sum(1 for v in values("motion_energy_ratio") if v >= TARGET_MOTION_ENERGY)
    out["meets_both"] = sum(1 for r in measured if r["pose_fidelity"]["meets_targets"])
    out["targets_met"] = bool(measured) and out["meets_both"] == len(rows)
    controls = [r["rigid_control"] for r in measured if r.get("rigid_control")]
    if controls:  # what a render perfect for the loop's rigid motion scores: the judge's ceiling
        pcks = [c["pck_body"] for c in controls if c["pck_body"] is not None]
        energies = [c["motion_energy_ratio"] for c in controls if c["motion_energy_ratio"] is not None]
        out["rigid_control"] = {
            "measured": len(controls),
            "pck_body_mean": round(statistics.fmean(pcks), 4) if pcks else None,
            "motion_energy_mean": round(statistics.fmean(energies), 4) if energies else None,
            "meets_pck": sum(p >= TARGET_PCK for p in pcks),
            "meets_motion_energy": sum(e >= TARGET_MOTION_ENERGY for e in energies),
            "meets_both": sum(1 for c in controls if (c["pck_body"] or 0) >= TARGET_PCK
                              and (c["motion_energy_ratio"] if c["motion_energy_ratio"] is not None else -1) >= TARGET_MOTION_ENERGY),
        }  # fmt: skip
    return out


def pixel_follow(video: Path | str, intended: Any, persona: Any, threshold_px: float, stride: int) -> dict[str, Any]:
    """Where the render moved the visible head, torso and arm joints' pixels (optical flow from
    the first frame), against where they were asked to go (see the module docstring)."""
    import cv2
    import numpy as np

    from newsmotion_engine.render.fidelity import PARTS, TARGET_PARTS, VISIBLE_CONFIDENCE, frame_placement, persona_visible
    from newsmotion_engine.videoio import iter_frames

    intended = np.asarray(intended, np.float64)
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    first = None
    hits: dict[str, list[int]] = {name: [0, 0] for name in TARGET_PARTS}
    err_sum, err_n = 0.0, 0
    for i, rgb in enumerate(iter_frames(video)):
        if i >= intended.shape[0]:
            break
        if first is None:
            H, W = rgb.shape[:2]
            ox, oy, w, h = frame_placement(np.asarray(persona.portrait).shape[:2], W, H)

            def to_px(kp: np.ndarray) -> np.ndarray:
                return np.stack([ox + kp[..., 0] * w, oy + kp[..., 1] * h], axis=-1)

            visible = persona_visible(persona.landmarks)
            first = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
            start_px = to_px(intended[0])
            continue
        if i % stride:
            continue
        flow = dis.calc(first, cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), None)
        want = to_px(intended[i])
        for name in TARGET_PARTS:
            for j in PARTS[name]:
                x, y = (int(round(v)) for v in start_px[j])
                if not (visible[j] and intended[i, j, 2] >= VISIBLE_CONFIDENCE and 2 <= x < W - 2 and 2 <= y < H - 2):
                    continue
                moved = start_px[j] + flow[y - 2 : y + 3, x - 2 : x + 3].reshape(-1, 2).mean(axis=0)
                e = float(np.linalg.norm(moved - want[j]))
                hits[name][0] += int(e <= threshold_px)
                hits[name][1] += 1
                err_sum, err_n = err_sum + e, err_n + 1
    total = sum(n for _, n in hits.values())
    return {
        "pck_body": round(sum(k for k, _ in hits.values()) / total, 4) if total else None,
        "per_part_pck": {name: (round(k / n, 4) if n else None) for name, (k, n) in hits.items()},
        "mean_px": round(err_sum / err_n, 2) if err_n else None,
        "threshold_px": threshold_px,
        "flow": "OpenCV DIS (medium), first frame to each compared frame",
    }


def _arm_landmarks(persona: Any) -> dict[str, list[float]]:
    """The persona's shoulder, elbow and wrist landmarks ``[x, y, confidence]`` (normalized to its
    canvas): what the arm cut and the visible-joint rule saw."""
    import numpy as np

    from newsmotion_engine.skeleton import BODY

    lm = np.asarray(persona.landmarks, np.float64)
    names = [f"{side}_{j}" for side in ("left", "right") for j in ("shoulder", "elbow", "wrist")]
    return {n: [round(float(v), 3) for v in lm[BODY[n]]] for n in names}


def _row(tele: Any, portrait: str) -> dict[str, Any]:
    pf = tele.pose_fidelity
    return {
        "portrait": portrait,
        "loop": tele.loop_id,
        "backend": tele.backend,
        "weights": tele.weights,
        "size": f"{tele.width}x{tele.height}",
        "fps_achieved": tele.fps_achieved,
        "pose_fidelity": None if pf is None else {k: v for k, v in tele.to_dict()["pose_fidelity"].items()},
        "pose_fidelity_reason": tele.pose_fidelity_reason,
    }


def bench_fidelity(
    storage: Any,
    *,
    portraits: list[str] | None = None,
    loops: list[str] | None = None,
    stride: int = 4,
    wan_tiny: bool = True,
    sheets: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Render and measure; returns the JSON-able result (see the module docstring)."""
    from newsmotion_engine.bench.common import machine_info
    from newsmotion_engine.guidance.catalogue import canonical_loops
    from newsmotion_engine.guidance.cache import ensure_guidance
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.clip import retargeted_keypoints
    from newsmotion_engine.render.job import render_persona_loop
    from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait

    say = log or (lambda _m: None)
    portraits = portraits or list(SAMPLE_PORTRAITS)
    loops = loops or list(canonical_loops())
    config = FidelityConfig(stride=stride)
    started = time.perf_counter()
    for loop_id in loops:
        ensure_guidance(storage, loop_id)
    personas = {}
    for name in portraits:
        say(f"persona {name}")
        personas[name], _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))

    spec = RenderSpec()
    warp = get_backend("warp")
    warp.load()
    rows: list[dict[str, Any]] = []
    outputs: dict[str, list[tuple[str, str]]] = {}
    try:
        for name in portraits:
            for loop_id in loops:
                tele = render_persona_loop(storage, name, loop_id, warp, spec, force=True, fidelity=config)
                row = _row(tele, name)
                if tele.pose_fidelity is not None:
                    intended = retargeted_keypoints(ensure_guidance(storage, loop_id)[0], personas[name])
                    row["pixel_follow"] = pixel_follow(tele.output, intended, personas[name],
                                                       tele.pose_fidelity.threshold_px, stride)  # fmt: skip
                    row["rigid_control"] = rigid_motion_control(personas[name], spec, intended, stride)
                rows.append(row)
                outputs.setdefault(name, []).append((loop_id, tele.output))
                pf = row["pose_fidelity"]
                say(f"warp {name} x {loop_id}: " + (
                    f"pck_body {pf['pck_body']}, pck {pf['pck']}, motion energy {pf['motion_energy_ratio']}" if pf
                    else f"not measured ({row['pose_fidelity_reason']})"))  # fmt: skip
    finally:
        warp.close()
    warp_info = warp.describe()

    baseline = None
    if wan_tiny:
        name, loop_id = portraits[0], "nod" if "nod" in loops else loops[0]
        say(f"wan-animate tiny (random weights) {name} x {loop_id} at {WAN_TINY_SIZE[0]}x{WAN_TINY_SIZE[1]}")
        wan = get_backend("wan-animate", **WAN_TINY_OPTIONS)
        wan_spec = RenderSpec(*WAN_TINY_SIZE)
        try:
            wan.load()
            guidance, _ = ensure_guidance(storage, loop_id)
            wan.prepare_guidance(guidance, wan_spec)
            wan.prepare_persona(personas[name], wan_spec)
            tele = render_persona_loop(storage, name, loop_id, wan, wan_spec, force=True, fidelity=config)
            baseline = _row(tele, name)
        finally:
            wan.close()

    if sheets is not None:
        from newsmotion_engine.video.frames import write_loop_sheet

        for name, clips in outputs.items():
            path = write_loop_sheet(clips, sheets / f"{name}_warp.png", count=SHEET_FRAMES, height=SHEET_ROW_HEIGHT,
                                    title=f"{name} - warp backend, {SHEET_FRAMES} evenly spaced frames per loop")  # fmt: skip
            say(f"contact sheet {path}")

    controls = {}
    for name in portraits:
        say(f"control: {name}'s rest frame x {FROZEN_FRAMES} (a perfect still render)")
        controls[name] = frozen_rest_control(personas[name], spec)
    by_portrait = {name: aggregate([r for r in rows if r["portrait"] == name]) for name in portraits}
    return {
        "benchmark": "fidelity",
        "targets": {"pck_body": TARGET_PCK, "motion_energy_ratio": TARGET_MOTION_ENERGY},
        "stride": stride,
        "size": f"{spec.width}x{spec.height}",
        "portraits": {n: {"kind": SAMPLE_PORTRAITS[n].kind, "origin": SAMPLE_PORTRAITS[n].origin,
                          "framing": personas[n].metadata.get("framing"), "visible_parts": personas[n].visible_parts,
                          "arm_landmarks": _arm_landmarks(personas[n])}
                      for n in portraits},  # fmt: skip
        "control_frozen_rest": controls,
        "warp": {"backend_info": warp_info, "aggregate": aggregate(rows), "by_portrait": by_portrait, "renders": rows},
        "wan_animate_tiny": None if baseline is None else {
            "options": WAN_TINY_OPTIONS, "size": f"{WAN_TINY_SIZE[0]}x{WAN_TINY_SIZE[1]}",
            "note": "random weights: frames are noise; the honest low baseline", "render": baseline,
        },  # fmt: skip
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine_info(),
    }


def headline(result: dict[str, Any]) -> dict[str, float | str]:
    """The figures people read from :func:`bench_fidelity`'s result: the warp renders' aggregate
    against the targets, and the judge's ceiling (a perfect rigid render)."""
    agg = result["warp"]["aggregate"]
    return {
        "warp pck head+torso+arms, mean": round(agg["pck_body"]["mean"], 3),
        "warp motion energy, mean": round(agg["motion_energy_ratio"]["mean"], 3),
        "renders meeting both targets": f"{agg['meets_both']} / {agg['renders']}",
        "a perfect rigid render's pck, mean": round(agg["rigid_control"]["pck_body_mean"], 3),
    }
