"""Derive a GPU profile that no one here can measure (`poseidon profile --derive TARGET`).

The paper ran on Maxwell GTX Titan X GPUs; none is at hand. Its per-layer times are derived,
not measured: each layer's share of the whole is a roofline estimate on the target,
max(FLOPs / peak FLOP/s, bytes / memory bandwidth) over the layer's forward + backward
(FLOPs and bytes from flops.py, carried by the base profile), and one factor scales every
layer so that the whole forward+backward equals a published single-GPU time of the same
model (docs/published_times.md §1). Nothing is fitted to the paper's scaling results.

Adding a GPU is a row in TARGETS and a row per model in PUBLISHED_TIMES.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import platform
from dataclasses import dataclass

from poseidon.experiments.flops import DATA_TYPES
from poseidon.experiments.profile import LayerProfile, Profile, SfbTiming, rebuild_flops

EXPERIMENTS_MD = "docs/published_times.md §1"


@dataclass(frozen=True)
class TargetDevice:
    tag: str
    name: str
    peak_flops_per_s: float  # fp32, multiply-add = 2 FLOPs
    memory_bytes_per_s: float
    source: str


TARGETS = {
    # GM200 spec sheet: 3072 CUDA cores × 2 FLOP per fused multiply-add × 1000 MHz base clock
    # = 6.14 TFLOP/s fp32; 384-bit GDDR5 at 7 Gbps = 336.5 GB/s. The base clock, not the
    # 1075 MHz boost: the shares only need the ratio of the two rates to be right.
    "titanx-maxwell": TargetDevice(
        tag="titanx-maxwell",
        name="NVIDIA GeForce GTX Titan X (Maxwell), derived",
        peak_flops_per_s=3072 * 2 * 1.0e9,
        memory_bytes_per_s=336.5e9,
        source="NVIDIA GeForce GTX TITAN X specifications (GM200, 2015): 3072 CUDA cores, "
        "1000 MHz base clock, 336.5 GB/s memory bandwidth",
    ),
    # Today's GPUs (docs/published_times.md §1b), each at the rate of the regime its
    # published rows ran in: true FP32 on the V100 (it has no TF32), TF32 tensor cores on the
    # A100 and the H100 (their frameworks' default for "FP32" training). Dense rates at the
    # boost clock.
    "v100": TargetDevice(
        tag="v100",
        name="NVIDIA Tesla V100-SXM (Volta), derived",
        peak_flops_per_s=15.7e12,
        memory_bytes_per_s=900e9,
        source="NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOP/s FP32 (5120 CUDA cores x 2 x "
        "1530 MHz), 900 GB/s HBM2",
    ),
    "a100": TargetDevice(
        tag="a100",
        name="NVIDIA A100 40GB (Ampere), TF32, derived",
        peak_flops_per_s=156e12,
        memory_bytes_per_s=1555e9,
        source="NVIDIA A100 Tensor Core GPU datasheet: 156 TFLOP/s TF32 dense (SXM4 and PCIe "
        "alike), 1,555 GB/s HBM2 (40 GB)",
    ),
    "h100": TargetDevice(
        tag="h100",
        name="NVIDIA H100 SXM5 80GB (Hopper), TF32, derived",
        peak_flops_per_s=494.7e12,
        memory_bytes_per_s=3.35e12,
        source="NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOP/s TF32 with 2:4 sparsity, "
        "494.7 dense (the Hopper whitepaper's table), 3.35 TB/s HBM3",
    ),
}


@dataclass(frozen=True)
class PublishedTime:
    """A published time per iteration (forward + backward) and how it maps to a profile.

    `seconds` at `batch` becomes seconds × scale × profile_batch / batch: linear in the
    batch (a GPU this size is saturated at batch 16 by these nets, so time grows with the
    samples), times `scale` for another device. With `rate_of` set instead, the total is
    the base profile's FLOPs at the effective FLOP rate of that row (seconds is unused)."""

    profile_batch: int  # the batch of the derived profile and of its base profile
    source: str  # the exact line(s) of docs/published_times.md §1
    software: str
    why: str
    seconds: float = 0.0
    batch: int = 0
    scale: float = 1.0
    rate_of: str = ""  # another model of this target whose FLOP rate this one borrows


