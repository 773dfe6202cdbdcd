"""When Dagster materializes the derived assets on its own (declarative automation).

The caches (``guidance_cache``, ``persona_cache``) are requested by the folder sensors; everything
derived from them (the backend sub-caches, then the renders) follows by automation, but only from
upstream data that passed its blocking checks: a portrait whose ``persona_cache_valid`` failed
must not be rendered eight times. A render whose run failed for a reason trying again can fix is
requested again (:func:`retryable_failure`); bad input never is.
"""

from collections.abc import Sequence

import dagster as dg

from newsmotion_assets.retries import FAILURE_TAG, MAX_FAILED_RUNS


def eager_after_valid_upstream(
    updates_from: Sequence[dg.AssetsDefinition] | None = None, *, retry_failures: bool = False
) -> dg.AutomationCondition:
    """``eager()`` (run when an upstream updated or a partition is newly missing, never while an
    upstream is missing or in progress), and only when every blocking check of every upstream
    asset passed on its latest materialization (or runs in the same request).

    Plain ``eager()`` ignores checks: a blocking check stops the downstream steps of its own run,
    but the failed upstream materialization still counts as an update on the next tick.

    ``updates_from`` narrows which upstream updates trigger a run (default: any). ``render`` names
    the backend caches: they follow the base caches, so a changed persona re-renders once its
    backend cache is rebuilt rather than racing it in two runs (assets with different partitions
    cannot share a run). Missing, in-progress and checks still count for every upstream.

    ``retry_failures`` also requests partitions whose latest run failed for a reason trying again
    can fix (:func:`retryable_failure`), under the same upstream checks.
    """
    condition = dg.AutomationCondition.eager()
    if updates_from is not None:
        condition = condition.replace(
            "any_deps_updated",
            dg.AutomationCondition.any_deps_updated().allow(dg.AssetSelection.assets(*updates_from)),
        )
    if retry_failures:
        condition = condition | retryable_failure()
    return (condition & dg.AutomationCondition.all_deps_blocking_checks_passed()).with_label(
        "eager_after_valid_upstream"
    )


class RetryableFailureCondition(dg.AutomationCondition[dg.AssetKey]):
    """True for a partition whose latest run failed for a reason other than bad input, when no run
    retry is pending for it, and it has failed fewer than ``max_failed_runs`` runs since it last
    materialized (so a render that crashes every time is given up, not requested forever).

    Runs hold one render partition each (the render asset's backfill policy), so the partition's
    runs are those tagged with its key: ``dagster/partition`` (a run launched for one partition) or
    a partition range that starts and ends at it (a backfill's run). Evaluated in the code server
    (the automation sensor sets ``use_user_code_server``): it is plain Python over the instance.
    """

    def __init__(self, max_failed_runs: int):
        self.max_failed_runs = max_failed_runs

    @property
    def name(self) -> str:
        return "retryable_failure"

    @property
    def description(self) -> str:
        return f"latest run failed (not bad input, no run retry pending), fewer than {self.max_failed_runs} failed runs"

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        subset = context.candidate_subset
        if not subset.is_partitioned:
            return dg.AutomationResult(context, context.get_empty_subset())
        instance = context.asset_graph_view.instance
        keys = {pk for pk in subset.expensively_compute_partition_keys() if self._retryable(instance, context.key, pk)}
        return dg.AutomationResult(context, subset.compute_intersection_with_partition_keys(keys))

    def _retryable(self, instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> bool:
        by_id = {}
        for tags in (
            {"dagster/partition": partition},
            {"dagster/asset_partition_range_start": partition, "dagster/asset_partition_range_end": partition},
        ):
            for record in instance.get_run_records(filters=dg.RunsFilter(tags=tags), limit=50):
                if record.dagster_run.asset_selection is None or key in record.dagster_run.asset_selection:
                    by_id[record.dagster_run.run_id] = record
        records = sorted(by_id.values(), key=lambda r: r.create_timestamp, reverse=True)
        runs = [r.dagster_run for r in records]  # newest first
        if not runs or runs[0].status != dg.DagsterRunStatus.FAILURE:
            return False
        latest = runs[0]
        if latest.tags.get(FAILURE_TAG) == "bad_input" or latest.tags.get("dagster/will_retry") == "true":
            return False
        failed = 0
        for run in runs:
            if run.status == dg.DagsterRunStatus.SUCCESS:
                break
            failed += run.status == dg.DagsterRunStatus.FAILURE
        return failed < self.max_failed_runs


def retryable_failure(max_failed_runs: int = MAX_FAILED_RUNS) -> dg.AutomationCondition:
    """Request a partition again after a failure that trying again can fix (an interrupted or
    killed run whose run retries ran out or could not start), never after bad input; upstream
    must be present and nothing of it in progress, as for ``eager()``."""
    return (
        dg.AutomationCondition.execution_failed()
        & RetryableFailureCondition(max_failed_runs)
        & ~dg.AutomationCondition.in_progress()
        & ~dg.AutomationCondition.any_deps_missing()
        & ~dg.AutomationCondition.any_deps_in_progress()
    ).with_label("retryable_failure")
