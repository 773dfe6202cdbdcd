"""Contact sheets of the warp backend's speaking face: closed / open / wide / round mouth and a
blink, for every sample persona, rendered through the backend's own ``frames(..., visemes=...)``.

Each row is one sample portrait at 720x1280 held in its rest pose; each column a crop of the face
(enlarged, cubic) at one viseme frame. The blink column is the first
frame the seeded blink schedule shuts the eyes. Energy is zero in these tracks, so the head stays
still and the crops line up.

Run from the repository root::

    python -m benchmarks.lips_sheets                      # docs/contact_sheets/lips.png
    python -m benchmarks.lips_sheets --storage /tmp/st    # reuse persona caches between runs
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.backends.warp.face_motion import blink_track
from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait
from newsmotion_engine.skeleton import FACE_START
from newsmotion_engine.speech.visemes import VisemeTrack
from newsmotion_engine.storage import Storage

# (label, open, wide, round): the shapes the sheet shows.
SHAPES = (("closed", 0.0, 0.0, 0.0), ("open", 1.0, 0.3, 0.0), ("wide", 0.35, 1.0, 0.0), ("round", 0.45, 0.0, 1.0))
SEED = 0


def sheet_track(fps: float = 30.0, seed: int = SEED) -> tuple[VisemeTrack, list[tuple[str, int]]]:
    """A still track with each shape on its own frame and a shut-eye frame; ``(track, [(label, frame)])``."""
    frames = 600
    blink = blink_track(frames, fps, seed)
    shut = int(np.flatnonzero(blink >= 0.99)[0])
    open_, wide, round_ = (np.zeros(frames, np.float32) for _ in range(3))
    picks: list[tuple[str, int]] = []
    k = 0
    for label, o, w, r in SHAPES:
        while k < frames and blink[k] > 0:  # shapes on frames with the eyes open
            k += 1
        open_[k], wide[k], round_[k] = o, w, r
        picks.append((label, k))
        k += 1
    picks.append(("blink", shut))
    track = VisemeTrack(fps, open_, wide, round_, np.zeros(frames, np.float32))
    return track, picks


def face_box(landmarks: np.ndarray, spec: RenderSpec, portrait_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """A crop around the face (brows to below the chin), in output pixels."""
    from newsmotion_engine.render.placement import place_portrait

    ox, oy, pw, ph = place_portrait(portrait_hw, spec.width, spec.height)
    face = landmarks[FACE_START : FACE_START + 68]
    ok = face[:, 2] > 0.3
    pts = face[ok, :2] * [pw, ph] + [ox, oy]
    (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
    side = max(x1 - x0, y1 - y0) * 1.25
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 + 0.05 * side
    x0, y0 = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
    return x0, y0, int(min(spec.width, x0 + side)), int(min(spec.height, y0 + side))


def persona_row(persona, spec: RenderSpec, cell: int = 260) -> tuple[np.ndarray, list[str]]:
    track, picks = sheet_track(spec.fps)
    keep = sorted({k for _, k in picks})
    last = max(keep) + 1
    kp = np.repeat(np.asarray(persona.landmarks, np.float64)[None], last, axis=0)
    warp = get_backend("warp")
    warp.load()
    frames = {}
    for t, frame in enumerate(warp.frames(None, persona, kp, spec, visemes=track.slice(0, last))):
        if t in keep:
            frames[t] = frame
    box = face_box(np.asarray(persona.landmarks), spec, np.asarray(persona.portrait).shape[:2])
    x0, y0, x1, y1 = box
    report = warp.describe().get("last_render", {}).get("face", {})
    cells = []
    for label, k in picks:
        if label == "blink" and "blink_reason" in report:
            label = "no blink (side view)" if "side" in report["blink_reason"] else "no blink"
        crop = cv2.resize(frames[k][y0:y1, x0:x1], (cell, cell), interpolation=cv2.INTER_CUBIC)
        crop = np.ascontiguousarray(crop)
        cv2.rectangle(crop, (0, cell - 30), (cell, cell), (0, 0, 0), -1)
        cv2.putText(crop, label, (10, cell - 9), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (255, 255, 255), 2, cv2.LINE_AA)
        cells.append(crop)
    notes = [f"{persona.persona_id}: mouth {report.get('mouth_width_px', '-')} px wide" if report.get("moved")
             else f"{persona.persona_id}: {report.get('reason', 'no lips')}"]  # fmt: skip
    gap = np.full((cell, 6, 3), 255, np.uint8)
    row = cells[0]
    for c in cells[1:]:
        row = np.concatenate([row, gap, c], axis=1)
    return row, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", type=Path, default=None, help="a storage folder to build the sample personas in (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=Path("docs/contact_sheets/lips.png"))
    ap.add_argument("--personas", nargs="*", default=list(SAMPLE_PORTRAITS))
    args = ap.parse_args(argv)
    spec = RenderSpec()
    with tempfile.TemporaryDirectory(prefix="newsmotion-lips-") as tmp:
        store = Storage(args.storage or Path(tmp))
        rows = []
        for name in args.personas:
            persona, _ = ensure_persona(store, name, image=write_sample_portrait(name, store.persona_samples))
            row, notes = persona_row(persona, spec)
            print("; ".join(notes))
            rows.append(row)
        width = max(r.shape[1] for r in rows)
        sheet = np.concatenate([np.pad(r, ((0, 6), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows], axis=0)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp_png = args.out.with_name(f".{args.out.name}.tmp.png")
        if not cv2.imwrite(str(tmp_png), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]):
            raise SystemExit(f"could not write {tmp_png}")
        tmp_png.replace(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
