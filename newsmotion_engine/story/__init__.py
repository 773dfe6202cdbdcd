"""Stories: a YAML script (persona, speech, gesture cues) rendered as one continuous mp4 with sound.

- :mod:`.format`: the story file (the one module that reads and validates it)
- :mod:`.speech`: the sentences' speech caches laid out on the frame grid (one audio track, one
  viseme track)
- :mod:`.timeline`: gesture slots -> per-frame poses, loops chained with blended joins, and the
  join-smoothness measure
- :mod:`.render`: one pass through the backend with the visemes, the audio muxed as AAC, the A/V
  sync checked from the stream timestamps, the record (:mod:`.telemetry`)
"""
