"""The Tier-1 guidance cache format: ``motion/preprocessed/{loop_id}/``.

Files: ``keypoints.npy`` (float32 ``[T, 133, 3]``, the loop's raw persona-free keypoints) and
``metadata.json`` (see :mod:`newsmotion_engine.cachedir`; plus loop_id, fps, frames, skeleton and
the extractor that produced it). Derived per-backend tensors live in sub-caches
(``{loop_id}/{backend}/...``) written with the same mechanism.

A loop comes from one of two sources: a canonical palette loop (authored procedurally; its source
digest is the hash of the authoring parameters) or a driving video dropped into
``motion/driving/{loop_id}.{ext}`` (its source digest is the file's sha256).

Every function takes the :class:`~newsmotion_engine.storage.Storage` it works in. Builders call
:func:`ensure_guidance` (the CLI and the ``guidance_cache`` asset); renders only
:func:`load_guidance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir, skeleton
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.ids import validate_id
from newsmotion_engine.storage import Storage

SCHEMA = cachedir.CacheSchema(
    kind="guidance",
    version=1,
    arrays={"keypoints.npy": cachedir.ArraySpec("float32", (None, skeleton.NUM_KEYPOINTS, 3))},
)
VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".webm", ".mkv", ".avi")
DEFAULT_FPS = 30

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class GuidanceCache:
    """A loaded loop: memory-mapped keypoints plus its metadata."""

    loop_id: str
    path: Path
    keypoints: np.ndarray
    metadata: dict[str, Any]

    @property
    def fps(self) -> int:
        return int(self.metadata["fps"])

    @property
    def frames(self) -> int:
        return int(self.metadata["frames"])

    @property
    def source_kind(self) -> str:
        return str(self.metadata["source"]["kind"])

    @property
    def width(self) -> int:
        """Width of the frame the keypoints are normalized to (the driving video's, or 720)."""
        return int(self.metadata.get("frame", {}).get("width", 720))

    @property
    def height(self) -> int:
        return int(self.metadata.get("frame", {}).get("height", 1280))

    @property
    def digest(self) -> str:
        """Stable digest of the cache's content and provenance (:func:`cachedir.cache_digest`)."""
        return cachedir.cache_digest(self.metadata)


@dataclass(frozen=True)
class LoopSource:
    """Where a loop's keypoints come from and everything they depend on."""

    loop_id: str
    kind: str  # "procedural" | "video"
    source: dict[str, Any]  # {"kind", "sha256", ...} as recorded in metadata.json
    extractor: dict[str, Any]  # {"name", "version", "params"}
    produce: Callable[[Progress | None], np.ndarray]
    # The frame x/y are normalized to: keypoints only mean something with its aspect ratio.
    frame_size: tuple[int, int] = (720, 1280)

    @property
    def params(self) -> dict[str, Any]:
        return self.extractor["params"]


def find_driving_video(storage: Storage, loop_id: str) -> Path | None:
    """The driving video for a custom loop, if one was dropped into ``motion/driving/``."""
    folder = storage.driving_dir
    for suffix in VIDEO_SUFFIXES:
        candidate = folder / f"{loop_id}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def driving_loop_ids(storage: Storage) -> list[str]:
    """Loop ids of the driving videos in ``motion/driving/`` whose file names are valid slugs."""
    folder = storage.driving_dir
    if not folder.is_dir():
        return []
    ids = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in VIDEO_SUFFIXES and path.is_file():
            try:
                ids.append(validate_id(path.stem, "loop id"))
            except NewsmotionError:
                continue
    return ids


def all_loop_ids(storage: Storage) -> list[str]:
    """Canonical loops first, then custom loops from driving videos."""
    from newsmotion_engine.guidance.catalogue import LOOP_IDS

    return list(LOOP_IDS) + [i for i in driving_loop_ids(storage) if i not in LOOP_IDS]


def check_loop_exists(storage: Storage, loop_id: str) -> None:
    """Cheap existence check (no hashing): ``loop_id`` is a valid id and a canonical loop or a
    dropped driving video; else :class:`NewsmotionError` listing what exists."""
    from newsmotion_engine.guidance.catalogue import is_canonical

    validate_id(loop_id, "loop id")
    if not is_canonical(loop_id) and find_driving_video(storage, loop_id) is None:
        raise _unknown_loop(storage, loop_id)


def _unknown_loop(storage: Storage, loop_id: str) -> NewsmotionError:
    from newsmotion_engine.guidance.catalogue import LOOP_IDS

    return NewsmotionError(
        f"unknown loop {loop_id!r}: not a canonical loop ({', '.join(LOOP_IDS)}) and no driving "
        f"video {storage.driving_dir / (loop_id + '.mp4')}"
    )


def loop_source(storage: Storage, loop_id: str, *, video: Path | None = None, fps: int = DEFAULT_FPS) -> LoopSource:
    """Resolve a loop id to its source: an explicit ``video``, a dropped driving video, or the
    canonical catalogue. A video is hashed here (the source digest), so call this once per use.
    Unknown ids raise :class:`NewsmotionError` listing what exists."""
    from newsmotion_engine.guidance import choreography, rig
    from newsmotion_engine.guidance.catalogue import is_canonical

    validate_id(loop_id, "loop id")
    video = video or find_driving_video(storage, loop_id)
    if video is not None:
        return _video_source(loop_id, Path(video), fps)
    if is_canonical(loop_id):
        frames = round(fps * choreography.DEFAULT_SECONDS)
        params = choreography.authoring_params(loop_id, fps, frames)
        return LoopSource(
            loop_id=loop_id,
            kind="procedural",
            source={"kind": "procedural", "sha256": cachedir.sha256_json(params)},
            extractor={"name": "newsmotion-palette", "version": choreography.PALETTE_VERSION, "params": params},
            produce=lambda progress: _authored(choreography.author_loop(loop_id, fps=fps, frames=frames), progress),
            frame_size=(rig.FRAME_WIDTH, rig.FRAME_HEIGHT),
        )
    raise _unknown_loop(storage, loop_id)


def _authored(keypoints: np.ndarray, progress: Progress | None) -> np.ndarray:
    # Authoring is one quick step; report it so a caller's "building" line appears and completes.
    if progress is not None:
        progress(len(keypoints), len(keypoints))
    return keypoints


def _video_source(loop_id: str, video: Path, fps: int) -> LoopSource:
    from newsmotion_engine.errors import BadInputError
    from newsmotion_engine.guidance import extract
    from newsmotion_engine.videoio import open_video

    if not video.is_file():
        raise BadInputError(video, "driving video not found")
    params = extract.extractor_params(fps)
    info = open_video(video)
    return LoopSource(
        loop_id=loop_id,
        kind="video",
        source={"kind": "video", "sha256": cachedir.sha256_file(video)},
        extractor={"name": extract.EXTRACTOR_NAME, "version": extract.EXTRACTOR_VERSION, "params": params},
        produce=lambda progress: extract.extract_keypoints(video, fps=fps, progress=progress),
        frame_size=(info.width, info.height),
    )


def load_guidance(
    storage: Storage, loop_id: str, *, verify: bool = False, expected: LoopSource | None = None
) -> GuidanceCache:
    """Memory-map a loop's cache after validating it (cheap checks; hashes too with ``verify``).
    With ``expected`` (from :func:`loop_source`) a cache built from another source or with other
    parameters raises :class:`CacheStaleError`; missing / damaged ones raise
    :class:`CacheMissingError` / :class:`CacheCorruptError`. Never builds.

    Example::

        loop = load_guidance(Storage("storage"), "nod")
        loop.keypoints.shape  # (120, 133, 3), read from disk only when touched
    """
    path = storage.guidance_dir(loop_id)
    loaded = cachedir.read_cache(
        path,
        SCHEMA,
        expected_source=expected.source if expected else None,
        expected_params=expected.params if expected else None,
        verify=verify,
    )
    keypoints = loaded.arrays["keypoints.npy"]
    meta = loaded.metadata
    if meta.get("loop_id") != loop_id or keypoints.shape[0] != meta.get("frames"):
        raise cachedir.CacheCorruptError(
            path / cachedir.METADATA_NAME,
            f"metadata says loop {meta.get('loop_id')!r} with {meta.get('frames')} frames, "
            f"keypoints.npy has {keypoints.shape[0]}",
        )
    return GuidanceCache(loop_id=loop_id, path=path, keypoints=keypoints, metadata=meta)


def ensure_guidance(
    storage: Storage,
    loop_id: str,
    *,
    force: bool = False,
    video: Path | None = None,
    fps: int = DEFAULT_FPS,
    progress: Progress | None = None,
) -> tuple[GuidanceCache, bool]:
    """Make sure ``loop_id``'s cache exists and is current; returns ``(cache, built)``.

    A valid, current cache is reused; a missing, corrupt or stale one (source hash or parameters
    differ) is built atomically (:func:`cachedir.ensure`: double-checked under the loop's lock);
    ``force`` always builds. ``video`` overrides the dropped driving video (``newsmotion guidance
    extract``). ``progress(done, total)`` is called only while building (per extracted frame), so
    a caller can show a "building" step exactly when one happens. The source is resolved (a video
    hashed) once.

    Example::

        cache, built = ensure_guidance(Storage.from_env(), "nod")
    """
    source = loop_source(storage, loop_id, video=video, fps=fps)
    path = storage.guidance_dir(loop_id)

    def write(tmp: Path) -> None:
        keypoints = np.ascontiguousarray(source.produce(progress), dtype=np.float32)
        problems = keypoint_problems(keypoints)
        if problems:
            raise NewsmotionError(f"loop {loop_id!r}: produced invalid keypoints: {'; '.join(problems)}")
        np.save(tmp / "keypoints.npy", keypoints)

    def build() -> None:
        cachedir.write_cache(
            path,
            write,
            schema=SCHEMA,
            source=source.source,
            params=source.params,
            extra={
                "loop_id": loop_id,
                "fps": fps,
                "frames": None,  # filled by _fill_frames from the written array
                "skeleton": skeleton.SKELETON_NAME,
                "frame": {"width": source.frame_size[0], "height": source.frame_size[1]},
                "extractor": {"name": source.extractor["name"], "version": source.extractor["version"]},
            },
            finalize=_fill_frames,
        )

    return cachedir.ensure(path, lambda: load_guidance(storage, loop_id, expected=source), build, force=force)


def _fill_frames(tmp: Path, metadata: dict[str, Any]) -> None:
    metadata["frames"] = metadata["files"]["keypoints.npy"]["shape"][0]


def keypoint_problems(keypoints: np.ndarray) -> list[str]:
    """Content checks (the asset check runs these): shape, no NaN/inf, confidence in [0, 1]."""
    problems = []
    if keypoints.ndim != 3 or keypoints.shape[1:] != (skeleton.NUM_KEYPOINTS, 3):
        return [f"shape {list(keypoints.shape)}, expected [T, {skeleton.NUM_KEYPOINTS}, 3]"]
    if keypoints.shape[0] < 2:
        problems.append(f"only {keypoints.shape[0]} frame(s)")
    if not np.isfinite(keypoints).all():
        problems.append("contains NaN or inf")
    conf = keypoints[..., 2]
    if conf.size and (conf.min() < 0 or conf.max() > 1):
        problems.append(f"confidence outside [0, 1] ({conf.min():.3g}..{conf.max():.3g})")
    return problems


def guidance_status(storage: Storage, loop_id: str) -> tuple[str, GuidanceCache | None, str]:
    """``(status, cache, detail)`` with status one of valid / stale / missing / corrupt; used by
    ``newsmotion caches``. Hashes the driving video for custom loops (cheap next to extraction)."""
    try:
        source = loop_source(storage, loop_id)
    except NewsmotionError as exc:
        source, source_problem = None, str(exc)
    else:
        source_problem = ""
    status, cache, detail = cachedir.load_status(lambda: load_guidance(storage, loop_id))
    if cache is None:
        return status, None, detail
    if source is None:
        return "stale", cache, source_problem
    if cache.metadata.get("source") != source.source or cache.metadata.get("params") != source.params:
        return "stale", cache, "source or parameters changed since it was built"
    return "valid", cache, ""
