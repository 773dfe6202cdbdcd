"""The story asset and the story sensor."""

import dagster as dg

from newsmotion_assets.assets.story import story
from newsmotion_assets.partitions import persona_partitions, story_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_assets.sensors import story_sensor
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


def test_the_story_asset_renders_the_story_with_sound(storage, upstream_caches):
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
        assert av_sync(out, 30).in_sync


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
