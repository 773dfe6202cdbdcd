"""What the Wan backends share (no backend itself; it imports none of them).

- :mod:`.diffusers_config` / :mod:`.diffusers_backend`: the options base class and the backend base
  class over diffusers components (cache tiers, load, accelerations, OOM hints);
- :mod:`.components`: loading the transformer, VAE, CLIP and UMT5 from a folder or a preset;
- :mod:`.segments`: how a clip splits into inference segments;
- :mod:`.encoders`: the VAE / UMT5 / CLIP encodings the caches hold;
- :mod:`.artifacts`: the sub-cache format both backends write, the reference frame, the parent digest;
- :mod:`.continuation`: a segment's continuation from the previous segment's decoded tail;
- :mod:`.prompts`: the released prompts and the ``"loop"`` prompt;
- :mod:`.lora`, :mod:`.model_check`, :mod:`.released`: LoRA fusing, ``newsmotion model check``, the
  released checkpoints' configs.
"""
