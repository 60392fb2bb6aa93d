"""Score image windows with caffe.Detector (pycaffe's python/detect.py):

    python -m caffe.tools.detect INPUT_FILE OUTPUT_FILE --model_def M --pretrained_model W
        [--crop_mode selective_search|list] [--gpu] [--mean_file mean.npy] [--input_scale S]
        [--raw_scale 255] [--channel_swap 2,1,0] [--context_pad 16]

INPUT_FILE is a .txt of image paths (one a line; windows from selective search) or a .csv
with the columns filename,ymin,xmin,ymax,xmax (--crop_mode list: those windows, grouped by
image in order of first appearance). OUTPUT_FILE, by its extension:
- .csv: a header filename,ymin,xmin,ymax,xmax,class0,...,classC-1, then one row per window;
- .h5: datasets `filename` (strings), `window` (n×4 int) and `prediction` (n×C float32).
A K×H×W mean is reduced to its per-channel mean, as windows are warped to the input size.
As in classify, the model files have no default and --mean_file defaults to none.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time

import numpy as np

from caffe.detector import Detector
from caffe.errors import CaffeError
from caffe.tools.exit_status import run_reporting_errors
from caffe.tools.preprocessing_args import add_model_args, load_mean, parse_ints, use_device

_log = logging.getLogger("caffe")
COORD_COLS = ["ymin", "xmin", "ymax", "xmax"]
OUTPUT_KINDS = (".csv", ".h5")


def read_image_list(path: str) -> list[str]:
    """The image paths of a .txt list, blank lines skipped."""
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise CaffeError(f"Could not open file {path}: {e.strerror}") from None


def read_window_csv(path: str) -> list[tuple[str, np.ndarray]]:
    """(filename, n×4 windows) per image of a filename,ymin,xmin,ymax,xmax CSV."""
    grouped: dict[str, list[list[int]]] = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ["filename", *COORD_COLS] if c not in (reader.fieldnames or [])]
            if missing:
                raise CaffeError(f"{path}: missing column(s) {', '.join(missing)}")
            for line, row in enumerate(reader, start=2):
                try:
                    values = [float(row[c]) for c in COORD_COLS]
                except (TypeError, ValueError):
                    values = [0.5]
                if not all(v.is_integer() for v in values):
                    raise CaffeError(f"{path}:{line}: window coordinates must be integers")
                window = [int(v) for v in values]
                grouped.setdefault(row["filename"], []).append(window)
    except OSError as e:
        raise CaffeError(f"Could not open file {path}: {e.strerror}") from None
    return [(name, np.array(windows, dtype=np.int64)) for name, windows in grouped.items()]


def write_csv(path: str, detections: list[dict]) -> None:
    num_classes = len(detections[0]["prediction"]) if detections else 0
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["filename", *COORD_COLS, *(f"class{c}" for c in range(num_classes))])
        for d in detections:
            window = [int(v) for v in d["window"]]
            writer.writerow([d["filename"], *window, *(repr(float(p)) for p in d["prediction"])])


def write_h5(path: str, detections: list[dict]) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset(
            "filename", data=[d["filename"] for d in detections], dtype=h5py.string_dtype()
        )
        f.create_dataset("window", data=np.array([d["window"] for d in detections], dtype=np.int64))
        predictions = np.array([d["prediction"] for d in detections], dtype=np.float32)
        f.create_dataset("prediction", data=predictions)


def read_input(args: argparse.Namespace) -> list[tuple[str, np.ndarray | None]]:
    """(image, windows) pairs from the .csv, or (image, None) from the .txt list."""
    input_file = args.input_file.lower()
    if not input_file.endswith((".txt", ".csv")):
        raise CaffeError(f"{args.input_file}: unknown input file type, not .txt or .csv")
    if args.crop_mode == "list" and not input_file.endswith(".csv"):
        raise CaffeError("--crop_mode list needs a .csv input with the windows")
    if input_file.endswith(".csv"):
        return read_window_csv(args.input_file)
    return [(name, None) for name in read_image_list(args.input_file)]


def make_detector(args: argparse.Namespace) -> Detector:
    channel_swap = parse_ints(args.channel_swap, "--channel_swap") if args.channel_swap else None
    mean = load_mean(args.mean_file)
    if mean is not None and mean.ndim == 3 and mean.shape[1:] != (1, 1):
        mean = mean.mean(axis=(1, 2))  # windows are warped, so a pixel mean would not line up
    use_device(args.gpu)
    return Detector(
        args.model_def,
        args.pretrained_model,
        mean=mean,
        input_scale=args.input_scale,
        raw_scale=args.raw_scale,
        channel_swap=channel_swap,
        context_pad=args.context_pad,
    )


def detect(args: argparse.Namespace) -> list[dict]:
    # Cheap checks of the paths first, so that a typo fails before the net is built.
    output_kind = next((k for k in OUTPUT_KINDS if args.output_file.lower().endswith(k)), None)
    if output_kind is None:
        raise CaffeError(f"{args.output_file}: the output file must end in .csv or .h5")
    _log.info("Loading input...")
    start = time.time()
    images_windows = read_input(args)
    detector = make_detector(args)
    if args.crop_mode == "list":
        detections = detector.detect_windows(images_windows)
    else:
        detections = detector.detect_selective_search([name for name, _ in images_windows])
    _log.info("Processed %d windows in %.3f s.", len(detections), time.time() - start)
    (write_csv if output_kind == ".csv" else write_h5)(args.output_file, detections)
    _log.info("Saved to %s", args.output_file)
    return detections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.detect", description="Score image windows with a Caffe net."
    )
    parser.add_argument("input_file", help="Input txt/csv filename.")
    parser.add_argument("output_file", help="Output h5/csv filename.")
    parser.add_argument(
        "--crop_mode",
        default="selective_search",
        choices=["list", "selective_search"],
        help="How to generate windows for detection.",
    )
    add_model_args(parser)
    parser.add_argument(
        "--context_pad", type=int, default=16, help="Amount of surrounding context to collect."
    )
    args = parser.parse_args(argv)
    return run_reporting_errors(lambda: detect(args), (CaffeError, OSError, ImportError))


if __name__ == "__main__":
    sys.exit(main())
