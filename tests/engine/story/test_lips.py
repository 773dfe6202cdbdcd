"""Stories with MuseTalk lips (tiny models, random weights, a drawn persona, a story of under a
second): the stage runs in the story path, the record says so, the digest follows the lips, the
avatar sub-cache is reused, bad lips options and model folders leave nothing behind."""

import importlib.util
import types
from pathlib import Path

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.musetalk.avatar import AVATAR_SCHEMA
from newsmotion_engine.render.musetalk.components import MuseTalkModelError, load_components
from newsmotion_engine.render.musetalk.config import MuseTalkConfigError, MuseTalkOptions
from newsmotion_engine.story.format import parse_story
from newsmotion_engine.story.lips import story_avatar_dir, story_lips
from newsmotion_engine.story.render import StoryInputs, plan_story, render_story
from newsmotion_engine.story.speech import assemble_speech
from newsmotion_engine.story.telemetry import StoryTelemetry
from newsmotion_engine.video.encode import VideoEncoder
from newsmotion_engine.video.streams import av_sync
from newsmotion_engine.videoio import iter_frames

SPEC = RenderSpec(width=216, height=384, fps=30)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _story_tests():
    path = Path(__file__).resolve().parent / "test_render.py"
    spec = importlib.util.spec_from_file_location("_story_render_tests_lips", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def short_story_inputs(folder: Path) -> StoryInputs:
    """One 0.3 s sentence with a wave, 0.1 s lead-in, 0.2 s tail: 18 frames at 30 fps."""
    base = _story_tests().drawn_story_inputs(folder)
    story = parse_story({"persona": "synth", "speech": [{"id": "one", "text": "Hi."}],
                         "gestures": [{"loop": "synth_wave", "sentence": 1}], "lead_in": 0.1, "tail": 0.2},
                        folder / "short.yaml")  # fmt: skip
    speech = assemble_speech(story, [_story_tests().sentence("one", 0.3)], SPEC.fps)
    return StoryInputs(story, base.persona, base.loops, speech)


@pytest.fixture(scope="module")
def tiny_opts():
    return MuseTalkOptions(preset="tiny", device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def tiny(tiny_opts, one_torch_thread):
    return load_components(tiny_opts)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return short_story_inputs(tmp_path_factory.mktemp("story"))


def test_musetalk_lips_run_in_the_story_and_the_record_says_so(storage, inputs, tiny_opts, tiny, tmp_path):
    backend = get_backend("warp")
    out = tmp_path / "short.mp4"
    tele = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out, lip_sync=False,
                        lips=tiny_opts, lips_components=tiny)  # fmt: skip
    frames = inputs.speech.frames
    assert tele.lips == "musetalk" and tele.lips_label == "musetalk (random weights)" and tele.moves_lips
    mt = tele.musetalk
    assert mt["weights"] == "random weights" and mt["frames"] == mt["render_frames"] == frames == tele.frames
    assert 0 < mt["redrawn"] <= frames and mt["avatar_built"] and mt["options"]["preset"] == "tiny"
    assert StoryTelemetry.read(out.with_suffix(".json")) == tele
    sync = av_sync(out, SPEC.fps)
    assert sync.in_sync and sync.has_audio and sum(1 for _ in iter_frames(out)) == frames
    # The avatar sub-cache beside the story's default output, one row per story frame.
    avatar = story_avatar_dir(storage, "synth", "short", "warp")
    boxes = np.load(avatar / "face_boxes.npy")
    assert len(boxes) == frames and (boxes[:, 0] >= 0).sum() == mt["redrawn"]
    assert AVATAR_SCHEMA.kind in (avatar / "metadata.json").read_text()
    # Against the backend's silent frames (encoded alone, for the codec's own error): the clip
    # changed in the lower faces, and outside the blend boxes no more than the codec changes it.
    kp = plan_story(inputs, SPEC).keypoints
    clip = types.SimpleNamespace(loop_id="story", keypoints=kp, fps=SPEC.fps, frames=len(kp))
    silent = list(backend.frames(clip, inputs.persona, kp, SPEC, visemes=None))
    with VideoEncoder(tmp_path / "silent.mp4", SPEC.width, SPEC.height, SPEC.fps, encoder=tele.encoder) as enc:
        for frame in silent:
            enc.write(frame)
    silent = np.stack(silent).astype(np.int16)
    diff = np.abs(np.stack(list(iter_frames(out))).astype(np.int16) - silent).max(axis=3)
    codec = np.abs(np.stack(list(iter_frames(tmp_path / "silent.mp4"))).astype(np.int16) - silent).max(axis=3)
    inside, lower = np.zeros(diff.shape, bool), np.zeros(diff.shape, bool)
    for t, ((x1, y1, x2, y2), (fx1, fy1, fx2, fy2)) in enumerate(zip(np.load(avatar / "blend_boxes.npy"), boxes)):
        if x1 >= 0:
            inside[t, max(y1, 0) : y2, max(x1, 0) : x2] = True
            lower[t, (fy1 + fy2) // 2 : fy2, fx1:fx2] = True
    assert diff[lower].mean() > 2 * codec[lower].mean()
    assert diff[~inside].mean() < 1.2 * codec[~inside].mean() + 0.5

    # The same lips again: current, not rendered. The backend's lips: another digest, rendered.
    again = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out, lips=tiny_opts, lips_components=tiny)
    assert again.outcome == "skipped" and again.input_digest == tele.input_digest
    plain = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out, lip_sync=False)
    assert plain.outcome == "rendered" and plain.input_digest != tele.input_digest
    assert plain.lips == "backend" and plain.musetalk is None and plain.lips_label == "backend"
    # A changed MuseTalk option is another digest too; the silent frames did not change, so the
    # avatar is read, not built again.
    batched = MuseTalkOptions(preset="tiny", device="cpu", batch_size=4)
    other = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out, lip_sync=False,
                         lips=batched, lips_components=tiny)  # fmt: skip
    assert other.outcome == "rendered" and other.input_digest not in (tele.input_digest, plain.input_digest)
    assert other.musetalk["avatar_built"] is False and other.musetalk["options"]["batch_size"] == 4


def test_a_bad_model_folder_is_one_error_and_leaves_nothing(storage, inputs, tmp_path):
    opts = MuseTalkOptions(preset="tiny", device="cpu", model_path=str(tmp_path / "no-musetalk"))
    out = tmp_path / "out" / "short.mp4"
    with pytest.raises(MuseTalkModelError, match="no-musetalk"):
        render_story(storage, inputs.story, get_backend("warp"), SPEC, inputs=inputs, out_path=out, lips=opts)
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_story_lips_parses_the_choice_and_options():
    assert story_lips("backend") is None and story_lips("backend", {}) is None
    assert story_lips("musetalk", {"preset": "tiny", "batch_size": 2}) == MuseTalkOptions(preset="tiny", batch_size=2)
    with pytest.raises(MuseTalkConfigError, match="lips 'lipstick': use backend or musetalk"):
        story_lips("lipstick")
    with pytest.raises(MuseTalkConfigError, match=r"unknown 'steps' \(use model_path, preset"):
        story_lips("musetalk", {"steps": 3})
    with pytest.raises(MuseTalkConfigError, match="need lips 'musetalk'"):
        story_lips("backend", {"preset": "tiny"})
    with pytest.raises(MuseTalkConfigError, match="batch_size"):
        story_lips("musetalk", {"batch_size": 0})