# The rows of docs/published_times.md §1b that today's GPUs take their times from, whole.
V100_TF22 = (
    "| V100-SXM3-32GB, TensorFlow 2.2, tf_cnn_benchmarks, synthetic data | Inception-V3 "
    "/ ResNet-50 / VGG-16, batch 192 | FP32 273.17 / 432.16 / 249.19 img/s | "
    "lambdal/lambda-tensorflow-benchmark "
    'logs/Platinum-Tesla_V100-SXM3-32GB_HP16_TF2_2.logs (the "V100 32GB" row of '
    "tf-train-throughput-fp32.csv) |"
)
A100_TF115 = (
    "| A100-PCIE-40GB, TensorFlow 1.15.4, CUDA 11.1, tf_cnn_benchmarks, synthetic data | "
    'Inception-V3 / ResNet-50 / VGG-16, batch 224 | "FP32" 627.35 / 953.43 / 503.61 '
    "img/s (8 GPUs: 4817.20 / 7197.02 / 4073.72) | lambdal/lambda-tensorflow-benchmark "
    'logs/7502-A100-PCIE-40GB.logs (the "A100 40GB PCIe" row of '
    "tf-train-throughput-fp32.csv) |"
)
A100_PYTORCH = (
    "| A100-SXM4-80GB, PyTorch NGC container, DeepLearningExamples ConvNets, synthetic "
    'data | ResNet-50 v1.5, batch 640 "FP32" / 1280 AMP | "FP32" 1066 img/s; AMP 1582 '
    "img/s | lambdal/deeplearning-benchmark "
    "pytorch/csv_v1_v2/pytorch-train-throughput-fp32.csv and -fp16.csv |"
)
H100_PYTORCH = (
    "| H100-SXM5-80GB (Lambda Cloud), PyTorch NGC container, DeepLearningExamples "
    'ConvNets, synthetic data | ResNet-50 v1.5, batch 640 "FP32" / 1280 AMP | "FP32" '
    "1895 img/s; AMP 2791 img/s | lambdal/deeplearning-benchmark "
    "pytorch/csv_v1_v2/pytorch-train-throughput-fp32.csv and -fp16.csv |"
)
# The H100's Inception-V3 and VGG-16: the A100's run times the one H100/A100 ratio published
# on one benchmark for both.
H100_BY_RATIO = A100_TF115 + " + " + A100_PYTORCH + " + " + H100_PYTORCH
NO_TIME = "no published time; the rate of "


