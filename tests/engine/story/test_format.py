"""The story file: a good one parses; each bad input is one StoryError naming the file and field."""

from pathlib import Path

import pytest

from newsmotion_engine.story.format import IDLE_REST, StoryError, load_story

GOOD = """\
persona: astronaut
speech:
  - id: intro
    text: "Good evening,   here is the news."
  - text: Tonight, the council approved the bridge.
    voice: en-gb
    words_per_minute: 150
  - audio: clip.wav
  - id: signoff
gestures:
  - {loop: welcome, sentence: 1}
  - {loop: left_gesture, at: 3.5, for: 2, fit: once}
blend: 1.0
"""


def write(tmp_path: Path, text: str, name: str = "evening.yaml") -> Path:
    (tmp_path / "clip.wav").write_bytes(b"RIFF")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_story_parses_with_defaults(tmp_path):
    story = load_story(write(tmp_path, GOOD))
    assert story.story_id == "evening" and story.persona_id == "astronaut" and story.idle == IDLE_REST
    intro, second, clip, signoff = story.sentences
    assert (intro.speech_id, intro.source, intro.text) == ("intro", "text", "Good evening, here is the news.")
    assert (second.speech_id, second.voice, second.words_per_minute) == ("evening-2", "en-gb", 150)
    assert clip.source == "audio" and clip.audio == tmp_path / "clip.wav"
    assert signoff.source == "id" and signoff.text is None
    welcome, left = story.gestures
    assert (welcome.loop_id, welcome.sentence, welcome.fit) == ("welcome", 1, "loop")
    assert (left.at, left.seconds, left.fit, left.field) == (3.5, 2.0, "once", "gestures[1]")
    assert story.blend == 1.0 and story.pause == 0.4


BAD = [
    ("persona: [", "not valid YAML at line"),
    ("", "this one is empty"),
    ("- a\n- b\n", "this one is list"),
    ("persona: a\nspeech: [hi]\ncolour: red\n", "colour: unknown key"),
    ("speech: [hi]\n", "persona: missing"),
    ("persona: Not An Id\nspeech: [hi]\n", "persona: "),
    ("persona: a\n", "speech: give a list"),
    ("persona: a\nspeech: []\n", "speech: give a list"),
    ("persona: a\nspeech: [{text: hi, audio: clip.wav}]\n", "speech[0]: give text or audio, not both"),
    ("persona: a\nspeech: [{voice: en-us}]\n", "speech[0]: give text, audio or the id"),
    ("persona: a\nspeech: [{text: '  '}]\n", "speech[0].text: empty"),
    ("persona: a\nspeech: [{audio: nowhere.wav}]\n", "speech[0].audio: "),
    ("persona: a\nspeech: [{text: hi, words_per_minute: 9000}]\n", "speech[0].words_per_minute: 9000 is out of range"),
    ("persona: a\nspeech: [{id: x, voice: en-us}]\n", "speech[0].voice: only for a sentence given as text"),
    ("persona: a\nspeech: [hi]\ngestures: {loop: nod}\n", "gestures: give a list"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod}]\n", "gestures[0]: give sentence (1-based) or at"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, sentence: 1, at: 2}]\n", "gestures[0]: give sentence (1-based) or at"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, sentence: 2}]\n", "gestures[0].sentence: 2 is past the last sentence"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, sentence: 0}]\n", "gestures[0].sentence: 0 is not a sentence number"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, at: -1}]\n", "gestures[0].at: -1 is out of range"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, at: 1, for: 0}]\n", "gestures[0].for: 0 is out of range"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, sentence: 1, for: 2}]\n", "gestures[0].for: a sentence cue lasts"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: nod, at: 1, fit: stretch}]\n", "gestures[0].fit: 'stretch' is not one of"),
    ("persona: a\nspeech: [hi]\ngestures: [{loop: Bad Loop, at: 1}]\n", "gestures[0].loop: "),
    ("persona: a\nspeech: [hi]\npause: lots\n", "pause: 'lots' is not a number of seconds"),
    ("persona: a\nspeech: [hi]\nversion: 2\n", "version: 2 is not a story format"),
]


@pytest.mark.parametrize("text, expected", BAD, ids=[expected for _, expected in BAD])
def test_each_bad_story_is_one_error_naming_the_file_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(StoryError) as info:
        load_story(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message, message
    assert "\n" not in message


def test_bad_files(tmp_path):
    with pytest.raises(StoryError, match="story file not found"):
        load_story(tmp_path / "missing.yaml")
    with pytest.raises(StoryError, match="name it .yaml"):
        load_story(write(tmp_path, GOOD, "story.txt"))
    with pytest.raises(StoryError, match="the file name is the story id"):
        load_story(write(tmp_path, GOOD, "Evening News.yaml"))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(StoryError, match="not a text file"):
        load_story(binary)


def test_the_sample_story_is_valid():
    from newsmotion_engine.samples import SAMPLE_STORY

    story = load_story(SAMPLE_STORY)
    assert story.persona_id == "astronaut" and len(story.gestures) == 2
    assert story.sentences[0].speech_id == "intro" and story.sentences[0].text == "Good evening, here is the news."
    assert len(story.sentences[1].text.split()) > len(story.sentences[0].text.split())
