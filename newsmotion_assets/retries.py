"""Which failures are tried again, and how.

Three layers, each for one kind of failure:

- **Step retries** (:data:`TRANSIENT_RETRY` on the cache and render assets): an exception that may
  not happen again (ffmpeg killed, an I/O error, a bug that depends on timing) re-runs the step in
  the same run, twice at most, after 2 s then 4 s.
- **Run retries** (``run_retries`` in ``storage/dagster_home/dagster.yaml``, read by the daemon): a
  run whose worker died (killed, out of memory, ``dagster dev`` stopped) is re-executed from its
  failure, twice at most. Step failures are not re-run this way
  (``retry_on_asset_or_op_failure: false``): the step retries above have had their chance.
- **Automation** (:func:`newsmotion_assets.automation.retryable_failure`): a render partition whose
  latest run failed and that no run retry is pending for is requested again, until it has failed
  :data:`MAX_FAILED_RUNS` runs since it last materialized.

Bad input is never tried again: :func:`bad_input` turns a :class:`NewsmotionError` (a file or id a
person must fix, a cache to materialize first) into a ``dg.Failure`` with ``allow_retries=False``
and tags the run :data:`FAILURE_TAG` = ``bad_input``, which the automation condition reads.
"""

import dagster as dg

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.storage import Storage
from newsmotion_engine.sweep import sweep_stale_temp
from newsmotion_engine.video.encode import EncoderError

TRANSIENT_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL)
# A run tag naming why the run failed for good ("bad_input"): shown in the UI, read by automation.
FAILURE_TAG = "newsmotion/failure"
MAX_FAILED_RUNS = 3


def is_bad_input(exc: BaseException) -> bool:
    """Whether ``exc`` is something a person must fix (trying again gives the same error). An
    encoder failure is not: ffmpeg killed from outside is the typical cause."""
    return isinstance(exc, NewsmotionError) and not isinstance(exc, EncoderError)


def bad_input(context: dg.AssetExecutionContext, exc: NewsmotionError, **metadata) -> dg.Failure:
    """The ``dg.Failure`` to raise for bad input: the one-line message, never retried (neither the
    step nor the run nor by automation)."""
    context.instance.add_run_tags(context.run_id, {FAILURE_TAG: "bad_input"})
    return dg.Failure(description=str(exc), metadata={"error_class": type(exc).__name__, **metadata}, allow_retries=False)


def sweep_temp_files(context: dg.AssetExecutionContext, store: Storage) -> int:
    """Remove stale temporary files under the storage root (a killed run's half-written mp4 or
    cache folder) with a log line each; returns how many were removed."""
    report = sweep_stale_temp(store.root)
    for entry in report.removed:
        context.log.warning(f"removed stale temporary {entry.kind} {entry.path} ({entry.bytes} bytes; {entry.why})")
    return len(report.removed)
