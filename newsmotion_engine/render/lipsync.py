"""Lip sync: do a rendered clip's lips move with its speech? Measured on the mp4, for any backend.

Like pose fidelity (:mod:`newsmotion_engine.render.fidelity`), the score judges the output and
needs no weights: the mp4 is read back frame by frame (streamed), mediapipe's face mesh finds the
face in every frame, and the mouth's **aperture** is the inner-lip gap (mesh vertices 13, 14: the
middle of the upper and lower inner lip) over the mouth's width (vertices 61, 291: the corners),
so it does not depend on the face's size in the frame. The aperture series is compared with the
speech's viseme track (:class:`~newsmotion_engine.speech.visemes.VisemeTrack`, one frame per
video frame): its ``open`` channel, or its ``energy`` when ``open`` is flat.

Figures (:class:`~newsmotion_engine.render.telemetry.LipSync`):

- ``correlation``: the Pearson correlation of aperture and reference at the best lag, over the
  frames where a face was found; 1 means the mouth opens exactly as much and when the speech says;
- ``offset_frames``: that lag, searched within ±``max_lag`` frames (default
  :data:`MAX_LAG`); positive means the video is late (the mouth opens after the sound);
- ``correlation_at_zero``: the correlation without any shift.

Targets (:func:`lip_sync_problems`, the one rule the Dagster check and the bench share):
``correlation >= 0.6`` and ``|offset_frames| <= 1``.

A frame read as a still would let the mesh's face detector run on every frame; the face mesh's
video mode instead tracks the face region between frames and re-detects only when it loses it,
which is faster, and the lips' landmarks are still regressed afresh in every frame.

mediapipe is imported only when a clip is scored: the engine imports without it, and where it is
missing (the GPU machine) :func:`measure_lip_sync` returns ``None`` and a reason.

Example::

    score = lip_sync_score("storage/motion/renders/anna/nod/warp.mp4", speech.visemes)
    score.correlation, score.offset_frames
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.nativelog import filter_native_stderr
from newsmotion_engine.render.telemetry import LipSync

if TYPE_CHECKING:
    from newsmotion_engine.speech.visemes import VisemeTrack

__all__ = [
    "LIP_SYNC_VERSION",
    "LipSync",
    "LipSyncError",
    "LipSyncScore",
    "MAX_LAG",
    "OFF_REASON",
    "SILENT_REASON",
    "TARGET_CORRELATION",
    "TARGET_OFFSET_FRAMES",
    "best_lag",
    "lip_sync_problems",
    "lip_sync_score",
    "measure_lip_sync",
    "mouth_aperture",
]

LIP_SYNC_VERSION = 1
MAX_LAG = 5
TARGET_CORRELATION = 0.6
TARGET_OFFSET_FRAMES = 1
# At least this many frames with a face, and some movement on both sides, to call it a score.
MIN_FRAMES = 8
_FLAT = 1e-6
# What a clip rendered without speech records instead of a score.
SILENT_REASON = "a silent clip (rendered without speech): no lips to score"
# What a clip records when measuring the written clip is turned off (renders and stories alike).
OFF_REASON = "not measured (measuring the written clip is turned off)"
# Face mesh vertices: inner lip middle (upper, lower), mouth corners.
_UPPER_INNER, _LOWER_INNER, _CORNER_A, _CORNER_B = 13, 14, 61, 291

# The record is defined once, in the telemetry module; here it is the score's name too.
LipSyncScore = LipSync


class LipSyncError(NewsmotionError):
    """A clip whose lip sync cannot be scored (no mediapipe, no face, a speech that never moves
    the mouth, a track of another length); the message says which."""


def mouth_aperture(landmarks_xy: np.ndarray) -> float:
    """Inner-lip gap over mouth width from one face mesh's ``[468+, 2]`` pixel coordinates."""
    gap = float(np.linalg.norm(landmarks_xy[_UPPER_INNER] - landmarks_xy[_LOWER_INNER]))
    width = float(np.linalg.norm(landmarks_xy[_CORNER_A] - landmarks_xy[_CORNER_B]))
    return gap / width if width > 0 else float("nan")


def best_lag(aperture: np.ndarray, reference: np.ndarray, max_lag: int = MAX_LAG) -> tuple[int | None, float | None, float | None]:
    """``(lag, correlation at lag, correlation at 0)``: the shift of ``aperture`` against
    ``reference`` (``aperture[t]`` with ``reference[t - lag]``) within ±``max_lag`` frames that
    correlates best. NaN apertures (no face) are left out. Ties go to the smaller shift.
    ``(None, None, None)`` when no shift leaves :data:`MIN_FRAMES` frames with both moving."""
    a = np.asarray(aperture, np.float64)
    r = np.asarray(reference, np.float64)
    T = min(a.size, r.size)
    best: tuple[int | None, float | None] = (None, None)
    at_zero = None
    for lag in sorted(range(-max_lag, max_lag + 1), key=abs):
        lo, hi = max(0, lag), min(T, T + lag)
        x, y = a[lo:hi], r[lo - lag : hi - lag]
        ok = np.isfinite(x)
        x, y = x[ok], y[ok]
        if x.size < MIN_FRAMES or x.std() < _FLAT or y.std() < _FLAT:
            continue
        c = float(np.corrcoef(x, y)[0, 1])
        if lag == 0:
            at_zero = c
        if best[1] is None or c > best[1] + 1e-9:
            best = (lag, c)
    return best[0], best[1], at_zero


