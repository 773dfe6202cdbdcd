"""The nightly benchmark: re-run the bench suites, then refresh the scorecard (02:00 UTC)."""

import dagster as dg

from newsmotion_assets.assets.reports import benchmarks, scorecard

benchmark_job = dg.define_asset_job("benchmark_job", selection=dg.AssetSelection.assets(benchmarks, scorecard))

nightly_benchmark = dg.ScheduleDefinition(
    name="nightly_benchmark",
    job=benchmark_job,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
