"""The Tier-2 persona cache format: ``motion/persona_caches/{persona_id}/``.

A persona is one portrait normalized once onto the fixed 720x1280 canvas (see
:mod:`newsmotion_engine.persona.image`), with everything a renderer needs from it precomputed and
memory-mapped at render time:

==================  ===========================  ==============================================
file                content                      notes
==================  ===========================  ==============================================
portrait.png        the normalized portrait      for people (previews, diffusion pipelines)
portrait.npy        uint8 [1280, 720, 3] RGB     the same pixels, memory-mapped by renderers
person_mask.npy     uint8 [1280, 720] alpha      0 = not person (incl. the canvas fill)
face_mask.npy       uint8 [1280, 720] alpha      face + hair: the region renders keep stable
landmarks.npy       float32 [133, 3]             canonical skeleton, x/y normalized to canvas
metadata.json       see cachedir + extras below
==================  ===========================  ==============================================

metadata.json extras: persona_id, canvas {width, height}, placement (canvas = source * scale +
offset), source_size, source_image (format, mode, EXIF orientation, alpha matte,
upright_rotation_ccw: degrees a sideways photo was turned; placement and source_size are of the
upright image), source_path (where the image was when built; status re-hashes it if it is still
there), matte {method, green_border}, visible_parts, part_confidence, out_of_view (landmarks
mediapipe guessed outside the photo, stored as not visible: see
:mod:`newsmotion_engine.persona.landmarks`), coverage {person, face}, skeleton, tools {mediapipe,
opencv, numpy, pillow}, build_s. ``source`` is {kind: "image", sha256, name}; ``params``
(:func:`persona_params`) holds every setting the output depends on, including
:data:`PERSONA_VERSION`.

The write/lock/validate mechanics are :mod:`newsmotion_engine.cachedir`'s, shared with the guidance
cache. Every function takes the :class:`~newsmotion_engine.storage.Storage` it works in. Builders
call :func:`ensure_persona` (``newsmotion persona add``, the ``persona_cache`` asset); renders only
:func:`load_persona`. Diffusion backends add ``{persona_id}/{backend}/...`` sub-caches with the same mechanism;
a rebuild from the same source carries them over, a new source drops them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine import cachedir, skeleton
from newsmotion_engine.errors import BadInputError, CacheCorruptError, NewsmotionError
from newsmotion_engine.ids import SLUG_RE, RESERVED
from newsmotion_engine.persona import image as image_mod
from newsmotion_engine.persona import landmarks as landmarks_mod
from newsmotion_engine.persona import matte as matte_mod
from newsmotion_engine.persona.image import CANVAS_HEIGHT, CANVAS_WIDTH
from newsmotion_engine.storage import Storage

__all__ = [
    "SCHEMA",
    "PERSONA_VERSION",
    "PersonaCache",
    "persona_params",
    "persona_framing",
    "current_params",
    "image_source",
    "ensure_persona",
    "load_persona",
    "persona_source_image",
    "persona_status",
    "list_persona_ids",
    "persona_problems",
]

# Bump when normalization, landmark handling or the file set changes what a build produces
# (matte changes bump matte.MATTE_VERSION, which is part of the params too).
PERSONA_VERSION = 3
# Below this fraction of the portrait block the matte found nobody.
MIN_PERSON_COVERAGE = 0.005
VISIBLE_THRESHOLD = 0.3

SCHEMA = cachedir.CacheSchema(
    kind="persona",
    version=1,
    arrays={
        "portrait.npy": cachedir.ArraySpec("uint8", (CANVAS_HEIGHT, CANVAS_WIDTH, 3)),
        "person_mask.npy": cachedir.ArraySpec("uint8", (CANVAS_HEIGHT, CANVAS_WIDTH)),
        "face_mask.npy": cachedir.ArraySpec("uint8", (CANVAS_HEIGHT, CANVAS_WIDTH)),
        "landmarks.npy": cachedir.ArraySpec("float32", (skeleton.NUM_KEYPOINTS, 3)),
    },
    files=("portrait.png",),
)

Progress = Callable[[int, int], None]
_STEPS = 5


@dataclass(frozen=True)
class PersonaCache:
    """A loaded persona: memory-mapped canvas-sized arrays plus metadata.

    ``portrait`` uint8 [1280, 720, 3] RGB, ``person_mask`` / ``face_mask`` uint8 [1280, 720] alpha,
    ``landmarks`` float32 [133, 3] (x, y normalized to the canvas, confidence).
    """

    persona_id: str
    path: Path
    portrait: np.ndarray
    person_mask: np.ndarray
    face_mask: np.ndarray
    landmarks: np.ndarray
    metadata: dict[str, Any]

    @property
    def matte_method(self) -> str:
        return str(self.metadata["matte"]["method"])

    @property
    def visible_parts(self) -> list[str]:
        return list(self.metadata["visible_parts"])

    @property
    def canvas_size(self) -> tuple[int, int]:
        """(width, height)."""
        return int(self.metadata["canvas"]["width"]), int(self.metadata["canvas"]["height"])

    @property
    def digest(self) -> str:
        """Stable digest of the cache's content and provenance (:func:`cachedir.cache_digest`)."""
        return cachedir.cache_digest(self.metadata)


