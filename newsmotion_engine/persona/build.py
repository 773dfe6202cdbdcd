"""Building a persona cache from a portrait (the format: :mod:`newsmotion_engine.persona.cache`).

:func:`ensure_persona` reuses a current cache or builds one: read the portrait (EXIF orientation,
alpha), find its landmarks on a scaled copy (mediapipe holistic), turn a sideways photo upright,
frame it on the 720x1280 canvas (:mod:`newsmotion_engine.persona.image`: placed from the
landmarks' head-top estimate, then once more from the top the matte measures), matte the person
(:mod:`newsmotion_engine.persona.matte`), drop landmarks outside the photo, derive the face mask,
run :func:`~newsmotion_engine.persona.cache.persona_problems` and only then write the cache. The
expensive work runs before the persona's lock is taken, so a bad portrait creates nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine import cachedir, skeleton
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.persona import image as image_mod
from newsmotion_engine.persona import landmarks as landmarks_mod
from newsmotion_engine.persona import matte as matte_mod
from newsmotion_engine.persona.cache import (
    MIN_PERSON_COVERAGE,
    SCHEMA,
    VISIBLE_THRESHOLD,
    PersonaCache,
    image_source,
    load_persona,
    persona_framing,
    persona_params,
    persona_problems,
    persona_source_image,
    view_bounds,
)
from newsmotion_engine.persona.image import CANVAS_HEIGHT, CANVAS_WIDTH
from newsmotion_engine.storage import Storage

__all__ = ["ensure_persona"]

Progress = Callable[[int, int], None]
_STEPS = 5


def _tools() -> dict[str, str]:
    import PIL

    from newsmotion_engine.guidance.holistic import mediapipe_version

    return {"mediapipe": mediapipe_version(), "opencv": cv2.__version__, "numpy": np.__version__, "pillow": PIL.__version__}


@dataclass(frozen=True)
class _Built:
    portrait: np.ndarray
    person_mask: np.ndarray
    face_mask: np.ndarray
    landmarks: np.ndarray
    extra: dict[str, Any]


def _to_canvas(landmarks: np.ndarray, placement: image_mod.Placement) -> np.ndarray:
    """Landmarks normalized to the scaled block -> normalized to the canvas; absent points stay 0."""
    out = np.zeros_like(landmarks)
    present = landmarks[:, 2] > 0
    out[:, 0] = (placement.offset_x + landmarks[:, 0] * placement.width) / CANVAS_WIDTH
    out[:, 1] = (placement.offset_y + landmarks[:, 1] * placement.height) / CANVAS_HEIGHT
    out[:, 2] = landmarks[:, 2]
    out[~present] = 0.0
    return out


def _detect_on_block(rgb: np.ndarray) -> tuple[image_mod.Placement, np.ndarray, np.ndarray]:
    """``(placement, block, landmarks normalized to the block)`` of an upright RGB image."""
    from newsmotion_engine.guidance.holistic import detect_image

    placement = image_mod.placement_for(rgb.shape[1], rgb.shape[0])
    block = image_mod.scale_block(rgb, placement)
    # Landmarks on the scaled block, not the (up to 50 MP) source: holistic downsizes internally
    # anyway. The block is the whole photo scaled uniformly, so block-normalized landmarks are
    # also photo-normalized.
    return placement, block, detect_image(block)


_CONFIDENT = 0.5


def _framing_targets(lm: np.ndarray, width: int, height: int) -> image_mod.FramingTargets | None:
    """Head top, centre line and hips of a photo (source pixels) from its landmarks (normalized
    to the photo). The head top is estimated from the face (brows minus 0.9 brow-to-chin: the
    hair above the brows) or the head points; the build then measures it on the matte. ``None``
    without a head."""
    px = lm[:, :2] * np.array([width, height], np.float64)
    ok = (lm[:, 2] >= _CONFIDENT) & (lm[:, 0] >= 0) & (lm[:, 0] <= 1) & (lm[:, 1] >= 0) & (lm[:, 1] <= 1)
    face = slice(skeleton.FACE_START, skeleton.FACE_START + 68)
    head_pts = [skeleton.BODY[n] for n in ("nose", "left_eye", "right_eye", "left_ear", "right_ear")]
    if float(lm[face, 2].mean()) >= VISIBLE_THRESHOLD:
        f = px[face]
        brows = np.concatenate([f[skeleton.FACE68["right_brow"]], f[skeleton.FACE68["left_brow"]]])
        chin = f[skeleton.FACE68["jaw"]][8]
        top = float(brows[:, 1].min() - 0.9 * max(chin[1] - brows[:, 1].mean(), 1.0))
        head_x = float(f[:, 0].mean())
    elif ok[head_pts].any():
        pts = px[[i for i in head_pts if ok[i]]]
        spread = float(np.ptp(pts[:, 0])) if len(pts) > 1 else 0.1 * width
        top = float(pts[:, 1].min() - 1.2 * max(spread, 1.0))
        head_x = float(pts[:, 0].mean())
    else:
        return None
    ls, rs = skeleton.BODY["left_shoulder"], skeleton.BODY["right_shoulder"]
    lh, rh = skeleton.BODY["left_hip"], skeleton.BODY["right_hip"]
    shoulders = bool(ok[ls] and ok[rs])
    centre_x = float(0.5 * (px[ls, 0] + px[rs, 0])) if shoulders else head_x
    neck_y = float(0.5 * (px[ls, 1] + px[rs, 1])) if shoulders else None
    hips = bool(ok[lh] and ok[rh]) and max(px[lh, 1], px[rh, 1]) < 0.98 * height
    hips_y = float(0.5 * (px[lh, 1] + px[rh, 1])) if hips else None
    return image_mod.FramingTargets(head_top_y=max(top, 0.0), centre_x=centre_x, hips_y=hips_y, neck_y=neck_y)


def _matte_head_top(person: np.ndarray, landmarks: np.ndarray, window: tuple[int, int, int, int]) -> float | None:
    """The head's top row on the canvas measured on the matte (hair included): the first row,
    over the head's width, where the matte is solid. ``None`` when the photo's own top edge cuts
    the head (then the top is not in the photo) or there is no head."""
    x0, y0, x1, y1 = window
    px = landmarks[:, :2] * np.array([CANVAS_WIDTH, CANVAS_HEIGHT], np.float64)
    face = slice(skeleton.FACE_START, skeleton.FACE_START + 68)
    if float(landmarks[face, 2].mean()) >= VISIBLE_THRESHOLD:
        f = px[face]
        cx, half = float(f[:, 0].mean()), 0.5 * float(np.ptp(f[:, 0]))
    else:
        pts = px[[i for i in range(5) if landmarks[i, 2] >= _CONFIDENT]]
        if len(pts) < 2:
            return None
        cx, half = float(pts[:, 0].mean()), max(0.5 * float(np.ptp(pts[:, 0])), 8.0)
    a, b = max(x0, int(cx - half)), min(x1, int(cx + half) + 1)
    if b <= a:
        return None
    rows = np.flatnonzero((person[y0:y1, a:b] >= 128).mean(axis=1) >= 0.05)
    if rows.size == 0 or rows[0] == 0:
        return None
    return float(y0 + rows[0])


@dataclass(frozen=True)
class _Placed:
    placement: image_mod.Placement
    report: dict[str, Any]
    canvas_rgb: np.ndarray
    person: np.ndarray
    landmarks: np.ndarray  # canvas-normalized, out-of-view points still in
    matte: matte_mod.MatteResult


def _place_and_matte(
    rgb: np.ndarray, alpha: np.ndarray | None, lm: np.ndarray, placement: image_mod.Placement, report: dict[str, Any]
) -> _Placed:
    """The photo on the canvas at ``placement``, and its matte computed there (at canvas
    resolution, over the part of the canvas the photo covers)."""
    canvas_rgb = image_mod.place_image(rgb, placement, fill="replicate")
    landmarks = _to_canvas(lm, placement)
    x0, y0, x1, y1 = image_mod.visible_window(placement)
    crop = np.ascontiguousarray(canvas_rgb[y0:y1, x0:x1])
    hint = None
    if alpha is not None:
        hint = np.ascontiguousarray(image_mod.place_image(alpha, placement, fill="zero")[y0:y1, x0:x1])
    local = landmarks.copy()
    local[:, 0] = (landmarks[:, 0] * CANVAS_WIDTH - x0) / max(x1 - x0, 1)
    local[:, 1] = (landmarks[:, 1] * CANVAS_HEIGHT - y0) / max(y1 - y0, 1)
    local[landmarks[:, 2] <= 0] = 0.0
    matte = matte_mod.person_matte(crop, alpha_hint=hint, landmarks=local)
    person = np.zeros((CANVAS_HEIGHT, CANVAS_WIDTH), np.uint8)
    person[y0:y1, x0:x1] = matte.alpha
    canvas_rgb[y0:y1, x0:x1] = matte.rgb
    return _Placed(placement, report, canvas_rgb, person, landmarks, matte)


def _frame(rgb: np.ndarray, alpha: np.ndarray | None, lm: np.ndarray, framing: str) -> _Placed:
    """Place and matte the photo for ``framing``: once from the landmarks' head-top estimate,
    then, when the matte shows the hair top off the headroom range, once more with the measured
    top."""
    height, width = rgb.shape[:2]
    targets = _framing_targets(lm, width, height)
    placement, report = image_mod.framing_placement(framing, width, height, targets)
    placed = _place_and_matte(rgb, alpha, lm, placement, {**report, "head_top": "landmarks"})
    if targets is None or report["mode"] == "as-is":
        return placed
    measured = _matte_head_top(placed.person, placed.landmarks, image_mod.visible_window(placement))
    if measured is None:
        return placed
    lo, hi = image_mod.HEADROOM_RANGE
    if report["limited_by"] is None and not lo <= measured / CANVAS_HEIGHT <= hi:
        head_src = (measured - placement.offset_y) / placement.scale_y
        targets = dataclasses.replace(targets, head_top_y=max(head_src, 0.0))
        placement, report = image_mod.framing_placement(framing, width, height, targets)
        placed = _place_and_matte(rgb, alpha, lm, placement, report)
        measured = _matte_head_top(placed.person, placed.landmarks, image_mod.visible_window(placement))
    headroom = round(measured / CANVAS_HEIGHT, 4) if measured is not None else report["headroom"]
    return dataclasses.replace(placed, report={**report, "headroom": headroom, "head_top": "matte"})


def _compute(image_path: Path, progress: Progress | None, framing: str = image_mod.DEFAULT_FRAMING) -> _Built:
    def step(i: int) -> None:
        if progress is not None:
            progress(i, _STEPS)

    portrait = image_mod.read_portrait(image_path)
    rgb, alpha = portrait.rgb, portrait.alpha
    _, block, block_landmarks = _detect_on_block(rgb)
    step(1)
    # A sideways photo (EXIF tag lost) is turned upright rather than refused: the landmarks give the
    # up axis unambiguously (see persona.landmarks), a second detection on the turned copy must
    # confirm it, and the turn is recorded in metadata and reported; refusing would only make the
    # user do by hand what is certain here.
    turns = landmarks_mod.upright_turns(block_landmarks, block.shape[1], block.shape[0])
    if turns:
        rgb = np.ascontiguousarray(np.rot90(rgb, turns))
        alpha = np.ascontiguousarray(np.rot90(alpha, turns)) if alpha is not None else None
        _, block, block_landmarks = _detect_on_block(rgb)
        still = landmarks_mod.upright_turns(block_landmarks, block.shape[1], block.shape[0])
        if still:
            raise BadInputError(
                image_path,
                f"cannot tell which way is up (the portrait looks {landmarks_mod.describe_turns(turns)}, and "
                f"{landmarks_mod.describe_turns(still)} once turned); rotate it upright",
            )
    seen = skeleton.visible_parts(block_landmarks, VISIBLE_THRESHOLD)
    if "body" not in seen and "face" not in seen:
        raise BadInputError(image_path, "no person detected (mediapipe holistic found no body or face)")
    step(2)
    placed = _frame(rgb, alpha, block_landmarks, framing)
    placement, matte, person, canvas_rgb = placed.placement, placed.matte, placed.person, placed.canvas_rgb
    x0, y0, x1, y1 = image_mod.visible_window(placement)
    block_coverage = float(person[y0:y1, x0:x1].mean()) / 255.0 if y1 > y0 and x1 > x0 else 0.0
    if block_coverage < MIN_PERSON_COVERAGE:
        raise BadInputError(
            image_path, f"no person detected (the {matte.method} matte covers {block_coverage:.2%} of the image)"
        )
    step(3)
    # Points mediapipe guessed outside the photo (a headshot's hips and feet) or that the framing
    # cropped off the canvas are "not visible".
    landmarks, out_of_view = landmarks_mod.drop_out_of_view(placed.landmarks, view_bounds(placement))
    face = matte_mod.face_mask(landmarks, person)
    step(4)
    extra = {
        "canvas": {"width": CANVAS_WIDTH, "height": CANVAS_HEIGHT},
        "placement": placement.as_dict(),
        "framing": placed.report,
        "source_size": {"width": int(rgb.shape[1]), "height": int(rgb.shape[0])},
        "source_image": {
            **{k: portrait.info[k] for k in ("format", "mode", "exif_orientation", "alpha_matte")},
            # Counter-clockwise degrees applied after EXIF orientation; placement is of the result.
            "upright_rotation_ccw": 90 * turns,
        },
        "source_path": str(image_path.resolve()),
        "matte": {"method": matte.method, "green_border": round(matte.green_border, 4)},
        "visible_parts": skeleton.visible_parts(landmarks, VISIBLE_THRESHOLD),
        "part_confidence": {k: round(v, 4) for k, v in skeleton.part_confidence(landmarks).items()},
        "out_of_view": out_of_view,
        "coverage": {
            "person": round(float(person.mean()) / 255.0, 5),
            "face": round(float(face.mean()) / 255.0, 5),
        },
        "skeleton": skeleton.SKELETON_NAME,
        "tools": _tools(),
    }
    built = _Built(canvas_rgb, person, face, landmarks.astype(np.float32), extra)
    # The same content checks the CLI status and the Dagster asset check run, before anything is
    # published: a persona that would show "invalid" is never written.
    problems = persona_problems(
        PersonaCache("(new)", image_path, built.portrait, built.person_mask, built.face_mask, built.landmarks, extra)
    )
    if problems:
        raise BadInputError(image_path, "the normalized persona fails its checks: " + "; ".join(problems))
    return built


def _write_files(tmp: Path, built: _Built) -> None:
    bgr = cv2.cvtColor(built.portrait, cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(str(tmp / "portrait.png"), bgr, [cv2.IMWRITE_PNG_COMPRESSION, 6]):
        raise OSError(f"could not write {tmp / 'portrait.png'}")
    np.save(tmp / "portrait.npy", np.ascontiguousarray(built.portrait))
    np.save(tmp / "person_mask.npy", np.ascontiguousarray(built.person_mask))
    np.save(tmp / "face_mask.npy", np.ascontiguousarray(built.face_mask))
    np.save(tmp / "landmarks.npy", np.ascontiguousarray(built.landmarks, dtype=np.float32))


def ensure_persona(
    storage: Storage,
    persona_id: str,
    *,
    image: str | Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    framing: str | None = None,
) -> tuple[PersonaCache, bool]:
    """Make sure ``persona_id``'s cache exists and matches its portrait; returns ``(cache, built)``.

    ``image`` is the portrait to build from; ``None`` uses the persona's kept source in
    ``personas/sources/`` (:func:`persona_source_image`). A valid cache built from the same content
    (sha256) with the current params is reused; a missing, corrupt or stale one is rebuilt;
    ``force`` always rebuilds. The expensive work runs before the persona's lock is taken
    (:func:`cachedir.ensure`'s ``prepare``), so a bad image (not an image, truncated, too large or
    small, no person) raises :class:`BadInputError` having created nothing and touched no existing
    cache. ``progress(step, total)`` is called only while building, as stages finish.
    ``framing`` (``medium``, ``wide``, ``as-is``; see :mod:`~newsmotion_engine.persona.image`):
    ``None`` keeps the framing the existing cache was built with (default ``medium``); another
    framing than the cache's makes it stale, so it is rebuilt.

    Example::

        persona, built = ensure_persona(store, "astronaut", image="storage/personas/samples/astronaut.png")
        persona.metadata["matte"]["method"], persona.visible_parts
    """
    path = storage.persona_dir(persona_id)  # refuses an invalid id before anything else
    image_path = Path(image) if image is not None else persona_source_image(storage, persona_id)
    image_mod.probe_portrait(image_path)  # refuse a non-image / oversized file before hashing it
    source = image_source(image_path)
    framing = persona_framing(storage, persona_id) if framing is None else framing
    params = persona_params(framing)  # refuses an unknown framing

    def compute() -> tuple[_Built, float, float]:
        started = time.perf_counter()
        return _compute(image_path, progress, framing), started, time.perf_counter() - started

    def build(prepared: tuple[_Built, float, float]) -> None:
        built, started, compute_s = prepared

        def finalize(tmp: Path, metadata: dict[str, Any]) -> None:
            metadata["build_s"] = round(time.perf_counter() - started, 4)
            metadata["compute_s"] = round(compute_s, 4)

        cachedir.write_cache(
            path,
            lambda tmp: _write_files(tmp, built),
            schema=SCHEMA,
            source=source,
            params=params,
            extra={"persona_id": persona_id, **built.extra},
            finalize=finalize,
        )
        if progress is not None:
            progress(_STEPS, _STEPS)

    return cachedir.ensure(
        path,
        lambda: load_persona(storage, persona_id, expected_source=source, expected_params=params),
        build,
        force=force,
        prepare=compute,
    )
