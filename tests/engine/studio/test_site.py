"""The studio build: catalog states, pages for every render, A/B pages for every pair, bad
renders shown (never failing the build), comparisons reused, the site swapped in whole."""

import json
import re

import numpy as np
import pytest

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.studio.catalog import scan_renders
from newsmotion_engine.studio.paths import ab_page, render_page
from newsmotion_engine.studio.site import build_studio

from .conftest import make_render


def _data(html: str):
    return json.loads(re.search(r'<script type="application/json" id="studio-data">(.*?)</script>', html, re.S).group(1))


def test_catalog_states(storage):
    make_render(storage, "anna", "nod", "warp")
    make_render(storage, "anna", "nod", "gone").output
    storage.render_path("anna", "nod", "gone").unlink()
    make_render(storage, "anna", "nod", "short", frames=4, telemetry_frames=12)
    make_render(storage, "anna", "nod", "broken")
    storage.render_path("anna", "nod", "broken").write_bytes(b"\0" * 100)
    make_render(storage, "anna", "wave", "warp")
    storage.render_path("anna", "wave", "warp").with_suffix(".json").write_text("{")
    states = {e.key: (e.clip_state, e.problems) for e in scan_renders(storage)}
    assert states["anna/nod/warp"] == ("ok", ())
    assert states["anna/nod/gone"][0] == "missing" and "gone.mp4 is missing" in states["anna/nod/gone"][1][0]
    assert states["anna/nod/short"][0] == "truncated" and "4 of the 12 frames" in states["anna/nod/short"][1][0]
    assert states["anna/nod/broken"][0] == "unreadable"
    assert states["anna/wave/warp"][0] == "ok" and "telemetry cannot be read" in states["anna/wave/warp"][1][0]


def test_build_lists_every_render_and_pairs_and_survives_bad_ones(storage, tmp_path):
    make_render(storage, "anna", "nod", "warp")
    make_render(storage, "anna", "nod", "wan-animate", shift=9, weights="random weights",
                extra_info={"last_render": {"peak_vram_gib": 23.5}})  # fmt: skip
    make_render(storage, "anna", "nod", "short", frames=4, telemetry_frames=12)
    make_render(storage, "bob", "wave", "warp")
    make_render(storage, "bob", "wave", "gone")
    storage.render_path("bob", "wave", "gone").unlink()
    report = build_studio(storage, bench_results=tmp_path / "no-results", pose=False)
    site = storage.studio_dir
    assert report.renders == 5 and report.index == site / "index.html"
    index = (site / "index.html").read_text()
    assert len(re.findall(r'class="card[\s"]', index)) == 5
    for key in ("anna/nod/warp", "anna/nod/wan-animate", "anna/nod/short", "bob/wave/warp", "bob/wave/gone"):
        assert (site / render_page(*key.split("/"))).is_file(), key
    # Pairs only of playable clips: warp x wan-animate (the truncated one is left out).
    assert report.comparisons == 1 and list(report.ab_pages) == ["anna/nod/wan-animate.vs.warp"]
    ab_html = (site / ab_page("anna", "nod", "wan-animate", "warp")).read_text()
    data = _data(ab_html)
    assert data["frames"] == 12 and len(data["psnr"]) == 12 and data["pose"] == {}
    assert (site / "ab/anna/nod/wan-animate.vs.warp/heatmap.mp4").is_file()
    # Badges: random weights flagged, VRAM from the record, fps vs seconds.
    card = (site / render_page("anna", "nod", "wan-animate")).read_text()
    assert "random weights" in card and "VRAM 23.5 GiB" in card and "30.0 s" in card
    assert "90 fps" in (site / render_page("anna", "nod", "warp")).read_text()
    # Bad renders say so on their pages.
    short = (site / render_page("anna", "nod", "short")).read_text()
    assert "Clip truncated" in short and "4 of the 12 frames" in short and "<video" not in short
    assert "Clip missing" in (site / render_page("bob", "wave", "gone")).read_text()
    assert len(report.problems) == 2
    # Media are in the site (self-contained), every referenced local file exists.
    for page in site.rglob("*.html"):
        for ref in re.findall(r'(?:src|href)="([^"#:]+)"', page.read_text()):
            assert (page.parent / ref).resolve().is_file(), (page, ref)
    # A second build reuses the comparison and leaves no temporary folders behind.
    again = build_studio(storage, bench_results=tmp_path / "no-results", pose=False)
    assert again.reused_comparisons == 1
    assert [p.name for p in site.parent.iterdir() if p.name.startswith(".studio") and not p.name.endswith(".lock")] == []