def persona_params(framing: str = image_mod.DEFAULT_FRAMING) -> dict[str, Any]:
    """Every setting a persona build depends on, for a portrait framed ``framing``
    (:data:`~newsmotion_engine.persona.image.FRAMINGS`); a cache built with other params is stale."""
    from newsmotion_engine.guidance.holistic import MEDIAPIPE_MODEL_COMPLEXITY

    return {
        "version": PERSONA_VERSION,
        "canvas": [CANVAS_WIDTH, CANVAS_HEIGHT],
        "framing": image_mod.framing_params(framing),
        "fill": "replicate",
        "alpha_composite": list(image_mod.CHROMA_GREEN),
        "landmarker": {"name": "mediapipe-holistic", "model_complexity": MEDIAPIPE_MODEL_COMPLEXITY, "static": True},
        "visible_threshold": VISIBLE_THRESHOLD,
        "min_person_coverage": MIN_PERSON_COVERAGE,
        "matte": matte_mod.matte_params(),
        "landmarks": landmarks_mod.view_params(),
    }


def persona_framing(storage: Storage, persona_id: str) -> str:
    """The framing a persona was built with (its cache's params), else the default: a rebuild or a
    staleness check keeps the framing the user chose, without asking again."""
    import json

    try:
        meta = json.loads((storage.persona_dir(persona_id) / cachedir.METADATA_NAME).read_text())
        mode = meta["params"]["framing"]["mode"]
    except (OSError, ValueError, KeyError, TypeError):
        return image_mod.DEFAULT_FRAMING
    return mode if mode in image_mod.FRAMINGS else image_mod.DEFAULT_FRAMING


def current_params(storage: Storage, persona_id: str) -> dict[str, Any]:
    """:func:`persona_params` for the persona's own framing: what its cache must have been built with."""
    return persona_params(persona_framing(storage, persona_id))


def image_source(image_path: str | Path) -> dict[str, Any]:
    """The ``source`` record of a portrait file: {kind: "image", sha256}. Content only, not the file
    name: the same portrait arriving via the inbox, the CLI or personas/sources/ is the same source."""
    path = Path(image_path)
    if not path.is_file():
        raise BadInputError(path, "file not found" if not path.exists() else "not a file")
    return {"kind": "image", "sha256": cachedir.sha256_file(path)}


def _tools() -> dict[str, str]:
    import PIL

    from newsmotion_engine.guidance.holistic import mediapipe_version

    return {"mediapipe": mediapipe_version(), "opencv": cv2.__version__, "numpy": np.__version__, "pillow": PIL.__version__}


