"""The ``newsmotion`` command's entry point (the console script); the commands are in
:mod:`newsmotion_engine.cli.app` and its group modules."""

from __future__ import annotations

import sys

import click

from newsmotion_engine.errors import NewsmotionError


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user-fixable errors into one line and exit status 1."""
    from newsmotion_engine.cli.app import app

    try:
        app(args=argv, standalone_mode=False, prog_name="newsmotion")
    except NewsmotionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(0)
