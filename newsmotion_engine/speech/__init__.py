"""The speech tier: decoding and checking a speech file (``audio``), offline text-to-speech with
phoneme timings (``tts``, through ``espeak``), mouth-shape tracks per video frame (``visemes``),
the SimHash cache that lets near-duplicate audio windows reuse stored audio-encoder output
(``simhash``), and the wav2vec2 features audio-driven backends read, behind that cache
(``features``)."""
