"""render_clip: mp4 + telemetry, streamed, nothing partial on failure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render import BackendNeeds, RenderProvenance, RenderSpec, RenderTelemetry, get_backend, render_clip
from newsmotion_engine.video import probe_video
from newsmotion_engine.render.telemetry import SCHEMA_VERSION

SPEC = RenderSpec(216, 384, fps=30)


def test_render_clip_writes_a_valid_mp4_and_telemetry(tmp_path, persona, synth):
    loop = synth.make_loop(12)
    backend = get_backend("warp", threads=1)
    seen = []
    out = tmp_path / "warp.mp4"
    provenance = RenderProvenance("d" * 64, "g" * 64, "p" * 64, guidance_cache="hit", persona_cache="built")
    tele = render_clip(loop, persona, backend, SPEC, out, progress=lambda d, t: seen.append((d, t)), provenance=provenance)
    assert probe_video(out) == {"codec": "h264", "pix_fmt": "yuv420p", "width": 216, "height": 384, "frames": 12, "fps": 30.0}
    assert RenderTelemetry.read(out.with_suffix(".json")) == tele
    assert json.loads(out.with_suffix(".json").read_text())["schema_version"] == SCHEMA_VERSION
    assert tele.backend == "warp" and tele.weights == "none" and tele.outcome == "rendered"
    assert tele.frames == 12 and tele.width == 216 and tele.encoder in ("libx264", "h264_nvenc")
    assert (tele.guidance_cache, tele.persona_cache, tele.input_digest) == ("hit", "built", "d" * 64)
    assert tele.fps_achieved > 0 and tele.peak_rss_mb > 10 and tele.render_ms > 0 and tele.retarget_ms >= 0
    assert seen[-1] == (12, 12) and len(seen) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warp.json", "warp.mp4"]


class _SpyBackend:
    """Yields ``fail_at`` good frames, then raises; records whether it was asked at all."""

    name = "spy"
    needs = BackendNeeds()

    def __init__(self, fail_at=None, count=None):
        self.fail_at, self.count, self.called = fail_at, count, False

    def load(self):
        pass

    def close(self):
        pass

    def describe(self):
        return {"weights": "none"}

    def frames(self, guidance, persona, keypoints, spec):
        self.called = True
        n = self.count if self.count is not None else len(keypoints)
        for i in range(n):
            if i == self.fail_at:
                raise RuntimeError("backend exploded")
            yield np.zeros((spec.height, spec.width, 3), np.uint8)


def test_missing_folder_fails_before_rendering(tmp_path, persona, synth):
    spy = _SpyBackend()
    with pytest.raises(BadInputError, match="does not exist"):
        render_clip(synth.make_loop(4), persona, spy, SPEC, tmp_path / "missing" / "x.mp4")
    assert not spy.called


def test_a_failing_backend_leaves_no_partial_output(tmp_path, persona, synth):
    out = tmp_path / "x.mp4"
    out.write_bytes(b"previous good render")  # an older render stays untouched
    with pytest.raises(RuntimeError, match="exploded"):
        render_clip(synth.make_loop(8), persona, _SpyBackend(fail_at=5), SPEC, out)
    assert out.read_bytes() == b"previous good render"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.mp4"]


def test_a_backend_yielding_the_wrong_frame_count_is_refused(tmp_path, persona, synth):
    with pytest.raises(RuntimeError, match="yielded 3 frames"):
        render_clip(synth.make_loop(8), persona, _SpyBackend(count=3), SPEC, tmp_path / "x.mp4")
    assert list(tmp_path.iterdir()) == []
