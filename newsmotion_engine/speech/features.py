"""Audio-encoder features for audio-driven renderers: the wav2vec2 encoder, the windowed recipe
(hidden states at 50 Hz over fixed windows, resampled to the video frame rate, behind the SimHash
encoder bypass) and the features sub-cache, keyed on the recipe.

Two recipes (:func:`feature_recipe`): ``official`` (:mod:`~newsmotion_engine.speech.clip_features`,
the default: EchoMimicV3's own computation, the whole clip at once) and ``windowed``
(:class:`WindowedRecipe`, below: an approximation of it whose windows the bypass can reuse).

What the audio-driven models feed (EchoMimicV3's ``get_audio_embed`` and its frame windowing,
read from its public inference code): ``Wav2Vec2Model`` over 16 kHz audio normalised to zero
mean and unit variance (``Wav2Vec2FeatureExtractor``), ``hidden_states[1:]`` (the outputs of the
12 transformer layers, not the pre-transformer projection), one row per video frame, and for video
frame ``i`` the rows ``i-2 .. i+2`` with indices clamped at the ends: ``[frames, 5, 12, 768]``.
Here the 12 layers are averaged by default (``layers="mean"``; ``"last"`` or a layer number pick
one), so a row is 768 wide: ``[frames, 2*context+1, 768]``; ``layers="all"`` keeps them as
EchoMimicV3 reads them: ``[frames, 2*context+1, 12, 768]``. EchoMimicV3 resamples the conv
front end's 50 Hz features to the video rate *before* the transformer (the official recipe does
too); the windowed recipe runs the transformer at its native 50 Hz and resamples its output
(linearly, at each video frame's centre time), so a stored encoder output does not depend on the
video frame rate and one encoder cache serves every fps. It also normalises each window on its own
(floored, see :meth:`AudioEncoder.encode`) where the official recipe sets the whole clip's loudness
and normalises the variance only when the encoder's preprocessor config asks for it.

**Encoder windows (the bypass's unit).** The encoder runs on fixed windows of
``core_frames + 2 * margin_frames`` encoder frames (default 16 + 2 x 8 = 32 frames, 0.645 s) and
keeps only the ``core_frames`` in the middle (0.32 s); consecutive cores tile the audio. Each
window is encoded on its own, so its output is a function of its own samples only: a window whose
audio equals one encoded before (in this speech or another) has exactly the stored output, and a
near-duplicate one approximately. The margins give every kept frame at least 0.16 s of context on
both sides (the frames at a window's edge see less of the audio and are thrown away), at the cost
of encoding each sample twice. The windows restart at each speech onset after a pause (found to
the sample, :func:`window_anchors`), so a repeated phrase after a pause — a sign-off — lines up
with its earlier windows instead of falling on an arbitrary phase of a fixed grid.

**The bypass** (``cache``: an :class:`~newsmotion_engine.speech.simhash.EncoderCache` opened with
:func:`open_encoder_cache`): per window, a SimHash of its log-mel frames; a stored output within
``max_distance`` bits is reused instead of running the encoder. ``stats`` of the result report the
windows, hits, hit rate, the encoder seconds avoided and the net seconds saved (less the hashing
and lookup time), and with ``verify=True`` the cosine distance of each reused output to a freshly
computed one. With random weights that distance measures how well the hash finds windows the
encoder maps to the same output, not lip quality.

**The features sub-cache** (:func:`ensure_features`):
``<speech cache>/audio-features-<recipe>-<fps>fps/`` holds ``features.npy``
(``[frames, 2*context+1, hidden]`` float32, or ``[..., layers, hidden]``) and ``metadata.json``
(the speech cache's digest as its source, the encoder's identity, the context and the recipe's
params — its name and version, the window or the loudness target — as params, the run's stats),
written atomically through :mod:`newsmotion_engine.cachedir`; one folder per recipe, so both
recipes' features can be kept; another speech cache, encoder or recipe setting makes it stale
and it is rebuilt. Audio that is no speech cache (a story's assembled speech, handed to a backend
as a :class:`~newsmotion_engine.speech.audio.SpeechTrack`) gets the same sub-cache keyed on its
samples' digest, ``<speech root>/clips/<digest>/audio-features-<recipe>-<fps>fps/``
(:func:`ensure_clip_features`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from newsmotion_engine.cachedir import ArraySpec, CacheSchema, ensure, read_cache, sha256_json, write_cache
from newsmotion_engine.errors import BadInputError, CacheStaleError
from newsmotion_engine.speech.audio import DEFAULT_TARGET_DBFS, SPEECH_SAMPLE_RATE
from newsmotion_engine.speech.sources import CacheRoot
from newsmotion_engine.storage import SPEECH_CLIPS
from newsmotion_engine.speech.simhash import EncoderCache, SimHasher, hamming, log_mel
from newsmotion_engine.speech.visemes import frame_count

__all__ = [
    "AudioEncoder",
    "AudioFeatures",
    "EncoderWindow",
    "DEFAULT_MAX_DISTANCE",
    "FeatureRecipe",
    "WindowedRecipe",
    "clip_features_dir",
    "cosine_distance",
    "encode_for_video",
    "ensure_clip_features",
    "ensure_features",
    "feature_recipe",
    "features_dir",
    "load_features",
    "open_encoder_cache",
    "speech_samples",
    "window_anchors",
    "with_context",
]

RANDOM_WEIGHTS_LABEL = "random weights"
RANDOM_SEED = 0
HOP_SAMPLES = 320  # the conv front end's stride: 20 ms, 50 Hz
RECEPTIVE_SAMPLES = 400  # one encoder frame sees 25 ms
N_MELS = 80
HASH_SEED = 0
HASH_BITS = 64
# Hamming threshold of the bypass, read off the threshold sweep of benchmarks/simhash.py
# (benchmarks/results/simhash_cpu.json, "chosen_max_distance"; docs/speech.md explains the rule).
DEFAULT_MAX_DISTANCE = 2
# The speech onsets the windows restart at: a pause is at least this long and this quiet.
ONSET_PAUSE_S = 0.15
ONSET_LEVEL_DBFS = -45.0
_ENERGY_FRAME = 160  # 10 ms at 16 kHz
# The RMS that load_speech normalises active speech to (-20 dBFS): the least a window is divided by.
REFERENCE_STD = 10.0 ** (DEFAULT_TARGET_DBFS / 20.0)


@dataclass(frozen=True)
class EncoderWindow:
    """The encoder's unit of work: ``core_frames`` kept frames between two margins of
    ``margin_frames`` (50 Hz encoder frames). Consecutive cores tile the audio."""

    core_frames: int = 16
    margin_frames: int = 8

    def __post_init__(self) -> None:
        if self.core_frames < 1 or self.margin_frames < 0:
            raise ValueError(f"core_frames must be >= 1 and margin_frames >= 0, got {self.core_frames}, {self.margin_frames}")

    @property
    def frames(self) -> int:
        return self.core_frames + 2 * self.margin_frames

    @property
    def samples(self) -> int:
        """Samples in a window: exactly ``frames`` encoder frames (and log-mel frames) fit."""
        return HOP_SAMPLES * (self.frames - 1) + RECEPTIVE_SAMPLES

    @property
    def core_samples(self) -> int:
        return HOP_SAMPLES * self.core_frames

    def lead_samples(self) -> int:
        """Samples from a window's first sample to its core's start; chosen so that core frame
        ``j`` is centred at ``core_start + HOP * j + HOP / 2``."""
        return HOP_SAMPLES * self.margin_frames + (RECEPTIVE_SAMPLES - HOP_SAMPLES) // 2

    @property
    def params(self) -> dict[str, int]:
        return {"core_frames": self.core_frames, "margin_frames": self.margin_frames, "hop_samples": HOP_SAMPLES,
                "window_samples": self.samples}  # fmt: skip


DEFAULT_WINDOW = EncoderWindow()


@dataclass(frozen=True, eq=False)
class AudioFeatures:
    """``features``: ``[frames, 2*context+1, hidden]`` float32, one row per video frame with its
    neighbours (clamped at the ends). ``stats``: what the run did (see the module docstring)."""

    features: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


# -- the encoder ---------------------------------------------------------------------------------


def _folder_identity(folder: Path) -> dict[str, Any]:
    """What a model folder's output depends on: its configs and its weight files' names + sizes
    (not its location)."""
    config = json.loads((folder / "config.json").read_text())
    pre = folder / "preprocessor_config.json"
    weights = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.suffix in (".safetensors", ".bin")}
    return {"config": sha256_json(config), "preprocessor": sha256_json(json.loads(pre.read_text())) if pre.is_file() else None,
            "weight_files": weights}  # fmt: skip


class AudioEncoder:
    """wav2vec2 through transformers' ``Wav2Vec2Model``, run per encoder window.

    Build it with :meth:`load`. ``weights_label`` says which weights it runs ("random weights" or
    the model folder's name); ``identity`` is what its output depends on (caches are keyed on it);
    ``hidden_size`` is the width of its rows (768 for wav2vec2-base)."""

    def __init__(self, model: Any, *, weights_label: str, identity: dict[str, Any], device: Any, normalize: bool,
                 layers: str | int = "mean") -> None:  # fmt: skip
        if not (layers in ("mean", "last", "all") or (isinstance(layers, int) and 0 <= layers <= model.config.num_hidden_layers)):
            raise ValueError(f"layers must be 'mean', 'last', 'all' or a layer number 0..{model.config.num_hidden_layers}, "
                             f"got {layers!r}")  # fmt: skip
        self.model = model
        self.weights_label = weights_label
        self.device = device
        self.normalize = normalize
        self.layers = layers
        self.identity = {**identity, "layers": layers, "normalize": normalize}
        self.digest = sha256_json(self.identity)
        self.hidden_size = int(model.config.hidden_size)
        # Every window this encoder ran, timed: the cost of a window when a run had no miss to time.
        self.windows_encoded = 0
        self.encode_s = 0.0

    @property
    def seconds_per_window(self) -> float | None:
        return self.encode_s / self.windows_encoded if self.windows_encoded else None

    @classmethod
    def load(cls, model_path: str | Path | None = None, *, device: str = "cpu", layers: str | int = "mean",
             config_overrides: dict[str, Any] | None = None, seed: int = RANDOM_SEED,
             released: str | Path | None = None) -> AudioEncoder:  # fmt: skip
        """A local wav2vec2 folder (``config.json`` + ``model.safetensors`` or
        ``pytorch_model.bin``, e.g. a download of ``facebook/wav2vec2-base-960h``), else the
        architecture of a released config in the repo with weights drawn from ``seed`` (on the
        CPU, so every device gets the same ones) and labelled "random weights": ``released``, a
        folder holding ``config.json`` and ``preprocessor_config.json`` (default
        ``speech/released/wav2vec2-base/``, ``do_normalize: true``; the ``echomimic-v3`` backend
        passes ``chinese-wav2vec2-base``'s, the same architecture without the variance
        normalisation). ``config_overrides`` change the random-weight architecture (tests use a
        tiny one). A model folder uses its own ``preprocessor_config.json``.

        Example::

            encoder = AudioEncoder.load()                 # wav2vec2-base, random weights
            encoder = AudioEncoder.load("models/wav2vec2-base-960h", device="cuda")
        """
        import torch
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        from newsmotion_engine.speech.released import WAV2VEC2_BASE

        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this machine has no CUDA GPU; use device='cpu'")
        if model_path is not None:
            folder = Path(model_path)
            _check_folder(folder)
            model = Wav2Vec2Model.from_pretrained(folder, local_files_only=True)
            pre = folder / "preprocessor_config.json"
            normalize = bool(json.loads(pre.read_text()).get("do_normalize", True)) if pre.is_file() else True
            label, identity = f"model folder {folder.name}", {"weights": "model folder", **_folder_identity(folder)}
        else:
            spec = Path(released) if released is not None else WAV2VEC2_BASE
            config = {**json.loads((spec / "config.json").read_text()), **(config_overrides or {})}
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = Wav2Vec2Model(Wav2Vec2Config(**config))
            normalize = bool(json.loads((spec / "preprocessor_config.json").read_text())["do_normalize"])
            label = RANDOM_WEIGHTS_LABEL
            identity = {"weights": RANDOM_WEIGHTS_LABEL, "seed": seed, "config": sha256_json(config)}
        # eval(): no dropout, layer drop or SpecAugment masking at inference.
        model = model.to(dev).eval().requires_grad_(False)
        return cls(model, weights_label=label, identity=identity, device=dev, normalize=normalize, layers=layers)

    def encode(self, window: np.ndarray) -> np.ndarray:
        """``[frames, hidden]`` float32 for one window of 16 kHz samples (``frames`` = the conv
        front end's output length; ``[frames, layers, hidden]`` with ``layers="all"``). When the
        encoder normalises (``do_normalize``), the window is normalised on its own, so the output depends on its samples only: mean removed and
        divided by its standard deviation, as the feature extractor treats an input, but by no
        less than :data:`REFERENCE_STD` (the level of loudness-normalised speech). A whole
        utterance normalised at once keeps its pauses quiet; dividing a near-silent window by its
        own tiny deviation would instead blow its noise up to full scale."""
        import torch

        start = time.perf_counter()
        x = np.asarray(window, dtype=np.float32)
        if self.normalize:
            x = (x - x.mean()) / max(float(x.std()), REFERENCE_STD)
        with torch.inference_mode():
            out = self.model(torch.from_numpy(x)[None].to(self.device), output_hidden_states=self.layers != "last")
            rows = self._pick_layers(out.hidden_states, out.last_hidden_state)
            result = rows.float().cpu().numpy()  # .cpu() waits for a GPU, so the time is the real one
        self.windows_encoded += 1
        self.encode_s += time.perf_counter() - start
        return result

    def _pick_layers(self, hidden_states: Any, last: Any) -> Any:
        """The rows ``layers`` asks for, of batch item 0. ``hidden_states``: the encoder's input
        then each transformer layer's output (``Wav2Vec2Model``'s ``hidden_states``); ``last``:
        its ``last_hidden_state``."""
        import torch

        if self.layers == "last":
            return last[0]
        if self.layers == "mean":
            return torch.stack(tuple(hidden_states[1:])).mean(0)[0]
        if self.layers == "all":
            return torch.stack(tuple(hidden_states[1:]), dim=2)[0]
        return hidden_states[self.layers][0]

    def encode_at_frames(self, samples: np.ndarray, frames: int) -> np.ndarray:
        """``[frames, hidden]`` (``[frames, layers, hidden]`` with ``layers="all"``) for a whole
        clip of 16 kHz ``samples``, already in the form the model reads (see
        :mod:`~newsmotion_engine.speech.clip_features`): the conv front end's 50 Hz output is
        interpolated linearly to ``frames`` rows (``align_corners=True``: the first and last rows
        are the first and last conv frames) *before* the feature projection and the transformer,
        which then run at the video rate. Clips shorter than the conv's 25 ms receptive field
        are zero-padded to it."""
        import torch
        import torch.nn.functional as F

        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if x.size < RECEPTIVE_SAMPLES:
            x = np.pad(x, (0, RECEPTIVE_SAMPLES - x.size))
        # The model's own forward (its hidden_states, pre- or post-norm alike) with the conv front
        # end's output swapped for its interpolation: what the release's subclass does with seq_len.
        # No time masking runs: SpecAugment only applies in training.
        hook = self.model.feature_extractor.register_forward_hook(
            lambda _m, _args, conv: F.interpolate(conv, size=frames, mode="linear", align_corners=True))  # fmt: skip
        try:
            with torch.inference_mode():
                out = self.model(torch.from_numpy(x)[None].to(self.device), output_hidden_states=self.layers != "last")
                return self._pick_layers(out.hidden_states, out.last_hidden_state).float().cpu().numpy()
        finally:
            hook.remove()


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise BadInputError(folder, "is not a folder (a wav2vec2 model folder holds config.json and the weights)")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise BadInputError(config_path, "missing from the wav2vec2 model folder")
    try:
        model_type = json.loads(config_path.read_text()).get("model_type")
    except (OSError, ValueError) as exc:
        raise BadInputError(config_path, f"not a readable JSON config ({exc})") from None
    if model_type != "wav2vec2":
        raise BadInputError(config_path, f"model_type is {model_type!r}, not 'wav2vec2'")
    if not any((folder / name).is_file() for name in ("model.safetensors", "pytorch_model.bin")):
        raise BadInputError(folder, "has no model.safetensors or pytorch_model.bin (incomplete download?)")


# -- windows -------------------------------------------------------------------------------------


def window_anchors(samples: np.ndarray, sample_rate: int = SPEECH_SAMPLE_RATE) -> list[int]:
    """Where the encoder windows restart: sample 0 and each speech onset after a pause (at least
    :data:`ONSET_PAUSE_S` of 10 ms frames below :data:`ONSET_LEVEL_DBFS` RMS), placed on the first
    sample of the onset that reaches that level. Placing it on a sample rather than a frame
    boundary makes the same phrase start its windows at the same point of its audio in any
    speech."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    level = 10.0 ** (ONSET_LEVEL_DBFS / 20.0)
    n_frames = x.size // _ENERGY_FRAME
    rms = np.sqrt(np.mean(x[: n_frames * _ENERGY_FRAME].reshape(n_frames, _ENERGY_FRAME).astype(np.float64) ** 2, axis=1))
    quiet = rms < level
    min_pause = int(round(ONSET_PAUSE_S * sample_rate / _ENERGY_FRAME))
    anchors, run = [0], 0
    for i, is_quiet in enumerate(quiet):
        if is_quiet:
            run += 1
            continue
        if run >= min_pause:
            # The onset sample: the first one at the level, searched from the last quiet frame on.
            start = (i - 1) * _ENERGY_FRAME
            loud = np.flatnonzero(np.abs(x[start : (i + 1) * _ENERGY_FRAME]) >= level)
            anchor = start + int(loud[0]) if loud.size else i * _ENERGY_FRAME
            if anchor > anchors[-1]:
                anchors.append(anchor)
        run = 0
    return anchors


def window_cores(n_samples: int, anchors: list[int], window: EncoderWindow) -> list[tuple[int, int]]:
    """``(core_start, keep_until)`` per window: cores tile each stretch between two anchors from
    its anchor on; frames centred at or after ``keep_until`` (the next anchor or the end) are
    dropped, the next stretch's windows cover them."""
    bounds = [*anchors, n_samples]
    cores = [(core, stop) for start, stop in zip(bounds[:-1], bounds[1:])
             for core in range(start, stop, window.core_samples) if core + HOP_SAMPLES // 2 < stop]  # fmt: skip
    # A speech shorter than half a frame still gets one window (its first frame is kept).
    return cores or [(0, n_samples)]


def _window_samples(x: np.ndarray, core_start: int, window: EncoderWindow) -> np.ndarray:
    """The window around a core, zero-padded past either end of the speech."""
    first = core_start - window.lead_samples()
    out = np.zeros(window.samples, dtype=np.float32)
    lo, hi = max(first, 0), min(first + window.samples, x.size)
    if hi > lo:
        out[lo - first : hi - first] = x[lo:hi]
    return out


def _to_video_frames(times_s: np.ndarray, rows: np.ndarray, fps: float, count: int) -> np.ndarray:
    """Linear interpolation of the 50 Hz rows at each video frame's centre time, held constant
    past the first and last row."""
    centres = (np.arange(count) + 0.5) / fps
    right = np.clip(np.searchsorted(times_s, centres), 1, len(times_s) - 1) if len(times_s) > 1 else np.zeros(count, int)
    left = np.maximum(right - 1, 0)
    span = times_s[right] - times_s[left]
    weight = np.clip((centres - times_s[left]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
    weight = weight.reshape(-1, *([1] * (rows.ndim - 1)))
    return ((1.0 - weight) * rows[left] + weight * rows[right]).astype(np.float32)


def with_context(rows: np.ndarray, context: int) -> np.ndarray:
    """For each row ``i``, rows ``i - context .. i + context`` with the indices clamped to the
    first and last row: ``[rows, 2*context+1, ...]`` (EchoMimicV3's per-frame audio window)."""
    index = np.clip(np.arange(len(rows))[:, None] + np.arange(-context, context + 1)[None, :], 0, len(rows) - 1)
    return np.ascontiguousarray(rows[index])


# -- the bypass ----------------------------------------------------------------------------------


def _hasher(window: EncoderWindow, n_bits: int = HASH_BITS) -> SimHasher:
    return SimHasher(n_bits, dims=window.frames * N_MELS, seed=HASH_SEED)


def _bypass_params(encoder: AudioEncoder, window: EncoderWindow, hasher: SimHasher) -> dict[str, Any]:
    """What a stored encoder output depends on: the encoder, the window and the hash function."""
    return {"encoder": encoder.digest, "window": window.params, "hasher": hasher.params,
            "log_mel": {"n_mels": N_MELS, "hop": HOP_SAMPLES, "win": RECEPTIVE_SAMPLES}}  # fmt: skip


def open_encoder_cache(folder: str | Path, encoder: AudioEncoder, *, max_distance: int = DEFAULT_MAX_DISTANCE,
                       window: EncoderWindow = DEFAULT_WINDOW) -> EncoderCache:  # fmt: skip
    """The persistent encoder cache in ``folder`` for ``encoder`` and ``window`` (shared across
    speeches), reusing outputs within ``max_distance`` bits (0: exact hashing). A folder made for
    another encoder, window or hash function is refused (:class:`CacheStaleError`)."""
    hasher = _hasher(window)
    return EncoderCache(folder, n_bits=hasher.n_bits, max_distance=max_distance, params=_bypass_params(encoder, window, hasher))


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise 1 - cos."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return 1.0 - np.sum(a * b, axis=-1) / np.maximum(norms, 1e-12)


def speech_samples(speech: Any) -> np.ndarray:
    """The 16 kHz samples of a :class:`~newsmotion_engine.speech.audio.Speech` (``samples``) or a
    speech cache (``audio``)."""
    samples = getattr(speech, "samples", None)
    if samples is None:
        samples = getattr(speech, "audio", None)
    if samples is None:
        raise TypeError(f"{type(speech).__name__} has neither .samples nor .audio")
    rate = getattr(speech, "sample_rate", SPEECH_SAMPLE_RATE)
    if rate != SPEECH_SAMPLE_RATE:
        raise ValueError(f"speech is at {rate} Hz; the audio encoder takes {SPEECH_SAMPLE_RATE} Hz (load it with load_speech)")
    return np.asarray(samples, dtype=np.float32).reshape(-1)


def encode_for_video(speech: Any, fps: float, *, encoder: AudioEncoder, cache: EncoderCache | None = None, context: int = 2,
                     window: EncoderWindow = DEFAULT_WINDOW, verify: bool = False) -> AudioFeatures:  # fmt: skip
    """Encoder features of ``speech`` (a ``Speech`` or a speech cache, 16 kHz) at ``fps``:
    ``[video_frames, 2*context+1, encoder.hidden_size]`` float32.

    With ``cache`` (from :func:`open_encoder_cache`) each window's stored output is reused when a
    near-duplicate window was encoded before, and new outputs are stored. ``verify=True`` also
    encodes every reused window to report the cosine distance of reused to fresh outputs (it then
    saves nothing; the seconds saved are what the run would have saved).

    Example::

        encoder = AudioEncoder.load()
        cache = open_encoder_cache("storage/encoder-cache", encoder)
        result = encode_for_video(load_speech("intro.wav"), 30, encoder=encoder, cache=cache)
        result.features.shape, result.stats["hit_rate"]      # (frames, 5, 768), 0.4
    """
    if fps <= 0 or context < 0:
        raise ValueError(f"fps must be positive and context >= 0, got {fps} and {context}")
    x = speech_samples(speech)
    hasher = None
    if cache is not None:
        hasher = _hasher(window, cache.n_bits)
        wanted = _bypass_params(encoder, window, hasher)
        if cache.params != wanted:
            raise CacheStaleError(cache.folder, "this encoder cache was opened for another encoder, window or hash; "
                                                "open it with open_encoder_cache(folder, encoder, window=...)")
    cores = window_cores(x.size, window_anchors(x), window)
    centre_offsets = HOP_SAMPLES * np.arange(window.core_frames) + HOP_SAMPLES // 2
    times, rows = [], []
    hits = exact_hits = 0
    encoder_s = hash_s = lookup_s = verify_s = 0.0
    distances: list[float] = []
    for core_start, keep_until in cores:
        audio = _window_samples(x, core_start, window)
        found = None
        if cache is not None:
            t0 = time.perf_counter()
            window_hash = hasher.hash(log_mel(audio, SPEECH_SAMPLE_RATE, N_MELS, HOP_SAMPLES, RECEPTIVE_SAMPLES))
            t1 = time.perf_counter()
            found = cache.nearest(window_hash)
            hash_s, lookup_s = hash_s + (t1 - t0), lookup_s + (time.perf_counter() - t1)
        if found is None:
            t0 = time.perf_counter()
            core = encoder.encode(audio)[window.margin_frames : window.margin_frames + window.core_frames]
            encoder_s += time.perf_counter() - t0
            if cache is not None:
                t0 = time.perf_counter()
                cache.put(window_hash, core)
                lookup_s += time.perf_counter() - t0
        else:
            stored_hash, core = found
            hits += 1
            exact_hits += hamming(stored_hash, window_hash) == 0
            if verify:
                t0 = time.perf_counter()
                fresh = encoder.encode(audio)[window.margin_frames : window.margin_frames + window.core_frames]
                verify_s += time.perf_counter() - t0
                distances.append(float(np.mean(cosine_distance(core, fresh))))
        centres = core_start + centre_offsets
        keep = centres < keep_until
        keep[0] = True  # a core starts before keep_until; only a speech shorter than half a frame needs this
        times.append(centres[keep] / SPEECH_SAMPLE_RATE)
        rows.append(np.asarray(core, dtype=np.float32)[keep])
    count = frame_count(x.size / SPEECH_SAMPLE_RATE, fps)  # the viseme track's frames, so the two line up
    video_rows = _to_video_frames(np.concatenate(times), np.concatenate(rows), fps, count)
    misses = len(cores) - hits
    per_window = encoder_s / misses if misses else (verify_s / hits if verify and hits else encoder.seconds_per_window)
    avoided = hits * per_window if per_window is not None else None
    stats: dict[str, Any] = {
        "weights": encoder.weights_label,
        "windows": len(cores),
        "hits": hits,
        "exact_hits": exact_hits,
        "hit_rate": hits / len(cores) if cores else 0.0,
        "max_distance": cache.max_distance if cache is not None else None,
        "encoder_s": encoder_s,
        "encoder_s_per_window": per_window,
        "hash_s": hash_s,
        "lookup_s": lookup_s,
        "encoder_s_avoided": avoided,
        "seconds_saved": avoided - hash_s - lookup_s if avoided is not None else None,
        "reuse_cosine_distance": ({"mean": float(np.mean(distances)), "max": float(np.max(distances)), "windows": len(distances)}
                                  if distances else None),  # fmt: skip
    }
    if verify and encoder.weights_label == RANDOM_WEIGHTS_LABEL:
        stats["note"] = "random weights: the cosine distance measures the hash's choice of windows, not lip quality"
    return AudioFeatures(features=with_context(video_rows, context), stats=stats)


# -- the features sub-cache ----------------------------------------------------------------------

FEATURES_SCHEMA = CacheSchema(kind="speech-audio-features", version=1,
                              arrays={"features.npy": ArraySpec("float32", (None, None, None))})
# layers="all": [frames, 2*context+1, layers, hidden].
LAYERED_FEATURES_SCHEMA = CacheSchema(kind="speech-audio-features-layered", version=1,
                                      arrays={"features.npy": ArraySpec("float32", (None, None, None, None))})


def _features_schema(encoder: AudioEncoder) -> CacheSchema:
    return LAYERED_FEATURES_SCHEMA if encoder.layers == "all" else FEATURES_SCHEMA


class FeatureRecipe(Protocol):
    """How a speech's features are computed: ``name`` (its sub-cache folder and its value in
    records), ``params`` (what its output depends on besides the encoder: caches are keyed on
    them) and ``encode``."""

    name: str

    @property
    def params(self) -> dict[str, Any]: ...

    def encode(self, speech: Any, fps: float, *, encoder: AudioEncoder, context: int, encoder_cache: EncoderCache | None,
               verify: bool) -> AudioFeatures: ...  # fmt: skip


@dataclass(frozen=True)
class WindowedRecipe:
    """The SimHash-able recipe (:func:`encode_for_video`): the transformer at its native 50 Hz
    over fixed windows, resampled to the video rate afterwards. An approximation of EchoMimicV3's
    input (see the module docstring); its windows can be reused through an encoder cache."""

    window: EncoderWindow = DEFAULT_WINDOW
    name: ClassVar[str] = "windowed"

    @property
    def params(self) -> dict[str, Any]:
        return {"recipe": self.name, "window": self.window.params}

    def encode(self, speech: Any, fps: float, *, encoder: AudioEncoder, context: int, encoder_cache: EncoderCache | None,
               verify: bool) -> AudioFeatures:  # fmt: skip
        return encode_for_video(speech, fps, encoder=encoder, cache=encoder_cache, context=context, window=self.window, verify=verify)


def feature_recipe(name: str) -> FeatureRecipe:
    """The recipe called ``name``: ``"official"`` (:class:`~.clip_features.OfficialRecipe`, EchoMimicV3's
    own computation) or ``"windowed"`` (:class:`WindowedRecipe`, the SimHash-able approximation)."""
    from newsmotion_engine.speech.clip_features import OfficialRecipe

    recipes: dict[str, FeatureRecipe] = {"official": OfficialRecipe(), "windowed": WindowedRecipe()}
    if name not in recipes:
        raise ValueError(f"unknown audio feature recipe {name!r}; use one of {', '.join(recipes)}")
    return recipes[name]


def _recipe(recipe: FeatureRecipe | None) -> FeatureRecipe:
    return recipe if recipe is not None else feature_recipe("official")


def features_dir(cache_root: CacheRoot, speech_id: str, fps: float, recipe: FeatureRecipe | None = None) -> Path:
    """``<speech cache>/audio-features-<recipe>-<fps>fps`` (recipe default: official): beside the
    speech cache's own files, so a rebuilt speech cache from another source drops it; one folder
    per recipe, so both can be kept."""
    from newsmotion_engine.speech.cache import speech_dir

    return speech_dir(cache_root, speech_id) / _features_folder(fps, recipe)


def clip_features_dir(cache_root: CacheRoot, audio: Any, fps: float, recipe: FeatureRecipe | None = None) -> Path:
    """``<speech root>/clips/<digest>/audio-features-<recipe>-<fps>fps``: the features of audio that
    is no speech cache (a :class:`~newsmotion_engine.speech.audio.SpeechTrack`, e.g. a story's
    assembled speech), keyed on its ``digest`` so equal audio shares them."""
    from newsmotion_engine.speech.sources import speech_root

    return speech_root(cache_root) / SPEECH_CLIPS / audio.digest[:32] / _features_folder(fps, recipe)


def _features_folder(fps: float, recipe: FeatureRecipe | None) -> str:
    return f"audio-features-{_recipe(recipe).name}-{fps:g}fps"


def _speech_source(speech: Any) -> dict[str, str]:
    """The features' source: the speech cache's digest (its content and provenance)."""
    return {"kind": "speech-cache", "digest": speech.digest}


def _audio_source(audio: Any) -> dict[str, str]:
    """The features' source for audio that is no speech cache: its samples' digest."""
    return {"kind": "audio", "digest": audio.digest}


def _features_params(encoder: AudioEncoder, context: int, recipe: FeatureRecipe) -> dict[str, Any]:
    return {"encoder": encoder.identity, "context": context, **recipe.params}


def load_features(cache_root: CacheRoot, speech_id: str, *, fps: float, encoder: AudioEncoder, context: int = 2,
                  recipe: FeatureRecipe | None = None) -> AudioFeatures:  # fmt: skip
    """The features sub-cache of a speech (memory-mapped) made by ``recipe`` (default: official),
    checked against the speech cache, the encoder and the recipe's params;
    :class:`~newsmotion_engine.errors.CacheError` when missing, corrupt or stale."""
    from newsmotion_engine.speech.cache import load_speech_cache

    recipe = _recipe(recipe)
    return _read_features(features_dir(cache_root, speech_id, fps, recipe), _speech_source(load_speech_cache(cache_root, speech_id)),
                          encoder=encoder, context=context, recipe=recipe)  # fmt: skip


def _read_features(target: Path, source: dict[str, str], *, encoder: AudioEncoder, context: int,
                   recipe: FeatureRecipe) -> AudioFeatures:  # fmt: skip
    loaded = read_cache(target, _features_schema(encoder), expected_source=source,
                        expected_params=_features_params(encoder, context, recipe))  # fmt: skip
    return AudioFeatures(features=loaded.arrays["features.npy"], stats=dict(loaded.metadata.get("stats") or {}))


def ensure_features(cache_root: CacheRoot, speech_id: str, *, fps: float, encoder: AudioEncoder, recipe: FeatureRecipe | None = None,
                    encoder_cache: EncoderCache | None = None, context: int = 2, verify: bool = False,
                    force: bool = False) -> AudioFeatures:  # fmt: skip
    """The speech's encoder features at ``fps`` made by ``recipe`` (default: official; see
    :func:`feature_recipe`): read from its sub-cache when current, else computed and written
    atomically. ``encoder_cache`` and ``verify`` apply to the windowed recipe (as in
    :func:`encode_for_video`). The speech cache must exist (``SpeechCacheError`` otherwise); the
    stats stored are those of the run that built it.

    Example::

        encoder = AudioEncoder.load()
        features = ensure_features(storage, "intro", fps=25, encoder=encoder)   # official
        shared = open_encoder_cache(storage.root / "encoder-cache", encoder)
        windowed = ensure_features(storage, "intro", fps=30, encoder=encoder, recipe=WindowedRecipe(), encoder_cache=shared)
    """
    from newsmotion_engine.speech.cache import load_speech_cache

    recipe = _recipe(recipe)
    speech = load_speech_cache(cache_root, speech_id)
    return _ensure_features_in(features_dir(cache_root, speech_id, fps, recipe), speech, _speech_source(speech), fps=fps,
                               encoder=encoder, recipe=recipe, encoder_cache=encoder_cache, context=context, verify=verify,
                               force=force)  # fmt: skip


def ensure_clip_features(cache_root: CacheRoot, audio: Any, *, fps: float, encoder: AudioEncoder,
                         recipe: FeatureRecipe | None = None, context: int = 2, force: bool = False) -> AudioFeatures:  # fmt: skip
    """As :func:`ensure_features`, for audio that is no speech cache: ``audio`` has 16 kHz
    ``samples`` and a ``digest`` (a :class:`~newsmotion_engine.speech.audio.SpeechTrack`); the
    sub-cache is :func:`clip_features_dir`, its source the audio's digest.

    Example::

        track = SpeechTrack(story_speech.audio, label="story evening")
        features = ensure_clip_features(storage, track, fps=25, encoder=AudioEncoder.load(layers="all"))
    """
    recipe = _recipe(recipe)
    return _ensure_features_in(clip_features_dir(cache_root, audio, fps, recipe), audio, _audio_source(audio), fps=fps,
                               encoder=encoder, recipe=recipe, encoder_cache=None, context=context, verify=False,
                               force=force)  # fmt: skip


def _ensure_features_in(target: Path, speech: Any, source: dict[str, str], *, fps: float, encoder: AudioEncoder,
                        recipe: FeatureRecipe, encoder_cache: EncoderCache | None, context: int, verify: bool,
                        force: bool) -> AudioFeatures:  # fmt: skip
    """The features of ``speech`` (anything :func:`speech_samples` reads) in the sub-cache ``target``
    whose source is ``source``: read when current, else computed and written atomically."""

    def compute() -> AudioFeatures:
        return recipe.encode(speech, fps, encoder=encoder, context=context, encoder_cache=encoder_cache, verify=verify)

    def build(result: AudioFeatures) -> None:
        def write(tmp: Path) -> None:
            np.save(tmp / "features.npy", result.features, allow_pickle=False)

        write_cache(target, write, schema=_features_schema(encoder), source=source,
                    params=_features_params(encoder, context, recipe),
                    extra={"weights": encoder.weights_label, "fps": fps, "stats": result.stats})  # fmt: skip

    read = lambda: _read_features(target, source, encoder=encoder, context=context, recipe=recipe)  # noqa: E731
    result, _ = ensure(target, read, build, force=force, prepare=compute)
    return result
