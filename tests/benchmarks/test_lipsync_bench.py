"""The lip-sync bench's MuseTalk arm on the tiny stage: warp's silent render goes through the
MuseTalk pass, its output (not the silent clip) is what gets scored, and a clip the face mesh
cannot score is recorded with the reason."""

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
