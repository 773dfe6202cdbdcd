"""What ``newsmotion model check DIR`` reads of MimicMotion's own file, beside the SVD-xt-1.1
diffusers folder the shared diffusers check covers: ``MimicMotion_1-1.pth`` marks the folder as
this backend's (so a folder missing its index or a component is still told what it lacks), and
its ``unet.*`` / ``pose_net.*`` tensors are checked against the UNet the folder's
``unet/config.json`` builds and the PoseNet of that width (on the meta device, no weights loaded)."""

from __future__ import annotations

from pathlib import Path

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.mimicmotion.components import split_checkpoint
from newsmotion_engine.render.backends.mimicmotion.config import released
from newsmotion_engine.render.model_check import Row, fit_problem, meta_shapes, tensor_index, weights_text

__all__ = ["checkpoint_rows", "has_checkpoint"]


def _checkpoint(root: Path) -> Path:
    return root / released()["checkpoint"]


def has_checkpoint(root: Path) -> bool:
    """Whether ``root`` holds the MimicMotion checkpoint under its released name."""
    return _checkpoint(root).is_file()


def checkpoint_rows(root: Path) -> list[Row]:
    """The checkpoint's row: its two parts' tensor counts and the PoseNet's width, its weights.
    Raises :class:`BadInputError` naming the checkpoint when a part is missing or does not fit."""
    from diffusers import UNetSpatioTemporalConditionModel

    from newsmotion_engine.render.backends.mimicmotion.pose_net import PoseNet
    from newsmotion_engine.render.backends.wan.diffusers_config import read_json

    path = _checkpoint(root)
    index = tensor_index(path)
    parts = split_checkpoint(index, path)
    unet_config = read_json(root / "unet" / "config.json")
    width = unet_config.get("block_out_channels", [320])[0]
    for part, build in (("unet", lambda: UNetSpatioTemporalConditionModel.from_config(unet_config)),
                        ("pose_net", lambda: PoseNet(noise_latent_channels=width))):  # fmt: skip
        if problem := fit_problem(parts[part], meta_shapes(build)):
            what = "the UNet of unet/config.json" if part == "unet" else f"the PoseNet (width {width}, the UNet's first block)"
            raise BadInputError(path, f"{part}.*: does not fit {what}: {problem}")
    config = f"unet.* {len(parts['unet'])} tensors, pose_net.* {len(parts['pose_net'])} tensors, PoseNet width {width}"
    return [(path.name, "MimicMotionModel (UNet + PoseNet)", config, weights_text([path], [index]))]