def load_persona(
    storage: Storage,
    persona_id: str,
    *,
    verify: bool = False,
    expected_source: Mapping[str, Any] | None = None,
    expected_params: Mapping[str, Any] | None = None,
) -> PersonaCache:
    """Memory-map a persona's cache after validating it (sizes, npy headers, shapes; sha256 of
    every file too with ``verify``). ``expected_source`` / ``expected_params`` turn a cache built
    from another image / with other settings into :class:`CacheStaleError`. Never builds.

    Example::

        persona = load_persona(Storage("storage"), "astronaut")
        persona.portrait[persona.person_mask > 0]  # pixels are read only when touched
    """
    path = storage.persona_dir(persona_id)
    loaded = cachedir.read_cache(
        path, SCHEMA, expected_source=expected_source, expected_params=expected_params, verify=verify
    )
    meta = loaded.metadata
    canvas = meta.get("canvas") or {}
    if meta.get("persona_id") != persona_id or (canvas.get("width"), canvas.get("height")) != (CANVAS_WIDTH, CANVAS_HEIGHT):
        raise CacheCorruptError(
            path / cachedir.METADATA_NAME,
            f"metadata says persona {meta.get('persona_id')!r} on a {canvas.get('width')}x{canvas.get('height')} "
            f"canvas, expected {persona_id!r} on {CANVAS_WIDTH}x{CANVAS_HEIGHT}",
        )
    arrays = loaded.arrays
    return PersonaCache(
        persona_id=persona_id,
        path=path,
        portrait=arrays["portrait.npy"],
        person_mask=arrays["person_mask.npy"],
        face_mask=arrays["face_mask.npy"],
        landmarks=arrays["landmarks.npy"],
        metadata=meta,
    )


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
    landmarks, out_of_view = landmarks_mod.drop_out_of_view(placed.landmarks, _view_bounds(placement))
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


def _view_bounds(placement: image_mod.Placement) -> np.ndarray:
    """Where points count as in view: the part of the canvas the photo covers (a framing may crop
    the photo), widened by the landmarks module's margin."""
    x0, y0, x1, y1 = image_mod.visible_window(placement)
    return landmarks_mod.block_bounds(x0, y0, x1 - x0, y1 - y0, (CANVAS_WIDTH, CANVAS_HEIGHT))


def _write_files(tmp: Path, built: _Built) -> None:
    bgr = cv2.cvtColor(built.portrait, cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(str(tmp / "portrait.png"), bgr, [cv2.IMWRITE_PNG_COMPRESSION, 6]):
        raise OSError(f"could not write {tmp / 'portrait.png'}")
    np.save(tmp / "portrait.npy", np.ascontiguousarray(built.portrait))
    np.save(tmp / "person_mask.npy", np.ascontiguousarray(built.person_mask))
    np.save(tmp / "face_mask.npy", np.ascontiguousarray(built.face_mask))
    np.save(tmp / "landmarks.npy", np.ascontiguousarray(built.landmarks, dtype=np.float32))


def persona_source_image(storage: Storage, persona_id: str) -> Path:
    """The persona's kept source portrait (``personas/sources/{persona_id}.*``), or a
    :class:`NewsmotionError` saying how to add one."""
    source = storage.find_persona_source(persona_id)
    if source is None:
        raise NewsmotionError(
            f"unknown persona {persona_id!r}: no source portrait in {storage.persona_sources} "
            f"(drop the image into {storage.persona_inbox} or run `newsmotion persona add IMAGE --id {persona_id}`)"
        )
    return source


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


def persona_status(storage: Storage, persona_id: str) -> tuple[str, PersonaCache | None, str]:
    """``(status, cache, detail)``, status one of valid / stale / missing / corrupt (as
    ``guidance_status``) or invalid: the files are intact but :func:`persona_problems` (the checks
    the Dagster asset check runs) found problems, listed in ``detail``. Stale: older schema or
    params, or the source image (the kept copy in ``personas/sources/``, else the path it was built
    from, if still there) has other content than the cache was built from (re-hashed here; cheap
    next to a build)."""
    status, cache, detail = cachedir.load_status(lambda: load_persona(storage, persona_id))
    if cache is None:
        return status, None, detail
    params = current_params(storage, persona_id)
    if cache.metadata.get("params") != params:
        built_v = (cache.metadata.get("params") or {}).get("version")
        return "stale", cache, f"built with other parameters (persona version {built_v}, now {PERSONA_VERSION}); rebuild"
    problems = persona_problems(cache)
    if problems:
        return "invalid", cache, "; ".join(problems)
    # The kept source (personas/sources/{id}.*) when there is one, else where the build read it.
    kept = storage.find_persona_source(persona_id)
    source_path = str(kept) if kept is not None else cache.metadata.get("source_path")
    if source_path and Path(source_path).is_file():
        if cachedir.sha256_file(Path(source_path)) != cache.metadata["source"].get("sha256"):
            return "stale", cache, f"source image {source_path} changed since the cache was built; rebuild"
        return "valid", cache, ""
    return "valid", cache, f"source image no longer at {source_path}" if source_path else ""


def list_persona_ids(storage: Storage) -> list[str]:
    """Ids of the persona cache directories present (valid or not), sorted."""
    root = storage.persona_root
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and SLUG_RE.match(p.name) and p.name not in RESERVED)