JCJOHNSON = "Maxwell GTX Titan X, cuDNN 5.1, Torch (jcjohnson/cnn-benchmarks)"
PUBLISHED_TIMES: dict[tuple[str, str], PublishedTime] = {
    # The paper's own Caffe on one Titan X: the most direct number there is (its unit is
    # inferred from a plotting script, which the notes say).
    ("titanx-maxwell", "vgg19_22k"): PublishedTime(
        seconds=0.93,
        batch=32,
        profile_batch=32,
        source="| Poseidon's Caffe, one Titan X (the paper's setup) | VGG19-22K, batch 32 | "
        "≈ 0.93 s (a plotting script of the paper's figure holds 18.5 per 20 iterations; "
        "the unit is inferred) | public plotting script |",
        software="Poseidon's Caffe (the paper's engine)",
        why="The paper's own engine and GPU; the seconds unit of its plotting script is inferred.",
    ),
    # cuDNN 5.1: the library of the paper's time (2016-17); cuDNN 4 took 418 ms (1.9x), so
    # the library matters more than anything else in this row.
    ("titanx-maxwell", "vgg19"): PublishedTime(
        seconds=0.225,
        batch=16,
        profile_batch=32,
        source="| Maxwell GTX Titan X, cuDNN 5.1, Torch | VGG-19, batch 16 | "
        "225 ms (fwd 74, bwd 151) | jcjohnson/cnn-benchmarks README |",
        software=JCJOHNSON,
        why="cuDNN 5.1 on the same GPU model (Torch, not Caffe).",
    ),
    ("titanx-maxwell", "resnet152"): PublishedTime(
        seconds=0.345,
        batch=16,
        profile_batch=32,
        source="| same | ResNet-152, batch 16 | 345 ms (fwd 124, bwd 221) | same |",
        software=JCJOHNSON,
        why="'same' in the source line: Maxwell GTX Titan X, cuDNN 5.1, Torch, "
        "jcjohnson/cnn-benchmarks README.",
    ),
    # The paper trains GoogLeNet at batch 128 per GPU.
    ("titanx-maxwell", "googlenet"): PublishedTime(
        seconds=0.062,
        batch=16,
        profile_batch=128,
        source="| same | GoogLeNet (Inception-V1), batch 16 | 62 ms | same |",
        software=JCJOHNSON,
        why="'same' in the source line: Maxwell GTX Titan X, cuDNN 5.1, Torch, "
        "jcjohnson/cnn-benchmarks README; batch 128 is the paper's GoogLeNet batch.",
    ),
    # No Maxwell time is published; a P100's, slowed by the Pascal/Maxwell Titan X ratio
    # (midpoint of 1.47-1.60), taking a P100 as fast as a Pascal Titan X in fp32 (10.6 vs
    # 11.0 TFLOP/s peak).
    ("titanx-maxwell", "inception_v3"): PublishedTime(
        seconds=0.250,
        batch=32,
        profile_batch=32,
        scale=1.535,
        source="| P100, TensorFlow, synthetic data | Inception-V3, batch 32 | "
        "128 img/s (250 ms) | tensorflow performance/benchmarks.md | + "
        "| Pascal Titan X vs Maxwell Titan X | — | 1.47–1.60× faster | same |",
        software="TensorFlow on a P100 (tensorflow performance/benchmarks.md), x 1.535",
        why="A P100 time times 1.535, the midpoint of the 1.47-1.60x Pascal/Maxwell Titan X "
        "ratio, assuming a P100 is about a Pascal Titan X in fp32.",
    ),
    # Nothing published: the smallest published net's effective FLOP rate (GoogLeNet,
    # cuDNN 5.1) applied to its FLOPs. A net this small keeps a GPU far less busy, so this
    # is a lower bound on its time.
    ("titanx-maxwell", "cifar10_quick"): PublishedTime(
        profile_batch=100,
        rate_of="googlenet",
        source="no published time; the rate of | same | GoogLeNet (Inception-V1), batch 16 | "
        "62 ms | same |",
        software=JCJOHNSON,
        why="No published time: its FLOPs at the effective FLOP rate of GoogLeNet at batch 16 "
        "(cuDNN 5.1, 62 ms; GoogLeNet's training FLOPs with its two auxiliary classifiers, "
        "from flops.py). A net this small uses a GPU less well: a lower bound.",
    ),
    # ----- today's GPUs (docs/published_times.md §1b) ----------------------------------
    # The V100: one TensorFlow 2.2 tf_cnn_benchmarks run of three zoo models at batch 192,
    # true FP32. VGG19-22K borrows VGG-16's FLOP rate (no VGG-19 time is published for any
    # of these GPUs).
    ("v100", "inception_v3"): PublishedTime(
        seconds=192 / 273.17,
        batch=192,
        profile_batch=32,
        source=V100_TF22,
        software="TensorFlow 2.2, tf_cnn_benchmarks, FP32, on a V100-SXM3-32GB",
        why="The one published V100 run with all three models in one benchmark (synthetic "
        "data, FP32: the V100 has no TF32); SXM3 clocks a little above the SXM2 target.",
    ),
    ("v100", "resnet50"): PublishedTime(
        seconds=192 / 432.16,
        batch=192,
        profile_batch=32,
        source=V100_TF22,
        software="TensorFlow 2.2, tf_cnn_benchmarks, FP32, on a V100-SXM3-32GB",
        why="The same run as Inception-V3's (ResNet-50 there is v1, the zoo's).",
    ),
    ("v100", "vgg16"): PublishedTime(
        seconds=192 / 249.19,
        batch=192,
        profile_batch=32,
        source=V100_TF22,
        software="TensorFlow 2.2, tf_cnn_benchmarks, FP32, on a V100-SXM3-32GB",
        why="The same run as Inception-V3's.",
    ),
    ("v100", "vgg19_22k"): PublishedTime(
        profile_batch=32,
        rate_of="vgg16",
        source=NO_TIME + V100_TF22,
        software="TensorFlow 2.2, tf_cnn_benchmarks, FP32, on a V100-SXM3-32GB",
        why="No VGG-19 time is published for the V100: VGG19-22K's FLOPs at VGG-16's "
        "effective FLOP rate in the same run (the same convolutions, plus two and a "
        "larger classifier).",
    ),
    # The A100: TensorFlow 1.15 (NVIDIA's build, TF32 on by default on Ampere) on the PCIe
    # card. The SXM4 card's TensorFlow 2.3 rows are slower: upstream TensorFlow 2.3 had no
    # TF32, so they are true FP32, another regime than the V100-to-H100 comparison wants.
    ("a100", "inception_v3"): PublishedTime(
        seconds=224 / 627.35,
        batch=224,
        profile_batch=32,
        source=A100_TF115,
        software="TensorFlow 1.15.4 (TF32), tf_cnn_benchmarks, on an A100-PCIE-40GB",
        why="The one published A100 run with all three models in one benchmark in TF32 "
        "(synthetic data); the PCIe card has the SXM4's peak rates at a lower power limit.",
    ),
    ("a100", "resnet50"): PublishedTime(
        seconds=224 / 953.43,
        batch=224,
        profile_batch=32,
        source=A100_TF115,
        software="TensorFlow 1.15.4 (TF32), tf_cnn_benchmarks, on an A100-PCIE-40GB",
        why="The same run as Inception-V3's.",
    ),
    ("a100", "vgg16"): PublishedTime(
        seconds=224 / 503.61,
        batch=224,
        profile_batch=32,
        source=A100_TF115,
        software="TensorFlow 1.15.4 (TF32), tf_cnn_benchmarks, on an A100-PCIE-40GB",
        why="The same run as Inception-V3's.",
    ),
    ("a100", "vgg19_22k"): PublishedTime(
        profile_batch=32,
        rate_of="vgg16",
        source=NO_TIME + A100_TF115,
        software="TensorFlow 1.15.4 (TF32), tf_cnn_benchmarks, on an A100-PCIE-40GB",
        why="No VGG-19 time is published for the A100: VGG19-22K's FLOPs at VGG-16's "
        "effective FLOP rate in the same run.",
    ),
    # The H100: only ResNet-50 is published. Inception-V3 and VGG-16 are the A100 run's
    # times divided by the H100/A100 ratio of one benchmark measured on both (Lambda's
    # PyTorch ResNet-50, "FP32" = TF32: 1895 / 1066 img/s), as the Titan X's Inception-V3
    # is a P100's times a published ratio.
    ("h100", "resnet50"): PublishedTime(
        seconds=640 / 1895,
        batch=640,
        profile_batch=32,
        source=H100_PYTORCH,
        software="PyTorch NGC, DeepLearningExamples ConvNets (TF32), on an H100-SXM5-80GB",
        why="The only published single-H100 training number of a zoo model (ResNet-50 v1.5, "
        "synthetic data, 'FP32' = TF32).",
    ),
    ("h100", "inception_v3"): PublishedTime(
        seconds=224 / 627.35,
        batch=224,
        profile_batch=32,
        scale=1066 / 1895,
        source=H100_BY_RATIO,
        software="TensorFlow 1.15.4 (TF32) on an A100-PCIE-40GB, x the H100/A100 ratio of "
        "PyTorch ResNet-50 (TF32)",
        why="No H100 Inception-V3 time is published: the A100's, x 1066/1895, the A100/H100 "
        "time ratio of the one benchmark published on both (ResNet-50, the same software and "
        "precision).",
    ),
    ("h100", "vgg16"): PublishedTime(
        seconds=224 / 503.61,
        batch=224,
        profile_batch=32,
        scale=1066 / 1895,
        source=H100_BY_RATIO,
        software="TensorFlow 1.15.4 (TF32) on an A100-PCIE-40GB, x the H100/A100 ratio of "
        "PyTorch ResNet-50 (TF32)",
        why="No H100 VGG time is published: the A100's VGG-16, x 1066/1895 (as Inception-V3).",
    ),
    ("h100", "vgg19_22k"): PublishedTime(
        profile_batch=32,
        rate_of="vgg16",
        source=NO_TIME + H100_BY_RATIO,
        software="TensorFlow 1.15.4 (TF32) on an A100-PCIE-40GB, x the H100/A100 ratio of "
        "PyTorch ResNet-50 (TF32)",
        why="No VGG-19 time is published for the H100: VGG19-22K's FLOPs at the derived H100 "
        "VGG-16's effective FLOP rate.",
    ),
}


