"""The nightly benchmark: re-run the bench suites, then refresh the scorecard (02:00 UTC)."""

import dagster as dg

from newsmotion_assets.assets.reports import benchmarks, scorecard

# A benchmark run cut short (the machine rebooted at night) is redone once, not twice as other runs:
# its figures are only worth having from a quiet machine, and the next night runs it anyway.
benchmark_job = dg.define_asset_job(
    "benchmark_job",
    selection=dg.AssetSelection.assets(benchmarks, scorecard),
    tags={"dagster/max_retries": "1"},
)

nightly_benchmark = dg.ScheduleDefinition(
    name="nightly_benchmark",
    job=benchmark_job,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
