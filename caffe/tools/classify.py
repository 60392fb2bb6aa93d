"""Classify images with caffe.Classifier (pycaffe's python/classify.py):

    python -m caffe.tools.classify INPUT_FILE OUTPUT_FILE --model_def M --pretrained_model W
        [--gpu] [--center_only] [--images_dim 256,256] [--mean_file mean.npy]
        [--input_scale S] [--raw_scale 255] [--channel_swap 2,1,0] [--ext jpg]

INPUT_FILE is an image, a .npy of H×W×K images (N×H×W×K), or a directory whose *.EXT images
are classified in sorted order. OUTPUT_FILE receives the (N, classes) predictions as .npy
(np.save adds the suffix if missing). The only difference from pycaffe: --model_def,
--pretrained_model have no default and --mean_file defaults to none (no ImageNet mean ships).
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import time

import numpy as np

from caffe import io
from caffe.classifier import Classifier
from caffe.errors import CaffeError
from caffe.tools.exit_status import run_reporting_errors
from caffe.tools.preprocessing_args import add_model_args, load_mean, parse_ints, use_device

_log = logging.getLogger("caffe")


def load_inputs(input_file: str, ext: str) -> list[np.ndarray] | np.ndarray:
    """The images named by INPUT_FILE: a .npy array, a directory's *.ext files, or one image."""
    input_file = os.path.expanduser(input_file)
    try:
        if input_file.endswith("npy"):
            return np.load(input_file)
        if os.path.isdir(input_file):
            files = sorted(glob.glob(os.path.join(glob.escape(input_file), f"*.{ext}")))
            if not files:
                raise CaffeError(f"{input_file}: the directory has no *.{ext} images")
            return [io.load_image(name) for name in files]
        return [io.load_image(input_file)]
    except (OSError, ValueError) as e:
        raise CaffeError(f"Could not read the input {input_file}: {e}") from None


def classify(args: argparse.Namespace) -> np.ndarray:
    image_dims = parse_ints(args.images_dim, "--images_dim", count=2)
    channel_swap = parse_ints(args.channel_swap, "--channel_swap") if args.channel_swap else None
    mean = load_mean(args.mean_file)
    inputs = load_inputs(args.input_file, args.ext)  # before the net: a bad path fails fast
    use_device(args.gpu)
    classifier = Classifier(
        args.model_def,
        args.pretrained_model,
        image_dims=image_dims,
        mean=mean,
        input_scale=args.input_scale,
        raw_scale=args.raw_scale,
        channel_swap=channel_swap,
    )
    _log.info("Classifying %d inputs.", len(inputs))
    start = time.time()
    predictions = classifier.predict(inputs, not args.center_only)
    _log.info("Done in %.2f s.", time.time() - start)
    _log.info("Saving results into %s", args.output_file)
    np.save(args.output_file, predictions)
    return predictions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.classify", description="Classify images with a Caffe net."
    )
    parser.add_argument("input_file", help="Input image, directory, or npy.")
    parser.add_argument("output_file", help="Output npy filename.")
    add_model_args(parser)
    parser.add_argument(
        "--center_only",
        action="store_true",
        help="Switch for prediction from center crop alone instead of averaging predictions "
        "across crops (default).",
    )
    parser.add_argument(
        "--images_dim", default="256,256", help="Canonical 'height,width' dimensions of input."
    )
    parser.add_argument("--ext", default="jpg", help="Image file extension for a directory input.")
    args = parser.parse_args(argv)
    return run_reporting_errors(lambda: classify(args), (CaffeError, OSError))


if __name__ == "__main__":
    sys.exit(main())
