"""The story asset and the story sensor."""

import dagster as dg
import pytest

from newsmotion_assets.assets.story import story
from newsmotion_assets.partitions import persona_partitions, story_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_assets.sensors import story_sensor
from newsmotion_engine.render.musetalk.config import MuseTalkConfigError
from newsmotion_engine.story.telemetry import StoryTelemetry
from newsmotion_engine.video.streams import av_sync

STORY = """\
persona: anchor
speech:
  - {id: intro, text: "Good evening, here is the news."}
gestures:
  - {loop: nod, sentence: 1}
"""


def _tick(instance, cursor=None):
    return story_sensor(dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": StorageResource()}))


def test_the_sensor_adds_stories_and_requests_them_once_settled(storage):
    storage.stories_dir.mkdir(parents=True)
    (storage.stories_dir / "evening.yaml").write_text(STORY)
    (storage.stories_dir / "broken.yaml").write_text("persona: anchor\nspeech: []\n")
    (storage.stories_dir / "Bad Name.yaml").write_text(STORY)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        first = _tick(instance)
        assert first.run_requests == [] and not first.dynamic_partitions_requests  # still being copied, maybe
        second = _tick(instance, first.cursor)
        (add,) = second.dynamic_partitions_requests
        assert list(add.partition_keys) == ["evening"]  # the broken file and the bad name are skipped
        (request,) = second.run_requests
        assert request.partition_key == dg.MultiPartitionKey({"persona": "anchor", "story": "evening"})
        instance.add_dynamic_partitions(story_partitions.name, ["evening"])
        assert _tick(instance, second.cursor).run_requests == []  # nothing changed


def test_the_story_asset_renders_the_story_with_sound_and_the_renderers_lips(storage, upstream_caches, one_torch_thread):
    storage.stories_dir.mkdir(parents=True)
    (storage.stories_dir / "evening.yaml").write_text(STORY)
    key = dg.MultiPartitionKey({"persona": "anchor", "story": "evening"})
    resources = {"storage": StorageResource(), "renderer": RendererResource(width=90, height=160)}
    with dg.instance_for_test() as instance:
        upstream_caches(instance)
        instance.add_dynamic_partitions(story_partitions.name, ["evening"])
        try:
            result = dg.materialize([story], partition_key=key, instance=instance, resources=resources)
        finally:
            release_warm_backends()
        assert result.success
        (mat,) = result.asset_materializations_for_node("story")
        out = storage.story_render_path("anchor", "evening", "warp")
        assert mat.metadata["path"].value == str(out) and mat.metadata["in_sync"].value is True
        tele = StoryTelemetry.read(out.with_suffix(".json"))
        assert [p["loop_id"] for p in tele.parts] == ["rest", "nod", "rest"] and tele.speech[0]["speech_id"] == "intro"
        assert av_sync(out, 30).in_sync and mat.metadata["lips"].value == "backend" and tele.lips == "backend"

        # The renderer's lips: MuseTalk's (tiny, random weights) over a short story.
        (storage.stories_dir / "short.yaml").write_text(SHORT_STORY)
        instance.add_dynamic_partitions(story_partitions.name, ["short"])
        short = dg.MultiPartitionKey({"persona": "anchor", "story": "short"})
        musetalk = RendererResource(width=90, height=160, fidelity=False, lips="musetalk",
                                    lips_options={"preset": "tiny", "device": "cpu"})  # fmt: skip
        try:
            result = dg.materialize([story], partition_key=short, instance=instance,
                                    resources={"storage": StorageResource(), "renderer": musetalk})  # fmt: skip
        finally:
            release_warm_backends()
        (mat,) = result.asset_materializations_for_node("story")
        assert mat.metadata["lips"].value == "musetalk (random weights)"
        tele = StoryTelemetry.read(storage.story_render_path("anchor", "short", "warp").with_suffix(".json"))
        assert tele.lips == "musetalk" and tele.musetalk["redrawn"] > 0 and tele.musetalk["options"]["preset"] == "tiny"
        assert mat.metadata["input_digest"].value == tele.input_digest


def test_a_story_for_an_unknown_persona_fails_as_bad_input(storage):
    storage.stories_dir.mkdir(parents=True)
    (storage.stories_dir / "evening.yaml").write_text(STORY.replace("anchor", "nobody"))
    key = dg.MultiPartitionKey({"persona": "nobody", "story": "evening"})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["nobody"])
        instance.add_dynamic_partitions(story_partitions.name, ["evening"])
        result = dg.materialize([story], partition_key=key, instance=instance, raise_on_error=False,
                                resources={"storage": StorageResource(), "renderer": RendererResource(width=90, height=160)})
        assert not result.success
        (failure,) = result.get_step_failure_events()
        assert "persona: unknown persona 'nobody'" in failure.event_specific_data.error.message



SHORT_STORY = """\
persona: anchor
speech: [{id: hi, text: "Hi."}]
gestures: [{loop: nod, sentence: 1}]
lead_in: 0.1
tail: 0.1
"""


def test_a_bad_lips_option_fails_the_run_before_anything_renders(storage):
    storage.stories_dir.mkdir(parents=True)
    (storage.stories_dir / "short.yaml").write_text(SHORT_STORY)
    key = dg.MultiPartitionKey({"persona": "anchor", "story": "short"})
    renderer = RendererResource(width=90, height=160, lips="musetalk", lips_options={"steps": 3})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        instance.add_dynamic_partitions(story_partitions.name, ["short"])
        with pytest.raises(dg.DagsterResourceFunctionError) as failure:
            dg.materialize([story], partition_key=key, instance=instance,
                           resources={"storage": StorageResource(), "renderer": renderer})  # fmt: skip
    assert isinstance(failure.value.__cause__, MuseTalkConfigError)
    assert str(failure.value.__cause__).startswith("musetalk options: unknown 'steps' (use model_path")
    assert not list(storage.root.rglob("*.mp4"))
