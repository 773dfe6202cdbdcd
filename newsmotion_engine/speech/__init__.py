"""The speech tier: decoding and checking a speech file (``audio``) and the SimHash cache that lets
near-duplicate audio windows reuse stored audio-encoder output (``simhash``)."""
