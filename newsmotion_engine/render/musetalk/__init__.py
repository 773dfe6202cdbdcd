"""MuseTalk 1.5 as a lip-sync stage any backend's render can pass through (single-step latent
inpainting of the lower face at 256x256: an SD-style UNet conditioned on whisper-tiny audio
tokens, sd-vae-ft-mse).

- :mod:`.config`: the released configuration (facts) and :class:`MuseTalkOptions`;
- :mod:`.components`: the three models from a local folder in the official layout, or random weights;
- :mod:`.audio`: the speech as 50 audio tokens per video frame, as the official inference makes them;
- :mod:`.avatar`: the per-render sub-cache (face boxes, latents, blend masks), built once;
- :mod:`.stage`: the UNet + decode + paste per frame.

Example::

    comps = load_components(MuseTalkOptions(preset="tiny", device="cpu"))
    avatar = prepare_avatar(frames, faces, comps, opts)
    tokens = audio_tokens(whisper_hidden_states(samples, comps), seconds, 30, comps.inference)
    synced = list(lip_sync_frames(frames, avatar, tokens, comps))

Importing this package is cheap (no torch / diffusers until a function needs them).
"""

from __future__ import annotations

from newsmotion_engine.render.musetalk.config import PRESETS, RANDOM_WEIGHTS_LABEL, MuseTalkConfigError, MuseTalkOptions

__all__ = ["PRESETS", "RANDOM_WEIGHTS_LABEL", "MuseTalkConfigError", "MuseTalkOptions"]
