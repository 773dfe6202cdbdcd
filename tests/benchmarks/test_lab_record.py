"""The stock-vs-ours headline of the zoo benches (``benchmarks/lab_record.stock_vs_ours``)."""

from benchmarks.lab_record import stock_vs_ours


def test_the_headline_is_the_fastest_exact_variant():
    """An approximation (TeaCache) faster than every exact variant never becomes the headline, and
    a variant that did not finish (no seconds) is left out."""
    rows = {"stock": {"end_to_end_s": 100.0}, "batch_cfg": {"end_to_end_s": 80.0},
            "batch_cfg+teacache": {"end_to_end_s": 40.0, "approximate": True}, "fp8": {"error": "OutOfMemoryError"}}
    result: dict = {}
    stock_vs_ours(result, "768x768", rows)
    assert result == {"clip_768x768_s_stock": 100.0, "clip_768x768_s": 80.0, "fastest_768x768": "batch_cfg", "speedup_768x768": 1.25,
                      # the approximation is reported beside the headline, under its own names
                      "clip_768x768_s_approximate": 40.0, "fastest_768x768_approximate": "batch_cfg+teacache",
                      "speedup_768x768_approximate": 2.5}


def test_only_approximations_give_no_ours_figure():
    result: dict = {}
    stock_vs_ours(result, "k", {"stock": {"end_to_end_s": 100.0}, "teacache": {"end_to_end_s": 50.0, "approximate": True}})
    assert result == {"clip_k_s_stock": 100.0, "clip_k_s_approximate": 50.0, "fastest_k_approximate": "teacache",
                      "speedup_k_approximate": 2.0}
