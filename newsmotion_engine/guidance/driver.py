"""The driving clip of a loop: a real video of a person performing it, at the video model's frame
rate and a render size — what Wan-Animate-2 is driven by (it takes raw RGB video, no pose
drawing). One format module: ``{guidance_cache}/driving/{W}x{H}/``.

Files: ``frames.npy`` uint8 ``[N, H, W, 3]`` RGB (memory-mapped on read) and ``metadata.json``
(:mod:`newsmotion_engine.cachedir`; plus loop_id, fps, frames, size, origin, driver). ``N`` is
:func:`model_frame_count`: the loop's duration at :data:`MODEL_FPS` (4 s at 30 fps -> 96 frames).

Where the frames come from (``origin``), first match wins:

- ``user``: the user's own clip ``motion/driving_clips/{loop_id}.{mp4,mov,...}`` (any loop),
  resampled to 24 fps (nearest frame), centre-cropped to W:H and scaled; it must last at least
  the loop's duration (the first ``N`` frames are used). A file that is not a readable video or is
  too short raises :class:`BadInputError` naming it.
- ``source-video``: a custom loop (extracted from ``motion/driving/{loop_id}.mp4``) is driven by
  that same video — the file the keypoints came from; it is already kept in storage, and its
  sha256 must still be the one the loop was extracted from. Resampled to 24 fps and cropped to
  W:H around the person (the loop's body keypoints give the centre).
- ``driver-render``: a canonical loop (authored keypoints, no video) is performed by a fixed
  *driver* person: the weights-free warp backend's render of the ``astronaut`` sample portrait
  (:data:`DRIVER_SAMPLE`: waist-up and frontal like a presenter, so both arms, the head and the
  torso that the loops move are in the picture; ``camera`` is in profile and ``grace-hopper`` has
  no arms) on a neutral grey (:data:`DRIVER_BACKGROUND`), the loop's keypoints retargeted onto her
  and resampled (cyclically, linearly) to 24 fps. Her persona cache is built once under
  ``motion/driver/`` with the ordinary persona builder (so it needs mediapipe once; renders only
  read the clip).

The clip is per (loop, size) and persona-independent, so everything the video model derives from
it stays in the loop's own sub-cache. Builders call :func:`ensure_driving_clip` (the
``driving_clip`` asset, ``prepare_guidance``); renders :func:`load_driving_clip`.

Example::

    clip, built = ensure_driving_clip(load_guidance(store, "nod"), 720, 1280)
    clip.frames.shape  # (96, 1280, 720, 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, CacheStaleError, NewsmotionError

__all__ = [
    "DRIVER_BACKGROUND",
    "DRIVER_SAMPLE",
    "MODEL_FPS",
    "SCHEMA",
    "DrivingClip",
    "driving_clip_dir",
    "ensure_driving_clip",
    "find_user_clip",
    "load_driving_clip",
    "loop_fps",
    "model_frame_count",
    "resample_loop",
    "user_clips_dir",
]

MODEL_FPS = 24  # Wan-Animate(-2) is trained on and generates 24 fps video
DRIVER_SAMPLE = "astronaut"
DRIVER_BACKGROUND = (128, 128, 128)
FORMAT_VERSION = 1
VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".webm", ".mkv", ".avi")
SCHEMA = cachedir.CacheSchema(
    kind="driving-clip", version=FORMAT_VERSION, arrays={"frames.npy": cachedir.ArraySpec("uint8", (None, None, None, 3))}
)


@dataclass(frozen=True)
class DrivingClip:
    """A loaded driving clip: memory-mapped uint8 ``frames [N, H, W, 3]`` plus metadata."""

    path: Path
    frames: np.ndarray
    metadata: dict[str, Any]

    @property
    def origin(self) -> str:
        return str(self.metadata["origin"])

    @property
    def fps(self) -> int:
        return int(self.metadata["fps"])

    @property
    def digest(self) -> str:
        return cachedir.cache_digest(self.metadata)


def model_frame_count(frames: int, fps: int, model_fps: int = MODEL_FPS) -> int:
    """Frames of a ``frames``-long clip at ``fps`` re-timed to ``model_fps`` (same duration).

    >>> model_frame_count(120, 30)
    96
    """
    return max(1, int(round(int(frames) * model_fps / int(fps))))


def resample_loop(keypoints: np.ndarray, n: int) -> np.ndarray:
    """``n`` poses evenly spaced over a seamless loop ``[T, K, 3]`` (position ``i * T / n``):
    x, y linear between the two neighbouring frames (the last wraps to frame 0), confidence the
    smaller of the two (a point is only as sure as its least sure end)."""
    kp = np.asarray(keypoints, dtype=np.float64)
    T = kp.shape[0]
    pos = np.arange(n) * (T / n)
    i0 = np.floor(pos).astype(int) % T
    i1 = (i0 + 1) % T
    w = (pos - np.floor(pos))[:, None, None]
    out = kp[i0] * (1 - w) + kp[i1] * w
    out[..., 2] = np.minimum(kp[i0, :, 2], kp[i1, :, 2])
    exact = w[:, 0, 0] == 0
    out[exact] = kp[i0[exact]]
    return out.astype(np.float32)


def loop_fps(guidance: Any) -> int:
    """The loop's frame rate (a guidance cache's ``fps``; 30, the default loop rate, for a stand-in
    without one)."""
    return int(getattr(guidance, "fps", None) or (getattr(guidance, "metadata", None) or {}).get("fps") or 30)


def driving_clip_dir(guidance_path: Path, width: int, height: int) -> Path:
    return Path(guidance_path) / "driving" / f"{width}x{height}"


def _motion_dir(guidance: Any) -> Path:
    # A loop's guidance cache is motion/preprocessed/{loop_id}: the storage it belongs to is two up.
    return Path(guidance.path).parent.parent


def user_clips_dir(motion_dir: Path) -> Path:
    """``motion/driving_clips/``: drop ``{loop_id}.mp4`` here to drive that loop with your own clip."""
    return Path(motion_dir) / "driving_clips"


def find_user_clip(motion_dir: Path, loop_id: str) -> Path | None:
    folder = user_clips_dir(motion_dir)
    for suffix in VIDEO_SUFFIXES:
        candidate = folder / f"{loop_id}{suffix}"
        if candidate.is_file():
            return candidate
    return None


# ---------------------------------------------------------------------------- reading
def _read(path: Path, expected_source: dict | None, expected_params: dict | None) -> DrivingClip:
    loaded = cachedir.read_cache(path, SCHEMA, expected_source=expected_source, expected_params=expected_params)
    return DrivingClip(path, loaded.arrays["frames.npy"], loaded.metadata)


def load_driving_clip(guidance: Any, width: int, height: int, fps: int | None = None) -> DrivingClip:
    """The loop's clip at ``width`` x ``height``, validated against the loop it was made for (its
    guidance digest) and the frame count the loop needs at :data:`MODEL_FPS` (``fps``: the loop's,
    default ``guidance.fps``). Never builds. Raises the :mod:`cachedir` errors."""
    path = driving_clip_dir(guidance.path, width, height)
    clip = _read(path, None, None)
    want = model_frame_count(len(guidance.keypoints), fps or loop_fps(guidance))
    loop = cachedir.cache_digest(guidance.metadata)
    if clip.metadata["source"].get("loop") != loop:
        raise CacheStaleError(path, "made for another version of the loop (its guidance cache was rebuilt)")
    if clip.frames.shape[0] != want or clip.frames.shape[1:3] != (height, width):
        raise CacheStaleError(path, f"{list(clip.frames.shape[:3])} frames, the loop needs [{want}, {height}, {width}]")
    return clip


# ---------------------------------------------------------------------------- building
def _fit(rgb: np.ndarray, width: int, height: int, centre: tuple[float, float] = (0.5, 0.5)) -> np.ndarray:
    """Crop ``rgb`` to the W:H aspect around ``centre`` (normalized x, y; clamped inside) and scale."""
    h, w = rgb.shape[:2]
    if w * height > h * width:  # wider than the target: keep the full height
        cw, ch = max(1, round(h * width / height)), h
    else:
        cw, ch = w, max(1, round(w * height / width))
    x0 = int(np.clip(round(centre[0] * w - cw / 2), 0, w - cw))
    y0 = int(np.clip(round(centre[1] * h - ch / 2), 0, h - ch))
    crop = rgb[y0 : y0 + ch, x0 : x0 + cw]
    interp = cv2.INTER_AREA if cw > width else cv2.INTER_LINEAR
    return np.ascontiguousarray(cv2.resize(crop, (width, height), interpolation=interp))


def _person_centre(keypoints: np.ndarray) -> tuple[float, float]:
    """Median normalized x, y of the confident body points over the loop (centre if none)."""
    from newsmotion_engine.skeleton import PARTS

    body = np.asarray(keypoints)[:, PARTS["body"]]
    ok = body[..., 2] > 0.3
    if not ok.any():
        return 0.5, 0.5
    return float(np.median(body[..., 0][ok])), float(np.median(body[..., 1][ok]))


def _video_frames(path: Path, n: int, width: int, height: int, centre: tuple[float, float], *, pad: int) -> np.ndarray:
    """The first ``n`` frames of ``path`` at :data:`MODEL_FPS`, fitted; up to ``pad`` missing
    frames at the end repeat the last (rounding of the two frame rates), more is an error."""
    from newsmotion_engine.videoio import iter_frames

    out = np.empty((n, height, width, 3), np.uint8)
    k = 0
    for rgb in iter_frames(path, MODEL_FPS):
        if k >= n:
            break
        out[k] = _fit(rgb, width, height, centre)
        k += 1
    if k == 0:
        raise BadInputError(path, "not a readable video (no decodable frames)")
    if n - k > pad:
        raise BadInputError(path, f"too short: {k} frames at {MODEL_FPS} fps ({k / MODEL_FPS:.2f} s); the loop lasts "
                                  f"{n / MODEL_FPS:.2f} s ({n} frames), so the driving clip must be at least that long")  # fmt: skip
    out[k:] = out[k - 1]
    return out


def _driver_persona(motion_dir: Path):
    """The driver's persona cache (built once under ``motion/driver/`` by the persona builder)."""
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.samples import write_sample_portrait
    from newsmotion_engine.storage import Storage

    home = Storage(Path(motion_dir) / "driver")
    image = home.persona_sources / f"{DRIVER_SAMPLE}.png"
    if not image.is_file():
        write_sample_portrait(DRIVER_SAMPLE, home.persona_sources)
    try:
        persona, _ = ensure_persona(home, DRIVER_SAMPLE, image=image)
    except ModuleNotFoundError as exc:  # mediapipe: the persona builder's detector
        raise NewsmotionError(
            f"building the driver persona {home.persona_dir(DRIVER_SAMPLE)} needs {exc.name} (not installed here, e.g. on "
            f"the GPU machine): materialize driving_clip (or run `newsmotion render`) once on a machine that has it, "
            f"or copy {home.root} from one"
        ) from None
    return persona


