"""Facts about a clip that both the video layer and the renderers use. They live here, below
``render/``, so that ``video/`` never imports ``render/`` (which imports ``video/``)."""

# Broadcast chroma green, #00B140.
BACKGROUND_CHROMA_GREEN: tuple[int, int, int] = (0, 177, 64)

# Sparse keyframes (RenderSpec.keyframes): the highest ratio the infill stage takes.
MAX_KEYFRAME_RATIO = 8

__all__ = ["BACKGROUND_CHROMA_GREEN", "MAX_KEYFRAME_RATIO"]
