"""The driving clip (guidance/driver.py): the three origins, the frame count at 24 fps, staleness
and bad user clips."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, CacheStaleError
from newsmotion_engine.guidance import driver
from newsmotion_engine.guidance.cache import GuidanceCache, ensure_guidance

W, H = 72, 128


def _write_video(path, frames: int, fps: int = 24, colour=(200, 40, 40), size=(96, 128)):
    path.parent.mkdir(parents=True, exist_ok=True)
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    for k in range(frames):
        img = np.full((size[1], size[0], 3), colour[::-1], np.uint8)
        cv2.putText(img, str(k), (5, 60), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (255, 255, 255), 2)
        out.write(img)
    out.release()
    return path


def test_frame_count_and_the_cyclic_resampling():
    assert driver.model_frame_count(120, 30) == 96 and driver.model_frame_count(13, 30) == 10
    kp = np.zeros((4, 2, 3), np.float32)
    kp[:, :, 0] = np.array([0.0, 0.4, 0.8, 0.2])[:, None]
    kp[:, :, 2] = np.array([1.0, 0.5, 1.0, 1.0])[:, None]
    out = driver.resample_loop(kp, 8)  # half-frame steps; the last one blends frame 3 with frame 0
    np.testing.assert_allclose(out[:, 0, 0], [0.0, 0.2, 0.4, 0.6, 0.8, 0.5, 0.2, 0.1], atol=1e-6)
    np.testing.assert_allclose(out[:, 0, 2], [1.0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(driver.resample_loop(kp, 4), kp)


def test_a_canonical_loop_is_the_warp_render_of_the_driver_portrait(storage):
    loop, _ = ensure_guidance(storage, "nod")
    clip, built = driver.ensure_driving_clip(loop, W, H)
    assert built and clip.origin == "driver-render" and clip.fps == 24
    assert isinstance(clip.frames, np.memmap) and clip.frames.shape == (96, H, W, 3) and clip.frames.dtype == np.uint8
    assert tuple(clip.frames[0, 2, 2]) == driver.DRIVER_BACKGROUND  # neutral grey around the person
    assert clip.frames[0].std() > 20  # a person is there
    assert np.abs(clip.frames[0].astype(int) - clip.frames[48].astype(int)).mean() > 0.1  # and moves
    assert clip.metadata["driver"]["sample"] == "astronaut" and clip.metadata["source"]["loop"] == loop.digest
    assert (storage.motion_dir / "driver" / "motion" / "persona_caches" / "astronaut").is_dir()
    again, built = driver.ensure_driving_clip(loop, W, H)
    assert not built and again.digest == clip.digest
    assert driver.load_driving_clip(loop, W, H).digest == clip.digest
    # Another version of the loop (a rebuilt guidance cache): the clip is stale until rebuilt.
    other = GuidanceCache(loop.loop_id, loop.path, loop.keypoints, {**loop.metadata, "params": {"other": 1}})
    with pytest.raises(CacheStaleError, match="another version of the loop"):
        driver.load_driving_clip(other, W, H)
    with pytest.raises(cachedir.CacheMissingError):
        driver.load_driving_clip(loop, 64, 128)


def test_a_user_clip_overrides_and_bad_ones_name_the_file(storage):
    loop, _ = ensure_guidance(storage, "nod")
    folder = driver.user_clips_dir(storage.motion_dir)
    user = _write_video(folder / "nod.mp4", frames=100)
    clip, built = driver.ensure_driving_clip(loop, W, H)
    assert built and clip.origin == "user" and clip.frames.shape == (96, H, W, 3)
    assert np.abs(clip.frames[0, 5, 5].astype(int) - (200, 40, 40)).max() < 20  # the user's red, centre-cropped
    user.unlink()
    _write_video(folder / "nod.mp4", frames=30)  # 1.25 s for a 4 s loop
    with pytest.raises(BadInputError, match=r"nod\.mp4: too short: 30 frames"):
        driver.ensure_driving_clip(loop, W, H)
    (folder / "nod.mp4").write_text("not a video")
    with pytest.raises(BadInputError, match=r"nod\.mp4"):
        driver.ensure_driving_clip(loop, W, H)


def test_a_custom_loop_is_driven_by_its_own_source_video(storage):
    nod, _ = ensure_guidance(storage, "nod")
    video = _write_video(storage.driving_dir / "wave.mp4", frames=100, colour=(30, 30, 220), size=(160, 90))
    path = storage.guidance_dir("wave")
    path.mkdir(parents=True)
    meta = {"source": {"kind": "video", "sha256": cachedir.sha256_file(video)}, "fps": 30}
    loop = GuidanceCache("wave", path, np.asarray(nod.keypoints), meta)
    clip, built = driver.ensure_driving_clip(loop, W, H)
    assert built and clip.origin == "source-video" and clip.frames.shape == (96, H, W, 3)
    assert np.abs(clip.frames[0, 5, 5].astype(int) - (30, 30, 220)).max() < 20
    # The video changed since the loop was extracted from it: refused, naming it.
    _write_video(video, frames=100, colour=(0, 0, 0), size=(160, 90))
    with pytest.raises(BadInputError, match=r"wave\.mp4: changed since loop 'wave' was extracted"):
        driver.ensure_driving_clip(loop, W, H, force=True)


def test_a_landscape_source_is_cropped_around_the_person():
    rgb = np.zeros((90, 160, 3), np.uint8)
    rgb[:, 120:130] = 255  # the person stands at x ~ 0.78
    out = driver._fit(rgb, 36, 64, centre=(0.78, 0.5))
    assert out.shape == (64, 36, 3) and out[:, 14:22].max() == 255
    assert driver._fit(rgb, 36, 64).max() == 0  # centred, the person is out of the crop