def derive_profile(base: Profile, target: str) -> Profile:
    """A profile of `base`'s net on `target`: see the module docstring."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    device = TARGETS[target]
    where = base.path or base.label()
    row = PUBLISHED_TIMES.get((target, base.model))
    if row is None:
        known = sorted(model for tag, model in PUBLISHED_TIMES if tag == target)
        raise ValueError(
            f"{where}: no published {target} time for model "
            f"{base.model!r}; known: {', '.join(known)}"
        )
    if base.batch != row.profile_batch:
        raise ValueError(
            f"{where} was measured at batch {base.batch}; the published "
            f"{base.model} time maps to batch {row.profile_batch}: derive from a "
            f"profile measured at batch {row.profile_batch}"
        )
    total_s, mapping = _published_total(base, row, target)
    raw = [_roofline(layer, device) for layer in base.layers]
    updates = [_update_roofline(layer, device) for layer in base.layers]
    roofline_s = sum(f + b for f, b in raw) + sum(updates)
    if roofline_s <= 0:
        raise ValueError(f"{where}: no FLOPs or bytes to share the time by")
    factor = total_s / roofline_s
    layers = [
        _derived_layer(layer, forward * factor, backward * factor, update * factor, device, factor)
        for layer, (forward, backward), update in zip(base.layers, raw, updates)
    ]
    notes = (
        f"{row.why} {mapping} Shares: max(FLOPs / {device.peak_flops_per_s:.4g} FLOP/s, "
        f"bytes / {device.memory_bytes_per_s:.4g} B/s) per layer over forward+backward, split "
        "between forward and backward by FLOPs (a layer without FLOPs: by the base profile's "
        "measured split; a data layer: all forward); a layer's solver update: "
        f"{UPDATE_ACCESSES} float accesses per parameter at the memory bandwidth (Caffe's GPU "
        f"SGD); every time x {factor:.4g} so that the total (updates included) is the "
        f"published time (the roofline alone says {roofline_s:.4g} s). sfb: the rebuild "
        "GEMM dW += dY'X (+ bias sum) by the same roofline and factor at K x P rows, P = "
        f"{', '.join(map(str, REBUILD_WORKERS))}; weight_grad_s is it at K rows."
    )
    return Profile(
        model=base.model,
        net=base.net,
        batch=base.batch,
        device={"kind": "derived", "name": device.name, "threads": None, "tag": device.tag},
        software={
            "poseidon": _version(),
            "python": platform.python_version(),
            "published": row.software,
        },
        method="derived",
        layers=layers,
        iteration_s=total_s,
        derivation={
            "shares": "roofline (FLOPs, bytes)",
            "total_s": total_s,
            "source": f"{EXPERIMENTS_MD}: {row.source}",
            "base_profile": where,
            "notes": notes,
            "target": {
                "peak_flops_per_s": device.peak_flops_per_s,
                "memory_bytes_per_s": device.memory_bytes_per_s,
                "spec": device.source,
            },
            "roofline_s": roofline_s,
        },
    )


def _published_total(base: Profile, row: PublishedTime, target: str) -> tuple[float, str]:
    """Seconds per iteration at the profile's batch, and a sentence on how."""
    if row.rate_of:
        reference = PUBLISHED_TIMES[(target, row.rate_of)]
        rate = reference_flops(row.rate_of, reference.batch) / (reference.seconds * reference.scale)
        flops = sum(layer.flops_forward + layer.flops_backward for layer in base.layers)
        return flops / rate, (
            f"{row.rate_of} at batch {reference.batch} runs {rate:.4g} FLOP/s in "
            f"{reference.seconds * 1e3:g} ms; {flops:.4g} FLOPs per iteration at batch "
            f"{base.batch} at that rate."
        )
    total = row.seconds * row.scale * row.profile_batch / row.batch
    how = f"Published {row.seconds * 1e3:g} ms at batch {row.batch}"
    if row.scale != 1.0:
        how += f", x {row.scale:g}"
    if row.batch != row.profile_batch:
        how += f", scaled linearly in batch to {row.profile_batch}"
    return total, f"{how}: {total:.6g} s."


