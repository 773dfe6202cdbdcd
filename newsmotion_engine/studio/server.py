"""``newsmotion studio serve``: the built site on localhost.

Starlette's static files (which answer HTTP range requests: a browser cannot seek in a video a
server sends only whole, and the A/B page seeks constantly) under uvicorn, bound to 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

from newsmotion_engine.errors import NewsmotionError

__all__ = ["DEFAULT_PORT", "studio_app", "serve_studio"]

DEFAULT_PORT = 8765


def studio_app(site: Path):
    """The ASGI app serving ``site`` (``index.html`` for ``/``)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles

    if not (site / "index.html").is_file():
        raise NewsmotionError(f"{site}: no studio site here; run `newsmotion studio build` first")
    return Starlette(routes=[Mount("/", StaticFiles(directory=str(site), html=True))])


def serve_studio(site: Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> None:
    """Serve ``site`` until interrupted."""
    import uvicorn

    if not 0 < port < 65536:
        raise NewsmotionError(f"port {port} is not a TCP port (1-65535)")
    uvicorn.run(studio_app(site), host=host, port=port, log_level="warning")
