"""Video output: streaming h264 encoding (NVENC when a probe succeeds, else libx264) and a probe."""

from newsmotion_engine.video.encode import EncoderError, VideoEncoder, ffmpeg_exe, nvenc_available, probe_video

__all__ = ["EncoderError", "VideoEncoder", "ffmpeg_exe", "nvenc_available", "probe_video"]
