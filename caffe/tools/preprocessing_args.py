"""What classify and detect share: the model and preprocessing options of pycaffe's scripts,
their parsing, and loading a .npy mean. Bad values raise CaffeError (one line, no traceback)."""

from __future__ import annotations

import argparse

import numpy as np

from caffe.errors import CaffeError
from caffe.tools.devices import choose_devices


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model_def, --pretrained_model, --gpu and the Transformer's options (pycaffe's names
    and defaults, except that the model files have no default: none ship with the engine)."""
    parser.add_argument("--model_def", required=True, help="Model definition file (deploy).")
    parser.add_argument("--pretrained_model", required=True, help="Trained model weights file.")
    parser.add_argument("--gpu", action="store_true", help="Switch for gpu computation.")
    parser.add_argument(
        "--mean_file", default="", help="Data set image mean (.npy, K×H×W or K); none if empty."
    )
    parser.add_argument(
        "--input_scale", type=float, help="Multiply input features by this scale to finish."
    )
    parser.add_argument(
        "--raw_scale",
        type=float,
        default=255.0,
        help="Multiply raw input by this scale before preprocessing (default 255).",
    )
    parser.add_argument(
        "--channel_swap",
        default="2,1,0",
        help="Order to permute input channels; the default converts RGB -> BGR.",
    )


def parse_ints(text: str, flag: str, count: int | None = None) -> list[int]:
    """A comma list of non-negative integers, e.g. --channel_swap 2,1,0."""
    try:
        values = [int(part, 10) for part in text.split(",")]
    except ValueError:
        values = [-1]
    if min(values) < 0 or (count is not None and len(values) != count):
        what = f"{count} " if count is not None else ""
        raise CaffeError(f"{flag} {text!r}: expected {what}comma-separated integers >= 0")
    return values


def load_mean(path: str) -> np.ndarray | None:
    """The mean array of a .npy file, or None for an empty path."""
    if not path:
        return None
    try:
        return np.load(path)
    except (OSError, ValueError) as e:
        raise CaffeError(f"Could not read the mean file {path}: {e}") from None


def use_device(gpu: bool) -> None:
    """GPU 0 for --gpu (CPU, with a warning, without CUDA), else CPU."""
    choose_devices("0" if gpu else "", requested_by="--gpu")
