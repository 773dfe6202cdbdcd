"""newsmotion engine: pure library (no Dagster) for gesture-loop presenter clips.

Tier 1 (``guidance``): per-loop, persona-free motion, cached and memory-mapped.
Tier 2 (``persona``): per-portrait appearance, cached and memory-mapped.
Render (``render``): persona x loop through a backend, streamed to ``video`` encoding.
"""

__version__ = "0.1.0"
