"""When Dagster materializes the derived assets on its own (declarative automation).

The caches (``guidance_cache``, ``persona_cache``) are requested by the folder sensors; everything
derived from them (the backend sub-caches, then the renders) follows by automation, but only from
upstream data that passed its blocking checks: a portrait whose ``persona_cache_valid`` failed
must not be rendered eight times.
"""

from collections.abc import Sequence

import dagster as dg


def eager_after_valid_upstream(updates_from: Sequence[dg.AssetsDefinition] | None = None) -> dg.AutomationCondition:
    """``eager()`` (run when an upstream updated or a partition is newly missing, never while an
    upstream is missing or in progress), and only when every blocking check of every upstream
    asset passed on its latest materialization (or runs in the same request).

    Plain ``eager()`` ignores checks: a blocking check stops the downstream steps of its own run,
    but the failed upstream materialization still counts as an update on the next tick.

    ``updates_from`` narrows which upstream updates trigger a run (default: any). ``render`` names
    the backend caches: they follow the base caches, so a changed persona re-renders once its
    backend cache is rebuilt rather than racing it in two runs (assets with different partitions
    cannot share a run). Missing, in-progress and checks still count for every upstream.
    """
    condition = dg.AutomationCondition.eager()
    if updates_from is not None:
        condition = condition.replace(
            "any_deps_updated",
            dg.AutomationCondition.any_deps_updated().allow(dg.AssetSelection.assets(*updates_from)),
        )
    return (condition & dg.AutomationCondition.all_deps_blocking_checks_passed()).with_label(
        "eager_after_valid_upstream"
    )
