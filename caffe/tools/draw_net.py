"""Draw a net definition (pycaffe's python/draw_net.py):

    python -m caffe.tools.draw_net NET.prototxt OUT.png [--rankdir LR] [--phase TRAIN|TEST|ALL]
                                   [--display_lrm]

The format follows OUT's extension: .dot/.gv is the DOT text (no Graphviz needed), anything
else (.png, .svg, .pdf, ...) is rendered by Graphviz's `dot`. The net is read as every tool
reads it (parsed strictly, then upgraded), so a bad file fails with its file:line:column.
"""

from __future__ import annotations

import argparse
import logging
import sys

from caffe.draw import RANKDIRS, draw_net_to_file
from caffe.formats.proto_io import read_net_param
from caffe.proto import caffe_pb2
from caffe.tools.exit_status import run_reporting_errors

_log = logging.getLogger("caffe")
PHASES = {"TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST, "ALL": None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.draw_net", description="Draw a network graph."
    )
    parser.add_argument("input_net_proto_file", help="net definition (prototxt)")
    parser.add_argument("output_image_file", help="picture to write; format from the extension")
    parser.add_argument(
        "--rankdir",
        default="LR",
        choices=RANKDIRS,
        help="direction of the graph layout: LR (default), RL, TB or BT",
    )
    parser.add_argument(
        "--phase",
        default="ALL",
        type=str.upper,
        choices=list(PHASES),
        help="draw the layers of TRAIN, TEST or ALL (default) phases",
    )
    parser.add_argument(
        "--display_lrm", action="store_true", help="show lr_mult and decay_mult of each param"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(lambda: draw(args))


def draw(args: argparse.Namespace) -> None:
    net = read_net_param(args.input_net_proto_file)
    _log.info("Drawing net to %s", args.output_image_file)
    draw_net_to_file(
        net,
        args.output_image_file,
        args.rankdir,
        phase=PHASES[args.phase],
        display_lrm=args.display_lrm,
    )


if __name__ == "__main__":
    sys.exit(main())
