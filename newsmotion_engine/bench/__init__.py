"""Benchmarks: each returns a JSON-able dict of measured figures; the CLI writes them under bench/results/."""
