"""The fidelity bench's control: a perfect still render (the rest frame repeated) scores 1 with
the extractor the renders are read with."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec
from newsmotion_engine.render.fidelity import mediapipe_available


@pytest.mark.skipif(not mediapipe_available(), reason="needs mediapipe's holistic extractor")
def test_the_frozen_rest_control_scores_1_read_as_stills():
    import cv2

    from newsmotion_engine.bench.fidelity import FROZEN_FRAMES, frozen_rest_control
    from newsmotion_engine.guidance.holistic import HolisticDetector
    from newsmotion_engine.samples import sample_rgb

    portrait = np.zeros((512, 288, 3), np.uint8)
    portrait[512 - 288 :] = cv2.resize(sample_rgb("camera"), (288, 288), interpolation=cv2.INTER_AREA)
    mask = np.zeros((512, 288), np.uint8)
    mask[512 - 288 :] = 255
    spec = RenderSpec(288, 512)
    green = np.full_like(portrait, spec.background)
    green[mask > 0] = portrait[mask > 0]
    with HolisticDetector(static_image_mode=True) as det:
        landmarks = det.detect(green).astype(np.float64)
    persona = SimpleNamespace(portrait=portrait, person_mask=mask, landmarks=landmarks)
    control = frozen_rest_control(persona, spec)
    assert control["frames"] == FROZEN_FRAMES
    assert control["stills"]["pck_body"] == 1.0
    assert control["video_mode"] is not None and control["video_mode"]["pck_body"] is not None
