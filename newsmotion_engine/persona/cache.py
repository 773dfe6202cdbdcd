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
call :func:`~newsmotion_engine.persona.build.ensure_persona` (``newsmotion persona add``, the
``persona_cache`` asset); renders only :func:`load_persona`. Diffusion backends add ``{persona_id}/{backend}/...`` sub-caches with the same mechanism;
a rebuild from the same source carries them over, a new source drops them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def view_bounds(placement: image_mod.Placement) -> np.ndarray:
    """Where points count as in view: the part of the canvas the photo covers (a framing may crop
    the photo), widened by the landmarks module's margin."""
    x0, y0, x1, y1 = image_mod.visible_window(placement)
    return landmarks_mod.block_bounds(x0, y0, x1 - x0, y1 - y0, (CANVAS_WIDTH, CANVAS_HEIGHT))


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
            bounds = view_bounds(image_mod.Placement(**placement))
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