def persona_problems(cache: PersonaCache) -> list[str]:
    """Content checks of a loaded persona (the loader already checked files, shapes, dtypes):
    masks hold a person and the face lies inside it, landmarks are finite with confidences in
    [0, 1] and none outside the photo marked visible, and the metadata's summaries match the
    arrays. ``[]`` when sound.

    The one validation every path runs: the build (before publishing), :func:`persona_status`
    (``newsmotion caches`` / ``persona list`` show "invalid (...)") and Dagster's blocking
    ``persona_cache_valid`` check."""
    problems: list[str] = []
    shapes = {
        "portrait": (cache.portrait, (CANVAS_HEIGHT, CANVAS_WIDTH, 3), np.uint8),
        "person_mask": (cache.person_mask, (CANVAS_HEIGHT, CANVAS_WIDTH), np.uint8),
        "face_mask": (cache.face_mask, (CANVAS_HEIGHT, CANVAS_WIDTH), np.uint8),
        "landmarks": (cache.landmarks, (skeleton.NUM_KEYPOINTS, 3), np.float32),
    }
    for name, (array, shape, dtype) in shapes.items():
        if array.shape != shape or array.dtype != dtype:
            problems.append(f"{name}: {array.dtype} {list(array.shape)}, expected {np.dtype(dtype).name} {list(shape)}")
    if problems:
        return problems
    person = np.asarray(cache.person_mask, dtype=np.float32) / 255.0
    face = np.asarray(cache.face_mask, dtype=np.float32) / 255.0
    coverage = float(person.mean())
    if coverage < MIN_PERSON_COVERAGE * 0.5:
        problems.append(f"person_mask is (nearly) empty: covers {coverage:.3%} of the canvas")
    if coverage > 0.995:
        problems.append("person_mask covers the whole canvas (no background found)")
    # A one-level slack covers rounding of the feathered product.
    if (face > person + 1.5 / 255.0).any():
        problems.append(f"face_mask extends outside person_mask at {int((face > person + 1.5 / 255.0).sum())} pixels")
    if "face" in cache.metadata.get("visible_parts", []) and float(face.max()) == 0.0:
        problems.append("face is visible but face_mask is empty")
    lm = np.asarray(cache.landmarks)
    if not np.isfinite(lm).all():
        problems.append("landmarks contain NaN or inf")
    else:
        conf = lm[:, 2]
        if conf.min() < 0 or conf.max() > 1:
            problems.append(f"landmark confidence outside [0, 1] ({conf.min():.3g}..{conf.max():.3g})")
        present = conf > 0
        if present.any() and (np.abs(lm[present, :2] - 0.5) > 1.5).any():
            problems.append("landmark coordinates far outside the canvas (expected normalized 0..1)")
        placement = cache.metadata.get("placement")
        try:
            bounds = _view_bounds(image_mod.Placement(**placement))
        except (TypeError, ValueError):
            problems.append(f"metadata placement {placement!r} is not a placement record")
        else:
            # The build stores points guessed outside the photo as not visible; one left visible
            # means the cache predates that rule or was altered.
            outside = landmarks_mod.out_of_view(lm, bounds)
            if outside.any():
                problems.append(
                    f"{int(outside.sum())} landmarks lie outside the portrait but are marked visible; rebuild"
                )
    recorded = cache.metadata.get("visible_parts")
    actual = skeleton.visible_parts(lm, VISIBLE_THRESHOLD) if np.isfinite(lm).all() else None
    if actual is not None and recorded != actual:
        problems.append(f"metadata visible_parts {recorded} differ from the landmarks' {actual}")
    recorded_cov = (cache.metadata.get("coverage") or {}).get("person")
    if recorded_cov is None or abs(recorded_cov - coverage) > 1e-3:
        problems.append(f"metadata coverage.person {recorded_cov} differs from the mask's {coverage:.5f}")
    return problems
