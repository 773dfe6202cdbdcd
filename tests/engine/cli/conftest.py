"""Running the `newsmotion` command in a test: exit code, stdout, stderr."""

import pytest

from newsmotion_engine.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err
