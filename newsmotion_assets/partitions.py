"""Partitions: loops, personas and speeches are dynamic, so they grow without code changes (sensors add
them); renders are the persona x loop grid."""

import dagster as dg

loop_partitions = dg.DynamicPartitionsDefinition(name="loop")
persona_partitions = dg.DynamicPartitionsDefinition(name="persona")
speech_partitions = dg.DynamicPartitionsDefinition(name="speech")
render_partitions = dg.MultiPartitionsDefinition({"persona": persona_partitions, "loop": loop_partitions})
# Story files in storage/stories/ (the story sensor adds them); a story render is persona x story.
story_partitions = dg.DynamicPartitionsDefinition(name="story")
story_render_partitions = dg.MultiPartitionsDefinition({"persona": persona_partitions, "story": story_partitions})
