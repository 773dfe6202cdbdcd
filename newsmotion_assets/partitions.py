"""Partitions: loops and personas are dynamic, so they grow without code changes (sensors add
them); renders are the persona x loop grid."""

import dagster as dg

loop_partitions = dg.DynamicPartitionsDefinition(name="loop")
persona_partitions = dg.DynamicPartitionsDefinition(name="persona")
render_partitions = dg.MultiPartitionsDefinition({"persona": persona_partitions, "loop": loop_partitions})
