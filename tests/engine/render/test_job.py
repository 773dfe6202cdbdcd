"""render_persona_loop: caches are hits when current and rebuilt when missing, corrupt or stale."""

import json

import numpy as np
import pytest

from newsmotion_engine import storage
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.job import render_persona_loop

SPEC = RenderSpec(width=180, height=320)


@pytest.fixture()
def warp():
    backend = get_backend("warp")
    backend.load()
    yield backend
    backend.close()


def test_hits_then_rebuilds_corrupt_and_stale_caches(astronaut_png, warp):
    install_source(astronaut_png, "anchor")
    first = render_persona_loop("anchor", "nod", warp, SPEC)
    assert (first["guidance_cache"], first["persona_cache"]) == ("rebuilt", "rebuilt")
    second = render_persona_loop("anchor", "nod", warp, SPEC)
    assert (second["guidance_cache"], second["persona_cache"]) == ("hit", "hit")

    # Truncated keypoints: detected by the cheap size check, rebuilt, never rendered from.
    kp = storage.guidance_dir("nod") / "keypoints.npy"
    kp.write_bytes(kp.read_bytes()[:-100])
    # Stale persona: built with other parameters than this newsmotion uses.
    meta_path = storage.persona_dir("anchor") / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["persona_version"] = -1
    meta_path.write_text(json.dumps(meta))
    third = render_persona_loop("anchor", "nod", warp, SPEC)
    assert (third["guidance_cache"], third["persona_cache"]) == ("rebuilt", "rebuilt")
    assert np.load(kp).shape == (120, 133, 3)


def test_unknown_loop_and_persona_fail_before_any_work(astronaut_png, warp):
    install_source(astronaut_png, "anchor")
    with pytest.raises(NewsmotionError, match="unknown loop 'moonwalk'"):
        render_persona_loop("anchor", "moonwalk", warp, SPEC)
    with pytest.raises(NewsmotionError, match="unknown persona 'nobody'"):
        render_persona_loop("nobody", "nod", warp, SPEC)
    assert not storage.guidance_root().exists() and not storage.renders_root().joinpath("nobody").exists()