def _driver_render(guidance: Any, driver: Any, n: int, width: int, height: int) -> np.ndarray:
    from newsmotion_engine.render.base import RenderSpec, get_backend
    from newsmotion_engine.render.clip import retargeted_keypoints

    kp = resample_loop(retargeted_keypoints(guidance, driver), n)
    spec = RenderSpec(width=width, height=height, fps=MODEL_FPS, background=DRIVER_BACKGROUND)
    warp = get_backend("warp")
    try:
        return np.stack(list(warp.frames(guidance, driver, kp, spec)))
    finally:
        warp.close()


def _plan(guidance: Any, width: int, height: int, fps: int | None) -> tuple[dict, dict, dict, Any]:
    """(source, params, extra, produce) of the loop's clip: which origin, and what it depends on."""
    motion = _motion_dir(guidance)
    loop_id = str(guidance.loop_id)
    n = model_frame_count(len(guidance.keypoints), fps or loop_fps(guidance))
    loop = cachedir.cache_digest(guidance.metadata)
    params = {"format": FORMAT_VERSION, "fps": MODEL_FPS, "frames": n, "size": [width, height]}
    extra: dict[str, Any] = {"loop_id": loop_id, "fps": MODEL_FPS, "frames": n, "size": [width, height]}
    user = find_user_clip(motion, loop_id)
    if user is not None:
        from newsmotion_engine.videoio import open_video

        open_video(user)  # a non-video fails here, naming the file
        source = {"kind": "driving-clip", "loop": loop, "origin": "user", "sha256": cachedir.sha256_file(user)}
        params["fit"] = "centre-crop"
        extra.update(origin="user", file=str(user))
        return source, params, extra, lambda: _video_frames(user, n, width, height, (0.5, 0.5), pad=0)
    meta_source = dict(guidance.metadata.get("source") or {})
    if meta_source.get("kind") == "video":
        from newsmotion_engine.guidance.cache import find_driving_video
        from newsmotion_engine.storage import Storage

        video = find_driving_video(Storage(motion.parent), loop_id)
        if video is None:
            raise BadInputError(Storage(motion.parent).driving_dir / f"{loop_id}.mp4",
                                f"the video loop {loop_id!r} was extracted from is gone; put it back or drop a driving "
                                f"clip into {user_clips_dir(motion)}")  # fmt: skip
        if cachedir.sha256_file(video) != meta_source.get("sha256"):
            raise BadInputError(video, f"changed since loop {loop_id!r} was extracted from it; rebuild the loop's guidance cache first")
        source = {"kind": "driving-clip", "loop": loop, "origin": "source-video", "sha256": meta_source["sha256"]}
        centre = _person_centre(guidance.keypoints)
        params["fit"] = "person-centred-crop"
        extra.update(origin="source-video", file=str(video))
        return source, params, extra, lambda: _video_frames(video, n, width, height, centre, pad=2)
    driver = _driver_persona(motion)
    source = {"kind": "driving-clip", "loop": loop, "origin": "driver-render", "sha256": driver.digest}
    params.update(background=list(DRIVER_BACKGROUND), driver=DRIVER_SAMPLE)
    extra.update(origin="driver-render", driver={"sample": DRIVER_SAMPLE, "persona_digest": driver.digest})
    return source, params, extra, lambda: _driver_render(guidance, driver, n, width, height)


def ensure_driving_clip(guidance: Any, width: int, height: int, *, fps: int | None = None, force: bool = False) -> tuple[DrivingClip, bool]:
    """Make sure the loop's clip at ``width`` x ``height`` exists and is current: ``(clip, built)``.

    ``guidance`` is a loaded guidance cache (``path``, ``loop_id``, ``keypoints``, ``metadata``,
    ``fps``); ``fps`` overrides the loop's frame rate. Rebuilt when the loop, the origin's file or
    the driver changed; written atomically under the clip's lock.

    Raises:
        BadInputError: the user's clip or the loop's source video is unreadable, too short, gone
            or changed (the message names the file).
    """
    path = driving_clip_dir(guidance.path, width, height)
    source, params, extra, produce = _plan(guidance, width, height, fps)

    def build(frames: np.ndarray) -> None:
        cachedir.write_cache(path, lambda tmp: np.save(tmp / "frames.npy", np.ascontiguousarray(frames)),
                             schema=SCHEMA, source=source, params=params, extra=extra)  # fmt: skip

    return cachedir.ensure(path, lambda: _read(path, source, params), build, force=force, prepare=produce)