@functools.cache
def reference_flops(model: str, batch: int) -> float:
    """Training FLOPs per iteration of a zoo model at `batch` (flops.py on its dummy net,
    built at batch 1: every count is linear in the batch)."""
    from poseidon.experiments.flops import net_costs
    from poseidon.experiments.profile_measure import build_net
    from poseidon.experiments.resolve import resolve_model

    net = build_net(resolve_model(model)[1], 1)
    return batch * sum(c.flops_forward + c.flops_backward for c in net_costs(net))


def _roofline(layer: LayerProfile, device: TargetDevice) -> tuple[float, float]:
    """(forward, backward) seconds of one layer at the target's peak rates."""
    flops = layer.flops_forward + layer.flops_backward
    seconds = max(flops / device.peak_flops_per_s, layer.bytes / device.memory_bytes_per_s)
    if flops > 0:
        forward_share = layer.flops_forward / flops
    elif layer.type not in DATA_TYPES and layer.forward_s + layer.backward_s > 0:
        forward_share = layer.forward_s / (layer.forward_s + layer.backward_s)
    else:
        forward_share = 1.0
    return seconds * forward_share, seconds * (1.0 - forward_share)


# Float reads and writes per parameter of one SGD step on a GPU, as Caffe runs it: weight
# decay (an axpy: 3), the fused momentum update (read g and h, write h and g: 4) and
# Net::Update (an axpy: 3). Memory-bound: bandwidth decides.
UPDATE_ACCESSES = 10


