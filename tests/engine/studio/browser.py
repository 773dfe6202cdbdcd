"""Headless Chromium for the studio's browser test and its screenshots: the Debian ``chromium``
package driven by Playwright (never Playwright's own browser builds), the site served by
``newsmotion studio serve``'s app on a free loopback port."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# Offline, as root, in a sandbox: the flags the machine's notes give for Debian's chromium.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]  # fmt: skip


def missing() -> str | None:
    """Why the browser test cannot run here, or ``None``."""
    if not Path(CHROMIUM).is_file() and not shutil.which("chromium"):
        return "Debian's chromium is not installed (make test installs it with apt-get where it can)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (it is pinned in requirements.lock)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(site: Path) -> Iterator[str]:
    """Serve ``site`` with the studio's own app; yields the base URL."""
    import uvicorn

    from newsmotion_engine.studio.server import studio_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(studio_app(site), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the studio server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium"), args=FLAGS)
        try:
            yield b
        finally:
            b.close()
