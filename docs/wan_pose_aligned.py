"""Contact sheet of wan-animate's pose video against its reference frame: for one sample persona
and loop, the reference frame the backend encodes, the pose video's frames (the retargeted loop
drawn in Wan-Animate's training style where the portrait is placed, ``caches.pose_frames``) alone
and over the reference, at 720x1280 and at 720x720 (not stretched), next to the earlier drawing
(the loop's own rig in the display style, ``guidance/draw.py``, on the whole frame).

    NEWSMOTION_STORAGE=/tmp/nm PYTHONPATH=. python docs/wan_pose_aligned.py astronaut welcome docs/wan_pose_aligned.png

The persona is built from the bundled sample portrait of that name when the storage lacks it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.guidance.draw import draw_pose
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.render.base import RenderSpec
from newsmotion_engine.render.clip import retargeted_keypoints
from newsmotion_engine.render.backends.wan.artifacts import reference_frame
from newsmotion_engine.render.backends.wan_animate import caches as C
from newsmotion_engine.samples import write_sample_portrait
from newsmotion_engine.storage import Storage

TILE_H = 480


def label(img: np.ndarray, text: str) -> np.ndarray:
    out = img.copy()
    cv2.putText(out, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 4, cv2.LINE_AA)
    cv2.putText(out, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def tile(img: np.ndarray, text: str) -> np.ndarray:
    scale = TILE_H / img.shape[0]
    small = cv2.resize(img, (round(img.shape[1] * scale), TILE_H), interpolation=cv2.INTER_AREA)
    return np.pad(label(small, text), ((0, 4), (0, 4), (0, 0)), constant_values=255)


def overlay(reference: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """The pose's lit pixels over a dimmed reference."""
    out = (reference.astype(np.float32) * 0.55).astype(np.uint8)
    lit = pose.any(axis=-1)
    # Thicken the strokes for the downscaled view only (the model sees ``pose`` as drawn).
    lit = cv2.dilate(lit.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    grown = cv2.dilate(pose, np.ones((3, 3), np.uint8))
    out[lit] = grown[lit]
    return out


def main(persona_id: str, loop_id: str, out_png: str) -> None:
    storage = Storage.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        image = None if storage.find_persona_source(persona_id) else write_sample_portrait(persona_id, Path(tmp))
        persona, _ = ensure_persona(storage, persona_id, image=image)
    guidance, _ = ensure_guidance(storage, loop_id)
    kp = retargeted_keypoints(guidance, persona)
    t = kp.shape[0] // 4  # a frame a quarter into the loop: mid-gesture
    rows = []
    for width, height in ((720, 1280), (720, 720)):
        spec = RenderSpec(width=width, height=height)
        ref = reference_frame(persona, width, height, spec.background)
        pose = C.pose_frames(persona, kp[[0, t]], width, height)
        cells = [tile(ref, f"reference {width}x{height}"), tile(pose[1], f"wan pose f{t}"),
                 tile(overlay(ref, pose[0]), "f0 over reference"), tile(overlay(ref, pose[1]), f"f{t} over reference")]
        if width == 720 and height == 1280:
            old = draw_pose(np.asarray(guidance.keypoints)[0], width, height)
            cells.append(tile(overlay(ref, old), "before: loop rig f0"))
        rows.append(np.concatenate(cells, axis=1))
    full = max(r.shape[1] for r in rows)
    sheet = np.concatenate([np.pad(r, ((0, 0), (0, full - r.shape[1]), (0, 0)), constant_values=255) for r in rows], axis=0)
    cv2.imwrite(out_png, cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    print(out_png, sheet.shape)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
