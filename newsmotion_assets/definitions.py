"""The Dagster code location (``dagster dev -w workspace.yaml``): assets, checks, sensors,
schedules and resources, each defined in its own module."""

import dagster as dg

from newsmotion_assets import assets, checks, schedules, sensors
from newsmotion_assets.resources import RendererResource, StorageResource

defs = dg.Definitions(
    assets=dg.load_assets_from_package_module(assets),
    asset_checks=dg.load_asset_checks_from_modules([checks]),
    jobs=[schedules.benchmark_job],
    schedules=[schedules.nightly_benchmark],
    sensors=[sensors.loop_sensor, sensors.persona_inbox_sensor, sensors.speech_inbox_sensor, sensors.story_sensor,
             sensors.render_automation_sensor],
    resources={"renderer": RendererResource(), "storage": StorageResource()},
    # Runs hold one render (or one cache) each, so a second process per step would only add start-up
    # time; a killed run worker is retried as a whole run (storage/dagster_home/dagster.yaml).
    executor=dg.in_process_executor,
)
