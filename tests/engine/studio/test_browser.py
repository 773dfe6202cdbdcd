"""The studio in a real browser: Debian's headless Chromium driven by Playwright, the site served
by the studio's own server. The index lists every render, the A/B wipe moves when dragged, both
clips play (and H.264 really decodes: pixels are read back), the heatmap loads, the skeleton
overlay draws, and the console stays free of errors."""

import pytest

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.storage import Storage
from newsmotion_engine.studio.paths import ab_page, render_page
from newsmotion_engine.studio.site import build_studio

from . import browser as B
from .conftest import make_render

pytestmark = pytest.mark.skipif(B.missing() is not None, reason=f"studio browser test: {B.missing()}")


@pytest.fixture(scope="module")
def site(tmp_path_factory, astronaut_png):
    storage = Storage(tmp_path_factory.mktemp("studio") / "storage")
    guidance, _ = ensure_guidance(storage, "nod")
    ensure_persona(storage, "astronaut", image=astronaut_png)
    frames = guidance.frames
    make_render(storage, "astronaut", "nod", "warp", frames=frames, width=144, height=256)
    make_render(storage, "astronaut", "nod", "wan-animate", frames=frames, width=144, height=256, shift=11, weights="random weights")
    make_render(storage, "astronaut", "wave", "warp", frames=8)
    make_render(storage, "astronaut", "wave", "gone", frames=8)
    storage.render_path("astronaut", "wave", "gone").unlink()
    build_studio(storage, bench_results=tmp_path_factory.mktemp("results"), pose=False)
    with B.served(storage.studio_dir) as url, B.browser() as chromium:
        yield url, chromium


def _page(chromium):
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    return page, errors


def test_index_lists_every_render(site):
    url, chromium = site
    page, errors = _page(chromium)
    page.goto(f"{url}/index.html")
    keys = page.eval_on_selector_all(".card[data-backend]", "cards => cards.map(c => c.getAttribute('href'))")
    assert sorted(keys) == sorted(
        render_page("astronaut", *k.split("/")) for k in ("nod/warp", "nod/wan-animate", "wave/warp", "wave/gone")
    )
    assert page.locator(".card.broken").count() == 1 and "clip missing" in page.locator(".card.broken").inner_text()
    page.click("#backend-filter .chip[data-backend=warp]")  # the filter hides that backend's cards
    assert page.locator("#render-count").inner_text() == "2"
    assert errors == []


def test_ab_page_wipe_playback_heatmap(site):
    url, chromium = site
    page, errors = _page(chromium)
    page.goto(f"{url}/{ab_page('astronaut', 'nod', 'wan-animate', 'warp')}")
    page.wait_for_function("['#va', '#vb', '#vh'].every(s => document.querySelector(s).readyState >= 2)", timeout=20000)
    # The heatmap clip loads and decodes.
    assert page.evaluate("document.querySelector('#vh').videoWidth") == 144
    # Dragging moves the wipe: the handle and A's clip follow the pointer.
    box = page.locator("#wipe").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.5, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.2, y, steps=5)
    page.mouse.up()
    pos = float(page.get_attribute("#wipe", "data-pos"))
    assert 0.15 < pos < 0.25
    assert page.evaluate("document.querySelector('#handle').style.left").startswith(f"{pos * 100:.0f}")
    assert "inset(0px 8" in page.evaluate("getComputedStyle(document.querySelector('#va-clip')).clipPath")
    # Both clips play (time advances on each) and show decoded pixels.
    page.click("#play")
    page.wait_for_function("document.querySelector('#va').currentTime > 0.6 && document.querySelector('#vb').currentTime > 0.6", timeout=15000)
    state = page.evaluate("""() => ['#va', '#vb', '#vh'].map(s => { const v = document.querySelector(s);
        const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
        const x = c.getContext('2d'); x.drawImage(v, 0, 0);
        const d = x.getImageData(0, 0, c.width, c.height).data; let g = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 1] > 120 && d[i] < 60) g++;
        return {paused: v.paused, green: g / (d.length / 4)}; })""")
    assert [s["paused"] for s in state] == [False, False, False]
    assert state[0]["green"] > 0.5 and state[1]["green"] > 0.5  # chroma green came out of the H.264 decoder
    # The plots follow the playhead.
    page.click("#play")
    assert page.locator("#plot-psnr text").last.text_content().startswith("frame ")
    assert errors == []


def test_render_page_skeleton_overlay(site):
    url, chromium = site
    page, errors = _page(chromium)
    page.goto(f"{url}/{render_page('astronaut', 'nod', 'warp')}")
    page.wait_for_function("document.querySelector('#clip').readyState >= 2")
    page.check("#skeleton")
    page.click("#next")
    painted = page.evaluate("""() => { const c = document.querySelector('#overlay');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return [c.width, n]; }""")
    assert painted[0] == 144 and painted[1] > 100
    assert errors == []
