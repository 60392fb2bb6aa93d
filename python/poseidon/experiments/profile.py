"""Compute profiles: how long each layer of a net takes on one device, as a JSON file.

A profile is what the compute replay (`poseidon experiment --emulate`) spends per layer and
what the predictor (`poseidon predict`) schedules; it also records how every synchronised
layer looks to the communication cost model (caffe/parallel/layout.py), so that neither needs
to build the net to know what a layer sends. Profiles are measured (`poseidon profile`) or
derived from a published single-device time (poseidon/experiments/profile_derive.py); the
file says which, and from what.

Schema "poseidon-profile/1" (JSON; times in seconds, rates in FLOP/s):

    {"schema": "poseidon-profile/1",
     "model": "vgg19_22k",                 zoo name, or the prototxt's stem
     "net": "models/vgg19_22k/train_val_dummy.prototxt",
     "batch": 32,                          samples per pass (the data layer's first axis)
     "device": {"kind": "cpu" | "cuda" | "derived", "name": str, "threads": int | null},
     "software": {"poseidon": str, "torch": str, "python": str, ...},
     "method": "measured" | "derived",
     "measurement": {"iterations": int, "warmup": int, "statistic": "median", "copies": int,
                     "date": "YYYY-MM-DD"},                       (measured profiles)
     "derivation": {"shares": str, "total_s": float, "source": str, "base_profile": str,
                    "notes": str},                                (derived profiles)
     "iteration_s": float,                 one whole forward+backward pass
     "host_s": float,                      a CPU's host work per iteration (optional, 0)
     "layers": [{"name": str, "type": str,         every layer of the TRAIN net, net order
                 "forward_s": float, "backward_s": float, "update_s": float,
                 "flops_forward": float, "flops_backward": float, "bytes": float,
                 "blobs": [int, ...],               learnable blob sizes (floats)
                 "lr_mults": [float, ...],          each blob's lr_mult once set up
                 "sync": null | {"kind": "FC" | "conv" | "other", "m": int, "n": int,
                                 "rows": int, "floats": int, "late": bool, "start": int},
                 "sfb": null | {"weight_grad_s": float,          InnerProduct layers only
                                "gemm_flops_per_s": {"<rows>": float, ...}}}]}

`update_s` is the solver's update of the parameters the layer owns (SGD with momentum and
weight decay, and data -= diff): device time each iteration besides forward and backward,
0 for a layer without parameters. `sfb.weight_grad_s` is the part of backward_s that
sufficient-factor broadcasting skips (the dW GEMM and the bias sum); `gemm_flops_per_s` is
the device's rate for the rebuild GEMM dW = dYᵀ·X with the given number of rows (K·P1 for
P1 workers), which is how the replay and the predictor charge the rebuild. `host_s` is what
a CPU spends per iteration in the engine's own Python besides all of those, measured by
`poseidon profile` on a CPU (profile_host.py, Note [host work]); a GPU hides it behind its
kernels, so GPU and derived profiles have 0, as has a profile written before the field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "poseidon-profile/1"
METHODS = ("measured", "derived")
SYNC_KINDS = ("FC", "conv", "other")


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the field."""


@dataclass
class SyncShape:
    """A synchronised layer as the cost model sees it (poseidon.sync.layout.SyncLayer)."""

    kind: str
    m: int
    n: int
    rows: int
    floats: int
    late: bool = False
    start: int = 0  # offset of its range in the net's flat gradient buffer (Net.param_diff)


@dataclass
class SfbTiming:
    weight_grad_s: float
    gemm_flops_per_s: dict[int, float]  # rows of the rebuild GEMM -> FLOP/s

    def rebuild_s(self, outputs: int, inputs: int, rows: int) -> float:
        """Seconds of the rebuild dW += dYᵀ·X (outputs × inputs, `rows` rows) plus the bias
        sum, at the measured rate for the nearest row count at or below `rows`."""
        known = sorted(self.gemm_flops_per_s)
        below = [r for r in known if r <= rows]
        rate = self.gemm_flops_per_s[below[-1] if below else known[0]]
        return rebuild_flops(outputs, inputs, rows) / rate


def rebuild_flops(outputs: int, inputs: int, rows: int) -> float:
    """FLOPs of dW += dYᵀ·X (outputs × inputs, `rows` rows) plus the bias sum: what the
    measured and derived rates in `gemm_flops_per_s` are rates of."""
    return 2.0 * outputs * inputs * rows + outputs * rows


