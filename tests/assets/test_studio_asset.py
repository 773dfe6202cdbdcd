"""The studio asset: builds the site from the renders on disk; its metadata links to the index
and to every A/B page, and lists the renders with problems."""

import importlib.util
from pathlib import Path

import dagster as dg

from newsmotion_assets.assets.studio import studio
from newsmotion_assets.resources import StorageResource

# The synthetic renders of the engine's studio tests (loaded by path: test folders are not packages).
_spec = importlib.util.spec_from_file_location("studio_conftest", Path(__file__).parents[1] / "engine/studio/conftest.py")
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)


def test_studio_asset_links_to_its_pages(storage, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    monkeypatch.setenv("NEWSMOTION_STUDIO_URL", "http://studio.local:9000/")
    _helpers.make_render(storage, "anna", "nod", "warp")
    _helpers.make_render(storage, "anna", "nod", "wan-animate", shift=7, weights="random weights")
    _helpers.make_render(storage, "anna", "wave", "gone")
    storage.render_path("anna", "wave", "gone").unlink()
    with dg.instance_for_test() as instance:
        result = dg.materialize([studio], instance=instance, resources={"storage": StorageResource()})
    (mat,) = result.asset_materializations_for_node("studio")
    assert mat.metadata["index"].value == "http://studio.local:9000/index.html"
    assert mat.metadata["renders"].value == 3 and mat.metadata["comparisons"].value == 1
    assert "(http://studio.local:9000/ab/anna/nod/wan-animate.vs.warp.html)" in mat.metadata["ab_pages"].value
    assert "anna/wave/gone: gone.mp4 is missing" in mat.metadata["problems"].value
    assert (storage.studio_dir / "index.html").is_file()
