"""newsmotion's Dagster layer: thin assets, resources, partitions, sensors and schedules over
:mod:`newsmotion_engine` (which never imports Dagster). ``definitions.py`` wires it together."""
