"""Parsing the experiment commands' quantities: link bandwidths and node lists."""

from __future__ import annotations

import re

_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z/]*)\s*$", re.IGNORECASE)
# Unit -> bits per second. "GbE" is the Ethernet name of a Gbit/s link.
_BANDWIDTH_UNITS = {
    "bit": 1.0,
    "bps": 1.0,
    "b/s": 1.0,
    "bit/s": 1.0,
    "kbit": 1e3,
    "kbps": 1e3,
    "kbit/s": 1e3,
    "kb/s": 1e3,
    "mbit": 1e6,
    "mbps": 1e6,
    "mbit/s": 1e6,
    "mb/s": 1e6,
    "mbe": 1e6,
    "gbit": 1e9,
    "gbps": 1e9,
    "gbit/s": 1e9,
    "gb/s": 1e9,
    "gbe": 1e9,
    "g": 1e9,
    "tbit": 1e12,
    "tbps": 1e12,
    "tbit/s": 1e12,
}


def parse_bandwidth(text: str) -> float:
    """'10gbit', '10GbE', '25 Gbit/s', '100mbit', '1.5e9bps' -> bits per second.
    Raises ValueError naming the text and the units it knows."""
    match = _BANDWIDTH.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _BANDWIDTH_UNITS:
        raise ValueError(
            f"bandwidth {text!r}: want a number and a unit, e.g. 10gbit, 10GbE, 25gbit/s, "
            "100mbit (units: bit, kbit, mbit, gbit, tbit, GbE, bps)"
        )
    value = float(match.group(1)) * _BANDWIDTH_UNITS[unit]
    if value <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return value


def format_bandwidth(bps: float) -> str:
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


def parse_nodes(text: str) -> list[int]:
    """'1,2,4,8,16' -> [1, 2, 4, 8, 16] (sorted, unique); every count >= 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(
            f"nodes {text!r}: want node counts separated by commas, e.g. 1,2,4,8"
        ) from None
    if not values:
        raise ValueError(f"nodes {text!r}: no node count given")
    bad = [v for v in values if v < 1]
    if bad:
        raise ValueError(f"nodes {text!r}: a cluster has at least 1 node (got {bad[0]})")
    return sorted(set(values))


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """'a,b' -> ['a', 'b'] in the given order, each one of `allowed`."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise ValueError(
            f"{what} {unknown[0] if unknown else text!r}: want one or more of {', '.join(allowed)}"
        )
    return list(dict.fromkeys(values))


def check_chunk_bytes(chunk_bytes: int) -> int:
    """`--chunk-bytes` of experiment and predict: a PS chunk holds whole floats."""
    if chunk_bytes < 4 or chunk_bytes % 4:
        raise ValueError(f"--chunk-bytes {chunk_bytes} (want a positive multiple of 4)")
    return chunk_bytes