def _update_roofline(layer: LayerProfile, device: TargetDevice) -> float:
    """Seconds of the solver update of the parameters `layer` owns (measured: update_s > 0
    in the base profile; a sharer owns none) at the target's memory bandwidth."""
    if layer.update_s <= 0:
        return 0.0
    return UPDATE_ACCESSES * 4.0 * sum(layer.blobs) / device.memory_bytes_per_s


def _derived_layer(
    base: LayerProfile,
    forward_s: float,
    backward_s: float,
    update_s: float,
    device: TargetDevice,
    factor: float,
) -> LayerProfile:
    layer = copy.deepcopy(base)
    layer.forward_s, layer.backward_s, layer.update_s = forward_s, backward_s, update_s
    layer.sfb = None
    sync = base.sync
    if base.sfb is not None and sync is not None and backward_s > 0:
        # The rebuild GEMM at K·P rows by the same roofline and factor as every layer: at
        # small K it is memory-bound (it reads and writes the whole dW), at K·P compute-bound.
        rates = {}
        for workers in REBUILD_WORKERS:
            rows = sync.rows * workers
            seconds = _rebuild_roofline(sync.m, sync.n, rows, device) * factor
            rates[rows] = rebuild_flops(sync.m, sync.n, rows) / seconds
        weight_grad_s = min(backward_s, rebuild_flops(sync.m, sync.n, sync.rows) / rates[sync.rows])
        layer.sfb = SfbTiming(weight_grad_s, rates)
    return layer


# Worker counts whose rebuild rate a derived profile states (rows = K × P); beyond the last,
# the predictor and the replay use the last (the GEMM is compute-bound long before).
REBUILD_WORKERS = (1, 2, 4, 8, 16, 32, 64, 128)


def _rebuild_roofline(outputs: int, inputs: int, rows: int, device: TargetDevice) -> float:
    """dW += dYᵀ·X and the bias sum at the target's peaks: FLOPs, or bytes (read and
    write dW, read dY twice and X once, read and write the bias)."""
    flops = rebuild_flops(outputs, inputs, rows)
    data = 4.0 * (2 * outputs * inputs + rows * (2 * outputs + inputs) + 2 * outputs)
    return max(flops / device.peak_flops_per_s, data / device.memory_bytes_per_s)


def _version() -> str:
    try:
        return importlib.metadata.version("poseidon-caffe")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
