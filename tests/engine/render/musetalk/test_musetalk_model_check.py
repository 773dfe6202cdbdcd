"""``newsmotion model check DIR`` on MuseTalk 1.5's official layout: a tiny folder written as the
loading tests write it is recognised (the UNet's state dict checked against its config, the
release compared, the ``newsmotion lips`` options), in the CLI's table too; an incomplete folder
or a UNet that does not fit is one error line naming the file."""

from __future__ import annotations

import pytest

from newsmotion_engine.cli import main
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.model_check import check_model
from newsmotion_engine.render.musetalk.config import preset_config
from tests.engine.render.musetalk.test_musetalk import _write_official_folder


def test_the_official_layout_is_recognised(tmp_path):
    root = tmp_path / "MuseTalk"
    _write_official_folder(root, preset_config("tiny"))
    found = check_model(root)
    assert (found.backend, found.layout) == ("musetalk", "MuseTalk 1.5, official layout")
    rows = {row[0]: row for row in found.rows}
    assert rows["musetalkV15/unet.pth"][1] == "UNet2DConditionModel" and "in_channels=8" in rows["musetalkV15/unet.pth"][2]
    assert "F32" in rows["musetalkV15/unet.pth"][3] and rows["sd-vae"][1] == "AutoencoderKL" and rows["whisper"][1] == "WhisperModel"
    assert found.release.startswith("unet differs from TMElyralab/MuseTalk (musetalkV15) in ")
    assert found.defaults["face size"] == 256
    assert found.options == f"newsmotion lips --persona P --loop L --speech ID -o model_path={root}"


def test_incomplete_or_mismatched_folders_are_named(tmp_path):
    root = tmp_path / "MuseTalk"
    _write_official_folder(root, preset_config("tiny"), bad_unet=True)
    with pytest.raises(BadInputError, match=r"unet\.pth: does not fit the UNet of musetalkV15/musetalk\.json: 1 tensor\(s\) missing, e\.g\. 'conv_in\.weight'"):
        check_model(root)
    for f in (root / "whisper").iterdir():
        f.unlink()
    with pytest.raises(BadInputError, match=r"no whisper/config\.json"):
        check_model(root)


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_cli_table_and_one_error_line(tmp_path, capsys):
    root = tmp_path / "MuseTalk"
    _write_official_folder(root, preset_config("tiny"))
    code, out, _ = _run(capsys, "model", "check", str(root))
    assert code == 0 and "musetalk" in out and "UNet2DConditionModel" in out and "options" in out and "newsmotion lips" in out
    (root / "sd-vae" / "config.json").unlink()
    code, out, err = _run(capsys, "model", "check", str(root))
    assert code == 1 and err.startswith("error:") and "sd-vae/config.json" in err and len(err.strip().splitlines()) == 1