@dataclass
class LayerProfile:
    name: str
    type: str
    forward_s: float
    backward_s: float
    flops_forward: float = 0.0
    flops_backward: float = 0.0
    bytes: float = 0.0
    blobs: list[int] = field(default_factory=list)
    sync: SyncShape | None = None
    sfb: SfbTiming | None = None
    update_s: float = 0.0  # the solver's update of the parameters the layer owns
    # Each blob's effective lr_mult once the layer is set up (BatchNorm pins its statistics
    # to 0 whatever the prototxt says): the replay declares the same.
    lr_mults: list[float] = field(default_factory=list)


@dataclass
class Profile:
    model: str
    net: str
    batch: int
    device: dict[str, Any]
    software: dict[str, Any]
    method: str
    layers: list[LayerProfile]
    iteration_s: float
    measurement: dict[str, Any] | None = None
    derivation: dict[str, Any] | None = None
    host_s: float = 0.0  # a CPU's own work per iteration besides the parts (Note [host work])
    path: str = ""  # where it was read from (not saved)

    # ----- queries ------------------------------------------------------------------------
    @property
    def forward_s(self) -> float:
        return sum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(layer.backward_s for layer in self.layers)

    @property
    def model_bytes(self) -> float:
        """The parameters' bytes (float32), as the workers hold and synchronise them."""
        return 4.0 * sum(sum(layer.blobs) for layer in self.layers)

    @property
    def synced_layers(self) -> int:
        """The layers with parameters: those whose gradients are synchronised."""
        return sum(1 for layer in self.layers if layer.blobs)

    def layer(self, name: str) -> LayerProfile:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"profile {self.label()} has no layer {name!r}")

    def label(self) -> str:
        return os.path.basename(self.path) if self.path else f"{self.model}.{self.device_tag()}"

    def device_tag(self) -> str:
        return str(self.device.get("tag") or self.device.get("kind", "device"))

    def check_matches(self, layer_names: Sequence[str], batch: int, net_label: str) -> None:
        """Raise ProfileError unless this profile describes a net with these layers (in this
        order) at this batch."""
        if batch != self.batch:
            raise ProfileError(f"profile {self.label()} was measured at batch {self.batch}, "
                               f"the net {net_label} runs batch {batch}")  # fmt: skip
        mine = [layer.name for layer in self.layers]
        if list(layer_names) != mine:
            missing = [n for n in layer_names if n not in mine]
            extra = [n for n in mine if n not in layer_names]
            detail = []
            if missing:
                detail.append(f"no times for {', '.join(missing[:5])}")
            if extra:
                detail.append(f"layers the net lacks: {', '.join(extra[:5])}")
            if not detail:
                detail.append("the same layers in another order")
            raise ProfileError(f"profile {self.label()} does not match the net {net_label}: "
                               + "; ".join(detail))  # fmt: skip

    # ----- files ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA}
        for key, value in asdict(self).items():
            if key == "path" or (key in ("measurement", "derivation") and value is None):
                continue
            out[key] = value
        for layer in out["layers"]:
            if layer["sfb"] is not None:
                rates = layer["sfb"]["gemm_flops_per_s"]
                layer["sfb"]["gemm_flops_per_s"] = {str(k): v for k, v in sorted(rates.items())}
        return out

    def save(self, path: str) -> None:
        """Write atomically (a reader never sees half a file)."""
        text = json.dumps(self.to_json(), indent=1) + "\n"
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)


