"""``python -m newsmotion_engine.cli``: the ``newsmotion`` command."""

from newsmotion_engine.cli import main

main()
