"""The lip-sync bench's MuseTalk arm on the tiny stage: warp's silent render goes through the
MuseTalk pass, its output (not the silent clip) is what gets scored, and a clip the face mesh
cannot score is recorded with the reason; the echomimic-v3 arm on the tiny preset renders the cut
speech and records a noise clip as unscored (faces found, the reason)."""

import numpy as np
import pytest

from benchmarks.lipsync import NOISE_NOTE, _musetalk_result, bench_lipsync_musetalk
from newsmotion_engine.render.musetalk.config import MuseTalkOptions
from newsmotion_engine.storage import Storage

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_musetalk_arm_scores_the_stage_output_and_the_silent_control(tmp_path):
    seen: list[np.ndarray] = []

    def apertures(frames):
        """A stand-in face mesh: the clip's mean brightness per frame; it finds no face in the
        second clip scored (the silent control), as the real mesh may on a noise face."""
        clip = np.stack(list(frames))
        seen.append(clip)
        if len(seen) == 2:
            return [float("nan")] * len(clip)
        return list(clip.reshape(len(clip), -1).mean(axis=1) / 255.0)

    opts = MuseTalkOptions(preset="tiny", device="cpu", batch_size=4)
    data = bench_lipsync_musetalk(Storage(tmp_path / "store"), ["astronaut"], opts, seconds=0.3, width=144, height=256,
                                  keep=tmp_path / "clips", log=lambda _: None, apertures=apertures, extractor="mean")  # fmt: skip

    assert data["speech"] == {**data["speech"], "id": "intro", "frames": 9} and abs(data["speech"]["cut_s"] - 0.3) < 0.01
    assert data["stage"]["weights"] == "random weights" and data["stage"]["preset"] == "tiny"
    (row,) = data["renders"]
    assert row["musetalk"]["frames"] == row["musetalk"]["redrawn"] == row["musetalk"]["render_frames"] == 9
    musetalk_clip, silent_clip = seen
    assert musetalk_clip.shape == silent_clip.shape == (9, 256, 144, 3)
    # the first clip scored is MuseTalk's: its redrawn lower face differs from the silent render
    assert np.abs(musetalk_clip.astype(int) - silent_clip.astype(int)).max() > 60
    assert row["score"]["extractor"] == "mean" and row["score"]["frames_measured"] == 9
    assert row["control_silent"]["correlation"] is None and "a face was found in 0 of 9 frames" in row["control_silent"]["error"]

    record = _musetalk_result(data)
    assert NOISE_NOTE in record.title and record.headline["note"] == NOISE_NOTE and record.weights == "random weights"
    assert record.headline["astronaut silent control correlation"] == "n/a"


def test_echomimic_arm_renders_the_speech_and_records_an_unscorable_noise_clip(tmp_path):
    """The echomimic-v3 arm on the tiny preset (random weights): the cut speech reaches the backend
    as a speech track's features, render_clip writes a clip of the cut's length, and a clip in which
    the face mesh finds no face (a noise frame) is recorded as unscored with the count and reason."""
    pytest.importorskip("diffusers")
    from benchmarks.lipsync import ECHOMIMIC_NOTE, _echomimic_result, bench_lipsync_echomimic

    scored: list[np.ndarray] = []

    def no_face(frames):
        """A stand-in face mesh that finds no face, as the real one on a random-weight frame."""
        clip = np.stack(list(frames))
        scored.append(clip)
        return [float("nan")] * len(clip)

    data = bench_lipsync_echomimic(Storage(tmp_path / "store"), ["astronaut"], seconds=0.2, width=64, height=128, steps=1,
                                   keep=tmp_path / "clips", log=lambda _: None, apertures=no_face, extractor="none")  # fmt: skip

    assert data["speech"] == {**data["speech"], "id": "intro", "frames": 6} and abs(data["speech"]["cut_s"] - 0.2) < 0.01
    assert data["speech"]["track"]["duration_s"] == data["speech"]["cut_s"] and data["speech"]["features"] == "official"
    assert data["backend"] == {**data["backend"], "preset": "tiny", "weights": "random weights", "device": "cpu", "steps": 1}
    (row,) = data["renders"]
    assert row["frames"] == 6 and row["model"]["segments"] == 1 and row["model"]["model_frames"] == 5  # 0.2 s at 25 fps
    assert row["mouth"]["driven_by"] == "given features (use_speech_audio)"
    (clip,) = scored
    assert clip.shape == (6, 128, 64, 3)  # the written clip, at the render size
    assert row["faces_found"] == "0 of 6" and row["score"]["correlation"] is None
    assert row["score"]["error"] == "astronaut-echomimic-v3.mp4: a face was found in 0 of 6 frames; too few to score the lips"
    assert (tmp_path / "clips" / "astronaut-echomimic-v3.mp4").is_file()

    record = _echomimic_result(data)
    assert record.name == "lipsync_echomimic_v3_cpu" and record.weights == "random weights"
    assert record.headline["note"] == ECHOMIMIC_NOTE and "random weights" in ECHOMIMIC_NOTE and "plumbing" in ECHOMIMIC_NOTE
    assert record.headline["astronaut frames with a face"] == "0 of 6"
    assert record.headline["astronaut correlation (echomimic-v3)"] == "n/a" and "0 of 6 frames" in record.headline["astronaut unscored"]
    assert "noise" in record.title and "plumbing" in record.title
