"""The GPU lab harness: benchmarks of the diffusion backends against stock diffusers, kernel and
attention studies. Not installed with the engine; run from the repository root as
``python -m benchmarks.<module>`` (on a GPU machine: ``bash benchmarks/device_gpu.sh``). Results
are :class:`~newsmotion_engine.bench.record.BenchResult` records."""