def load_profile(path: str) -> Profile:
    """Read and check a profile; ProfileError names the file and the bad field."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ProfileError(f"cannot read profile {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
    profile = profile_from_json(data, path)
    profile.path = path
    return profile


def profile_from_json(data: Any, where: str) -> Profile:
    reader = _Reader(where)
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile is a JSON object")
    if data.get("schema") != SCHEMA:
        raise ProfileError(f"{where}: schema {data.get('schema')!r}, want {SCHEMA!r}")
    method = reader.choice(data, "method", METHODS)
    layers_data = reader.get(data, "layers", list)
    if not layers_data:
        raise ProfileError(f"{where}: field 'layers' is empty")
    layers = [_layer(reader, item, i) for i, item in enumerate(layers_data)]
    return Profile(
        model=reader.get(data, "model", str),
        net=reader.get(data, "net", str),
        batch=reader.positive_int(data, "batch"),
        device=reader.get(data, "device", dict),
        software=reader.get(data, "software", dict),
        method=method,
        layers=layers,
        iteration_s=reader.seconds(data, "iteration_s"),
        measurement=data.get("measurement") if method == "measured" else None,
        derivation=data.get("derivation") if method == "derived" else None,
        host_s=reader.seconds(data, "host_s") if "host_s" in data else 0.0,
    )


def _layer(reader: _Reader, item: Any, index: int) -> LayerProfile:
    field_of = f"layers[{index}]"
    if not isinstance(item, dict):
        raise ProfileError(f"{reader.where}: {field_of} is not an object")
    sub = reader.nested(f"{field_of} ({item.get('name', '?')})")
    sync = None
    if item.get("sync") is not None:
        s = sub.get(item, "sync", dict)
        sync = SyncShape(
            kind=sub.choice(s, "kind", SYNC_KINDS),
            m=sub.positive_int(s, "m"),
            n=sub.positive_int(s, "n"),
            rows=sub.positive_int(s, "rows"),
            floats=sub.count(s, "floats"),
            late=bool(s.get("late", False)),
            start=sub.count(s, "start"),
        )
    sfb = None
    if item.get("sfb") is not None:
        s = sub.get(item, "sfb", dict)
        rates = sub.get(s, "gemm_flops_per_s", dict)
        try:
            parsed = {int(k): float(v) for k, v in rates.items()}
        except (TypeError, ValueError):
            raise ProfileError(f"{sub.where}: sfb.gemm_flops_per_s wants "
                               "{rows: FLOP/s} with integer rows") from None  # fmt: skip
        if not parsed or min(parsed.values()) <= 0 or not all(map(math.isfinite, parsed.values())):
            raise ProfileError(f"{sub.where}: sfb.gemm_flops_per_s needs positive rates")
        sfb = SfbTiming(sub.seconds(s, "weight_grad_s"), parsed)
    blobs = item.get("blobs", [])
    if not isinstance(blobs, list) or not all(isinstance(b, int) and b >= 0 for b in blobs):
        raise ProfileError(f"{sub.where}: 'blobs' wants a list of blob sizes (floats)")
    return LayerProfile(
        name=sub.get(item, "name", str),
        type=sub.get(item, "type", str),
        forward_s=sub.seconds(item, "forward_s"),
        backward_s=sub.seconds(item, "backward_s"),
        update_s=sub.seconds(item, "update_s") if "update_s" in item else 0.0,
        lr_mults=_lr_mults(sub, item, len(blobs)),
        flops_forward=sub.number(item, "flops_forward", 0.0),
        flops_backward=sub.number(item, "flops_backward", 0.0),
        bytes=sub.number(item, "bytes", 0.0),
        blobs=blobs,
        sync=sync,
        sfb=sfb,
    )


def _lr_mults(reader: _Reader, item: dict, blobs: int) -> list[float]:
    values = item.get("lr_mults", [])
    if not isinstance(values, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    ):
        raise ProfileError(f"{reader.where}: 'lr_mults' wants a list of numbers")
    if values and len(values) != blobs:
        raise ProfileError(f"{reader.where}: {len(values)} lr_mults for {blobs} blobs")
    return [float(v) for v in values]


class _Reader:
    """Typed field access with errors that name the file and the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def nested(self, what: str) -> _Reader:
        return _Reader(f"{self.where}: {what}")

    def get(self, data: dict, key: str, kind: type) -> Any:
        if key not in data:
            raise ProfileError(f"{self.where}: missing field {key!r}")
        value = data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProfileError(f"{self.where}: field {key!r} is {type(value).__name__}, "
                               f"want {kind.__name__}")  # fmt: skip
        return value

    def choice(self, data: dict, key: str, allowed: Sequence[str]) -> str:
        value = self.get(data, key, str)
        if value not in allowed:
            raise ProfileError(f"{self.where}: field {key!r} is {value!r}, want one of "
                               f"{', '.join(allowed)}")  # fmt: skip
        return value

    def number(self, data: dict, key: str, default: float | None = None) -> float:
        if key not in data and default is not None:
            return default
        value = data.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ProfileError(f"{self.where}: field {key!r} wants a finite number, "
                               f"got {value!r}")  # fmt: skip
        return float(value)

    def seconds(self, data: dict, key: str) -> float:
        value = self.number(data, key)
        if value < 0:
            raise ProfileError(f"{self.where}: field {key!r} is negative ({value})")
        return value

    def count(self, data: dict, key: str) -> int:
        value = self.get(data, key, int)
        if value < 0:
            raise ProfileError(f"{self.where}: field {key!r} is negative ({value})")
        return value

    def positive_int(self, data: dict, key: str) -> int:
        value = self.get(data, key, int)
        if value < 1:
            raise ProfileError(f"{self.where}: field {key!r} is {value} (want >= 1)")
        return value
