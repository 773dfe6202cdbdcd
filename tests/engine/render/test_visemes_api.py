"""The viseme keyword of the backend API: render_clip hands the track to the backend (at the
keyframes only when sparse), refuses one of the wrong length before rendering, and a silent render
calls frames() without it."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import BackendNeeds, RenderSpec, render_clip
from newsmotion_engine.render.base import VisemeMismatchError, moves_lips

from tests.engine.render.viseme_tracks import speaking

SPEC = RenderSpec(128, 224, fps=30)


class _ListeningBackend:
    name = "listening"
    needs = BackendNeeds()
    moves_lips = True

    def __init__(self):
        self.got = []

    def load(self):
        pass

    def close(self):
        pass

    def describe(self):
        return {"weights": "none"}

    def frames(self, guidance, persona, keypoints, spec, **speech):
        self.got.append(speech)
        for _ in range(len(keypoints)):
            yield np.zeros((spec.height, spec.width, 3), np.uint8)


def test_the_track_reaches_the_backend(tmp_path, persona, synth):
    backend, track = _ListeningBackend(), speaking(12)
    render_clip(synth.make_loop(12), persona, backend, SPEC, tmp_path / "a.mp4", visemes=track)
    assert backend.got[0]["visemes"] is track


def test_sparse_keyframes_get_the_track_at_the_keyframes(tmp_path, persona, synth):
    backend, track = _ListeningBackend(), speaking(12)
    spec = RenderSpec(128, 224, fps=30, keyframes=2)
    render_clip(synth.make_loop(12), persona, backend, spec, tmp_path / "a.mp4", visemes=track)
    got = backend.got[0]["visemes"]
    assert len(got) == 6 and got.fps == 15.0
    np.testing.assert_array_equal(got.open, track.open[::2])
    np.testing.assert_array_equal(got.round, track.round[::2])


def test_a_track_of_another_length_is_refused_before_rendering(tmp_path, persona, synth):
    backend = _ListeningBackend()
    with pytest.raises(VisemeMismatchError, match="11 frames for a 12-frame"):
        render_clip(synth.make_loop(12), persona, backend, SPEC, tmp_path / "a.mp4", visemes=speaking(11))
    assert backend.got == [] and list(tmp_path.iterdir()) == []


def test_a_silent_render_passes_no_keyword(tmp_path, persona, synth):
    backend = _ListeningBackend()
    render_clip(synth.make_loop(4), persona, backend, SPEC, tmp_path / "a.mp4")
    assert backend.got == [{}]


def test_moves_lips_reads_the_class_attribute():
    assert moves_lips(_ListeningBackend()) and not moves_lips(object())


def test_the_input_digest_covers_the_track_only_when_there_is_one():
    from types import SimpleNamespace

    from newsmotion_engine.render.job import input_digest

    g, p = SimpleNamespace(digest="g" * 64), SimpleNamespace(digest="p" * 64)
    backend = _ListeningBackend()
    silent = input_digest(g, p, backend, SPEC)
    assert input_digest(g, p, backend, SPEC, None) == silent
    a, b = speaking(12, seed=1), speaking(12, seed=2)
    assert len({silent, input_digest(g, p, backend, SPEC, a), input_digest(g, p, backend, SPEC, b)}) == 3
    assert input_digest(g, p, backend, SPEC, a) == input_digest(g, p, backend, SPEC, speaking(12, seed=1))
