"""Contact sheet of the warp backend's gesture peaks: renders the 7 canonical loops for one
persona (through the normal render path, into the given storage), reads back from each mp4 the
frame where the loop's arm and head joints are furthest from rest, and tiles them with the rest
frame and the parts the render did not animate (from its telemetry).

    NEWSMOTION_STORAGE=/tmp/nm PYTHONPATH=. python docs/warp_gestures.py astronaut docs/warp_gestures_astronaut.png

The persona must exist in that storage (``newsmotion persona add IMAGE --id ID``).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.guidance.catalogue import LOOP_IDS
from newsmotion_engine.persona.cache import load_persona
from newsmotion_engine.render import RenderSpec, get_backend, retarget
from newsmotion_engine.render.clip import loop_canvas_size
from newsmotion_engine.render.job import render_persona_loop
from newsmotion_engine.skeleton import BODY
from newsmotion_engine.storage import Storage

_MOVING = [BODY[n] for n in ("nose", "left_elbow", "right_elbow", "left_wrist", "right_wrist")]


def peak_frame(guidance, persona) -> int:
    """The frame where the head and arm joints are furthest from the persona's rest pose."""
    h, w = np.asarray(persona.portrait).shape[:2]
    kp = retarget(np.asarray(guidance.keypoints), persona.landmarks, loop_size=loop_canvas_size(guidance), persona_size=(w, h))
    d = np.linalg.norm((kp[:, _MOVING, :2] - persona.landmarks[None, _MOVING, :2]) * (w, h), axis=-1).sum(axis=1)
    return int(np.argmax(d))


def read_frame(path: Path, index: int) -> np.ndarray:
    cap = cv2.VideoCapture(str(path))
    try:
        cap.set(cv2.CAP_PROP_POS_FRAMES, index)
        ok, bgr = cap.read()
        if not ok:
            raise RuntimeError(f"{path}: cannot read frame {index}")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    finally:
        cap.release()


def label(img: np.ndarray, text: str) -> np.ndarray:
    out = img.copy()
    cv2.putText(out, text, (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 4, cv2.LINE_AA)
    cv2.putText(out, text, (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def main(persona_id: str, out_png: str) -> None:
    storage = Storage.from_env()
    persona = load_persona(storage, persona_id)
    backend = get_backend("warp")
    spec = RenderSpec()
    tiles, parts = [], None
    rest = None
    for loop_id in LOOP_IDS:
        guidance, _ = ensure_guidance(storage, loop_id)
        tele = render_persona_loop(storage, persona_id, loop_id, backend, spec, force=True)
        t = peak_frame(guidance, persona)
        frame = read_frame(Path(tele.output), t)
        if rest is None:
            rest = read_frame(Path(tele.output), 0)
        tiles.append((f"{loop_id} f{t}", frame))
        parts = tele.backend_info.get("last_render", {}).get("parts")
    tiles.append(("rest f0", rest))
    # Crop every tile to the region the person uses in any of them (plus a margin).
    stack = np.stack([f for _, f in tiles])
    moving = (np.abs(stack.astype(int) - np.asarray(spec.background)).max(axis=3) > 30).any(axis=0)
    ys, xs = np.nonzero(moving)
    m = 20
    y0, y1 = max(0, ys.min() - m), min(spec.height, ys.max() + m)
    x0, x1 = max(0, xs.min() - m), min(spec.width, xs.max() + m)
    scale = 360 / (y1 - y0)
    cells = [label(cv2.resize(f[y0:y1, x0:x1], None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA), name) for name, f in tiles]
    row = lambda items: np.concatenate(items, axis=1)  # noqa: E731
    sheet = np.concatenate([row(cells[:4]), row(cells[4:])], axis=0)
    # Footer: which parts were not animated and why (the render telemetry's words).
    note = "not animated: " + ("; ".join(f"{k}: {v}" for k, v in (parts or {}).get("not_animated", {}).items()) or "none")
    limited = (parts or {}).get("limited", {})
    if limited:
        note += ". held back: " + "; ".join(f"{k}: {v}" for k, v in limited.items())
    lines = textwrap.wrap(f"{persona_id} - warp backend, peak frame of each loop. {note}", sheet.shape[1] // 9)
    footer = np.full((24 * len(lines) + 12, sheet.shape[1], 3), 255, np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(footer, line, (10, 24 * (i + 1)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.imwrite(out_png, cv2.cvtColor(np.concatenate([sheet, footer], axis=0), cv2.COLOR_RGB2BGR))
    print(out_png, sheet.shape)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