def _face_mesh_apertures(frames: Iterable[np.ndarray]) -> list[float]:
    """The aperture of every frame (NaN where no face is found), through mediapipe's face mesh."""
    import mediapipe as mp

    out: list[float] = []
    with filter_native_stderr(), mp.solutions.face_mesh.FaceMesh(  # mediapipe's start-up log lines (see nativelog)
        static_image_mode=False, max_num_faces=1, refine_landmarks=False, min_detection_confidence=0.5, min_tracking_confidence=0.5
    ) as mesh:
        for rgb in frames:
            result = mesh.process(np.ascontiguousarray(rgb))
            if not result.multi_face_landmarks:
                out.append(float("nan"))
                continue
            h, w = rgb.shape[:2]
            lm = result.multi_face_landmarks[0].landmark
            xy = np.array([(p.x * w, p.y * h) for p in lm], np.float64)
            out.append(mouth_aperture(xy))
    return out


def extractor_name() -> str:
    from importlib.metadata import version

    return f"mediapipe-face-mesh {version('mediapipe')} (video mode)"


def lip_sync_score(
    mp4_path: Path | str,
    visemes: VisemeTrack,
    *,
    max_lag: int = MAX_LAG,
    apertures: Callable[[Iterable[np.ndarray]], list[float]] | None = None,
    extractor: str | None = None,
) -> LipSyncScore:
    """Score the lip sync of the clip at ``mp4_path`` against ``visemes`` (one frame per video frame).

    Args:
        mp4_path: the rendered clip.
        visemes: the speech's track the clip was rendered with.
        max_lag: the largest audio-video offset searched, in frames (each way).
        apertures: what reads the mouth aperture of each frame (default: mediapipe's face mesh);
            tests pass their own.
        extractor: its name for the record.

    Raises:
        LipSyncError: mediapipe missing, the track's length differs from the clip's, too few
            frames with a face, or a speech whose tracks never move (nothing to correlate).
        BadInputError: the mp4 cannot be read.
    """
    from newsmotion_engine.videoio import iter_frames

    started = time.perf_counter()
    if apertures is None:
        if importlib.util.find_spec("mediapipe") is None:
            raise LipSyncError("mediapipe is not installed here: the lip-sync score needs its face mesh")
        apertures, extractor = _face_mesh_apertures, extractor_name()
    reference, reference_name = np.asarray(visemes.open, np.float64), "open"
    if reference.std() < _FLAT:
        reference, reference_name = np.asarray(visemes.energy, np.float64), "energy"
    if reference.std() < _FLAT:
        raise LipSyncError("the speech's viseme track never moves the mouth (open and energy are flat): nothing to score")
    ap = np.asarray(apertures(iter_frames(mp4_path)), np.float64)
    if ap.size != reference.size:
        raise LipSyncError(f"{mp4_path}: {ap.size} video frames for a {reference.size}-frame viseme track")
    found = int(np.isfinite(ap).sum())
    if found < MIN_FRAMES:
        raise LipSyncError(f"{mp4_path}: a face was found in {found} of {ap.size} frames; too few to score the lips")
    lag, corr, at_zero = best_lag(ap, reference, max_lag)
    seen = ap[np.isfinite(ap)]
    meets = corr is not None and lag is not None and corr >= TARGET_CORRELATION and abs(lag) <= TARGET_OFFSET_FRAMES
    return LipSync(
        version=LIP_SYNC_VERSION,
        correlation=None if corr is None else round(corr, 4),
        offset_frames=lag,
        correlation_at_zero=None if at_zero is None else round(at_zero, 4),
        reference=reference_name,
        max_lag=int(max_lag),
        frames=int(ap.size),
        frames_measured=found,
        aperture={"min": round(float(seen.min()), 4), "median": round(float(np.median(seen)), 4), "max": round(float(seen.max()), 4)},
        extractor=extractor or "custom",
        targets={"correlation": TARGET_CORRELATION, "offset_frames": TARGET_OFFSET_FRAMES},
        meets_targets=bool(meets),
        seconds=round(time.perf_counter() - started, 3),
    )


def measure_lip_sync(mp4_path: Path | str, visemes: VisemeTrack | None, **kw: Any) -> tuple[LipSyncScore | None, str | None]:
    """:func:`lip_sync_score`, or ``(None, reason)`` when the clip cannot be scored (a silent
    clip, no mediapipe, no face...): what the render records; never raises for those."""
    if visemes is None:
        return None, SILENT_REASON
    try:
        return lip_sync_score(mp4_path, visemes, **kw), None
    except LipSyncError as exc:
        return None, str(exc)
    except NewsmotionError as exc:
        return None, f"the clip could not be read back ({exc})"
    except Exception as exc:  # a broken mediapipe install must not lose the render
        return None, f"the face mesh failed ({type(exc).__name__}: {exc})"


def lip_sync_problems(score: LipSyncScore | None, reason: str | None = None) -> list[str]:
    """What keeps a clip's lip sync from its targets, as sentences (``[]`` when it meets both):
    the one rule the Dagster check and the bench share. An unmeasured clip is a problem too."""
    if score is None:
        return [f"lip sync not measured: {reason or 'no reason recorded'}"]
    if score.correlation is None or score.offset_frames is None:
        return ["lip sync: the measured aperture or the speech track does not move enough to correlate"]
    problems = []
    if score.correlation < TARGET_CORRELATION:
        problems.append(f"lip-sync correlation {score.correlation:.3f} < {TARGET_CORRELATION}")
    if abs(score.offset_frames) > TARGET_OFFSET_FRAMES:
        problems.append(f"audio-video offset {score.offset_frames:+d} frames (|offset| > {TARGET_OFFSET_FRAMES})")
    return problems
