"""Make docs/studio-index.png and docs/studio-ab.png from a built studio (how the committed
screenshots were made).

    NEWSMOTION_STORAGE=/tmp/studio-storage newsmotion studio build
    NEWSMOTION_STORAGE=/tmp/studio-storage python docs/studio_screenshots.py astronaut nod

Uses the browser test's helpers: Debian's chromium through Playwright, the studio's own server.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "engine" / "studio"))

import browser  # noqa: E402

from newsmotion_engine.storage import Storage  # noqa: E402
from newsmotion_engine.studio.catalog import group_by_pair, scan_renders  # noqa: E402
from newsmotion_engine.studio.paths import ab_page  # noqa: E402


def main(persona: str, loop: str) -> None:
    store = Storage.from_env()
    group = [e for e in group_by_pair(scan_renders(store))[(persona, loop)] if e.playable]
    a, b = group[0].backend, group[1].backend
    with browser.served(store.studio_dir) as url, browser.browser() as chromium:
        page = chromium.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{url}/index.html")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(REPO / "docs" / "studio-index.png"))
        page.set_viewport_size({"width": 1440, "height": 1160})
        page.goto(f"{url}/{ab_page(persona, loop, a, b)}")
        page.wait_for_function("['#va', '#vb', '#vh'].every(s => document.querySelector(s).readyState >= 2)")
        box = page.locator("#wipe").bounding_box()
        y = box["y"] + box["height"] * 0.6
        page.mouse.move(box["x"] + box["width"] * 0.5, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.42, y, steps=4)
        page.mouse.up()
        page.evaluate("document.activeElement && document.activeElement.blur()")  # arrows step frames, not the wipe
        for _ in range(45):
            page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1200)
        page.screenshot(path=str(REPO / "docs" / "studio-ab.png"))
    print("wrote docs/studio-index.png, docs/studio-ab.png")


if __name__ == "__main__":
    main(*sys.argv[1:3])
