"""The solver's log lines, worded and formatted exactly as Caffe prints them
(docs/caffe_format.md §7.1).

Log parsers (parse_log.py, parse_log.sh) match this wording and split on its spaces, so
the 4-space indents and the number formatting matter. Caffe streams float values through
a C++ ostream with default settings: `%g` with 6 significant digits, of the float32
value (its Dtype), which `cpp_float` reproduces.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

_log = logging.getLogger("caffe")


def cpp_float(value: float) -> str:
    """A float32 value as `std::ostream << value` prints it (0.01, 1e-05, 2.30259, inf)."""
    return f"{float(np.float32(value)):g}"


def loss_suffix(loss_weight: float, value: float) -> str:
    """` (* w = w·v loss)` for a weighted output; nothing for an unweighted one."""
    if not loss_weight:
        return ""
    product = np.float32(loss_weight) * np.float32(value)
    return f" (* {cpp_float(loss_weight)} = {cpp_float(product)} loss)"


def log_outputs(
    kind: str, names: Sequence[str], values: Sequence[np.ndarray], loss_weights: Sequence[float]
) -> None:
    """`    <kind> net output #k: <name> = v [(* w = x loss)]`, one line per output element.

    `k` counts elements over all outputs, as Caffe does for multi-element outputs.
    """
    index = 0
    for name, array, weight in zip(names, values, loss_weights):
        for v in np.asarray(array, dtype=np.float32).reshape(-1):
            _log.info(
                "    %s net output #%d: %s = %s%s",
                kind, index, name, cpp_float(v), loss_suffix(weight, v),
            )  # fmt: skip
            index += 1
