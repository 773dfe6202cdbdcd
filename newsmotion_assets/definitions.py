"""The Dagster code location (``dagster dev -w workspace.yaml``): assets, checks, sensors,
schedules and the renderer resource, each defined in its own module."""

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache, guidance_cache_valid
from newsmotion_assets.assets.persona import persona_cache, persona_cache_valid
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import benchmarks, scorecard
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_assets.schedules import benchmark_job, nightly_benchmark
from newsmotion_assets.sensors import loop_sensor, persona_inbox_sensor, render_automation_sensor

defs = dg.Definitions(
    assets=[guidance_cache, persona_cache, render, benchmarks, scorecard],
    asset_checks=[guidance_cache_valid, persona_cache_valid],
    jobs=[benchmark_job],
    schedules=[nightly_benchmark],
    sensors=[loop_sensor, persona_inbox_sensor, render_automation_sensor],
    resources={"renderer": RendererResource(), "storage": StorageResource()},
)
