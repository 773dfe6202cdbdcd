"""The product benchmarks: each returns a JSON-able dict of measured figures, written as a result
record (:mod:`newsmotion_engine.bench.record`) under benchmarks/results/."""