def test_render_page_carries_the_followed_skeleton(storage, astronaut_png, tmp_path):
    guidance, _ = ensure_guidance(storage, "nod")
    ensure_persona(storage, "astronaut", image=astronaut_png)
    make_render(storage, "astronaut", "nod", "warp", frames=guidance.frames)
    make_render(storage, "nobody", "nod", "warp")  # no persona cache: the page says why, no skeleton
    build_studio(storage, bench_results=tmp_path / "none", pose=False)
    data = _data((storage.studio_dir / render_page("astronaut", "nod", "warp")).read_text())
    kp = np.array(data["keypoints"])
    assert kp.shape == (guidance.frames, 133 * 3)
    assert data["style"]["limbs"] and data["style"]["conf_threshold"] == 0.3
    body = kp[:, : 17 * 3].reshape(guidance.frames, 17, 3)
    shoulders = body[:, 5:7]  # always in a waist-up portrait: confident and inside the frame
    assert (shoulders[..., 2] >= 0.3).all() and ((shoulders[..., :2] > 0) & (shoulders[..., :2] < 1)).all()
    page = (storage.studio_dir / render_page("nobody", "nod", "warp")).read_text()
    assert _data(page)["keypoints"] is None and "Skeleton overlay unavailable" in page and "persona" in page


def test_a_failed_build_keeps_the_previous_site(storage, tmp_path, monkeypatch):
    make_render(storage, "anna", "nod", "warp")
    build_studio(storage, bench_results=tmp_path / "none", pose=False)
    before = (storage.studio_dir / "index.html").read_text()
    make_render(storage, "anna", "wave", "warp")

    def broken(*args, **kwargs):
        raise RuntimeError("chart failed")

    monkeypatch.setattr("newsmotion_engine.studio.charts.scorecard_charts", broken)
    with pytest.raises(RuntimeError, match="chart failed"):
        build_studio(storage, bench_results=tmp_path / "none", pose=False)
    assert (storage.studio_dir / "index.html").read_text() == before
    assert [p.name for p in storage.studio_dir.parent.iterdir() if p.name.endswith((".tmp", ".old"))] == []


def test_ab_comparison_clips_get_their_own_ab_page(storage, tmp_path):
    from newsmotion_engine.studio.catalog import ab_entry_name

    make_render(storage, "anna", "nod", "warp")
    ab = storage.ab_dir("anna", "nod")
    for label, shift in (("bf16", 0), ("fp8", 3)):  # what run_ab writes: {label}.mp4 + .json, comparison.json
        tele = make_render(storage, "anna", "nod", label, shift=shift)
        src = storage.render_path("anna", "nod", label)
        ab.mkdir(parents=True, exist_ok=True)
        src.rename(ab / f"{label}.mp4")
        src.with_suffix(".json").rename(ab / f"{label}.json")
    (ab / "comparison.json").write_text("{}")
    keys = sorted(e.key for e in scan_renders(storage))
    assert keys == ["anna/nod/ab-bf16", "anna/nod/ab-fp8", "anna/nod/warp"]  # the record is not a clip
    build_studio(storage, pose=False, log=lambda m: None)
    page = storage.studio_dir / ab_page("anna", "nod", ab_entry_name("bf16"), ab_entry_name("fp8"))
    assert page.is_file() and tele.persona_id == "anna"
