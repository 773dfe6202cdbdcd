"""Engine errors cross a process boundary (the Dagster Pipes entry point) as the same class and line."""

from pathlib import Path

from newsmotion_engine.errors import BadInputError, CacheNotReadyError, NewsmotionError, error_from_record, error_record
from newsmotion_engine.render.telemetry import TelemetryError


def test_user_errors_round_trip_as_their_class():
    for exc in (
        BadInputError("/in/anna.jpg", "cannot decode the image"),
        CacheNotReadyError("guidance cache for loop 'nod'", "missing", "", "materialize guidance_cache[nod]"),
        TelemetryError("/r/warp.json", "telemetry is not valid JSON"),
        NewsmotionError("loop 'x' already exists"),
    ):
        back = error_from_record(error_record(exc))
        assert type(back) is type(exc) and str(back) == str(exc)
    back = error_from_record(error_record(BadInputError("/in/anna.jpg", "cannot decode")))
    assert back.path == Path("/in/anna.jpg") and back.problem == "cannot decode"


def test_unknown_subclass_becomes_its_nearest_known_base_and_bugs_are_none():
    record = error_record(TelemetryError("/r/warp.json", "bad"))
    record["kind"] = "SomethingOnlyTheOtherSideKnows"
    assert type(error_from_record(record)) is BadInputError
    assert error_from_record(error_record(ValueError("boom\nsecond line"))) is None
    assert error_record(ValueError("boom\nsecond line"))["message"] == "boom"
