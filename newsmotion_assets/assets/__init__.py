"""Assets by concern: guidance (Tier 1), persona (Tier 2), render, scorecard/benchmarks."""
