"""The plan printer: its core on hand-made specs (the worked table of docs/paper.md §4), the
prototxt through the engine, the flags, the README's example (fast and small: the net is
built shapes-only), and the CLI."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from poseidon import _C
from poseidon.cli import COMMANDS, build_parser, main
from poseidon.plan import format_plan, layer_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 8 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "fc1" type: "InnerProduct" bottom: "conv1" top: "fc1"
        inner_product_param { num_output: 512 } }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2"
        inner_product_param { num_output: 2 } }
"""


def test_worked_table_rows() -> None:
    specs = [
        layer_spec(0, "fc6", "FC", 4096, 25088, 32, 4096 * 25088 + 4096),
        layer_spec(1, "fc7", "FC", 4096, 4096, 32, 4096 * 4096 + 4096),
        layer_spec(2, "fc8", "FC", 21841, 4096, 32, 21841 * 4096 + 21841),
        layer_spec(3, "fc", "FC", 1000, 2048, 32, 1000 * 2048 + 1000),
        layer_spec(4, "conv", "conv", 512, 4608, 32, 512 * 4608 + 512),
    ]
    plan = _C.make_plan(specs, 16, 16)
    mb = [(round(lp.cost.ps_bytes / 1e6, 1), round(lp.cost.sfb_bytes / 1e6, 1))
          for lp in plan.layers]  # fmt: skip
    assert mb[:4] == [(1541.4, 112.1), (251.7, 31.5), (1341.9, 99.6), (30.7, 11.7)]
    assert [lp.scheme for lp in plan.layers] == [_C.Scheme.SFB] * 4 + [_C.Scheme.PS]
    text = format_plan(plan)
    assert re.search(r"fc6\s+FC\s+4096x25088\s+32\s+1541\.41\s+112\.07\s+SFB", text)
    # SFB does not apply to convolutions.
    assert re.search(r"conv\s+conv\s+512x4608\s+32\s+\S+\s+-\s+PS", text)
    # GoogLeNet's classifier at K = 128 stays on the PS at 16 workers.
    (g,) = _C.make_plan([layer_spec(0, "loss3", "FC", 1000, 1024, 128, 1024 * 1000)], 16, 16).layers
    assert g.scheme == _C.Scheme.PS and g.cost.sfb_bytes > g.cost.ps_bytes


def test_prototxt_through_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "tiny.prototxt"
    path.write_text(NET)
    assert main(["plan", "--model", str(path), "--workers", "4", "--servers", "2"]) == 0
    out = capsys.readouterr().out
    assert "P1=4 workers, P2=2 shards" in out
    # conv1: 4 x (3*3*3); fc1: 512 x (4*6*6); fc2: 2 x 512; K from the bottom (8).
    assert re.search(r"conv1\s+conv\s+4x27\s+8\s+\S+\s+-\s+PS", out)
    assert re.search(r"fc1\s+FC\s+512x144\s+8\s+\S+\s+\S+\s+SFB", out)
    assert re.search(r"fc2\s+FC\s+2x512\s+8\s+\S+\s+\S+\s+PS", out)
    assert "relu1" not in out  # not learnable
    # --batch sets the data layers' batch; --iter-size multiplies K; --scheme forces.
    args = ["plan", "--model", str(path), "--workers", "4", "--batch", "500", "--iter-size", "2"]
    assert main(args) == 0
    assert re.search(r"fc1\s+FC\s+512x144\s+1000\s+\S+\s+\S+\s+PS", capsys.readouterr().out)
    assert main([*args, "--scheme", "sfb"]) == 0
    assert re.search(r"fc1\s+FC\s+512x144\s+1000\s+\S+\s+\S+\s+SFB", capsys.readouterr().out)
    assert main([*args, "--input-shape", "data=2,3,8,8"]) == 0  # a given shape wins
    assert re.search(r"fc1\s+FC\s+512x144\s+4\s", capsys.readouterr().out)


def test_readme_example_runs_fast_and_small() -> None:
    """The README's `poseidon plan` line, as written, from the repository root (VGG19-22K,
    whose training LMDB is not here): well under a second and a few MB, where building the
    net with its 229 M weights took seconds and gigabytes."""
    line = next(x for x in (REPO_ROOT / "README.md").read_text().splitlines()
                if x.startswith("poseidon plan "))  # fmt: skip
    measure = (
        "import resource, sys, time\n"
        "import caffe.layers, poseidon._C, poseidon.plan, poseidon.commands.plan_net\n"
        "from poseidon.cli import main\n"
        "def peak_mb(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "before, start = peak_mb(), time.perf_counter()\n"
        "status = main(sys.argv[1:])\n"
        "print(f'{time.perf_counter() - start} {peak_mb() - before}', file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run([sys.executable, "-c", measure, *shlex.split(line)[1:]], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"fc8\s+FC\s+21841x4096\s+32\s+1341\.91\s+99\.60\s+SFB", done.stdout)
    seconds, peak_mb = map(float, done.stderr.split()[-2:])
    assert seconds < 2.0  # measured 0.03-0.06 s; 2 s leaves room for a loaded machine
    assert peak_mb < 100  # measured +4 MB; the built net peaked at +2.2 GB


def test_data_without_its_data(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lenet = str(REPO_ROOT / "models/lenet/train_val.prototxt")
    # No LMDB and no crop_size: nothing says the image size; the error says how to give it.
    assert main(["plan", "--model", lenet, "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "Layer 'mnist' (type Data)" in err and "--input-shape data=N,C,H,W" in err
    shape = ["--input-shape", "data=64,1,28,28"]
    assert main(["plan", "--model", lenet, "--workers", "2", *shape]) == 0
    assert re.search(r"ip1\s+FC\s+500x800\s+64\s", capsys.readouterr().out)
    assert main(["plan", "--model", lenet, "--workers", "2", "--input-shape", "pixels=1"]) == 2
    assert "--input-shape names pixels: not a top of a data layer" in capsys.readouterr().err
    assert main(["plan", "--model", lenet, "--workers", "2", "--input-shape", "data=64x1"]) == 2
    assert "want TOP=N,C,H,W" in capsys.readouterr().err


def test_plan_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "tiny.prototxt"
    path.write_text(NET)
    assert main(["plan", "--workers", "2"]) == 2
    assert "--solver, a --model or a --torch model" in capsys.readouterr().err
    assert main(["plan", "--model", str(path), "--workers", "2", "--iter-size", "0"]) == 2
    assert "--iter-size must be >= 1" in capsys.readouterr().err
    assert main(["plan", "--model", str(path), "--workers", "2", "--layer-schemes", "fc9=ps"]) == 2
    assert "--layer-schemes names fc9: not a synchronised layer" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # allreduce has no HybComm plan
        main(["plan", "--model", str(path), "--workers", "2", "--sync", "allreduce"])


def test_torch_plan_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    factory = tmp_path / "factory.py"
    factory.write_text("from torch import nn\n\ndef build():\n    return nn.Linear(4, 2)\n")
    model = f"{factory}:build"
    assert main(["plan", "--torch", model, "--model", "m.prototxt", "--workers", "2"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["plan", "--torch", model, "--workers", "2"]) == 2
    assert "give the input's shape (--torch-input N,C,H,W)" in capsys.readouterr().err
    assert main(["plan", "--torch", model, "--workers", "2", "--torch-input", "8,x"]) == 2
    assert "want a shape like" in capsys.readouterr().err
    assert main(["plan", "--torch", model, "--workers", "2", "--torch-input", "8,4:int9"]) == 2
    assert "unknown dtype 'int9'" in capsys.readouterr().err
    assert main(["plan", "--torch", f"{factory}:missing", "--workers", "2"]) == 2
    assert "has no function missing" in capsys.readouterr().err
    assert main(["plan", "--torch", "factory_only", "--workers", "2"]) == 2
    assert "want MODULE:FUNCTION" in capsys.readouterr().err
    assert main(["plan", "--torch", model, "--workers", "2", "--torch-input", "8,4"]) == 0
    assert re.search(r"\(root\)\s+FC\s+2x4\s+8\s", capsys.readouterr().out)


def test_a_torch_plan_by_time_measures_as_the_job_does(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """With --bandwidth, `poseidon plan --torch` times the schemes' compute and each module's
    backward on this machine before planning (as a job's workers do): the table's margins are
    in iteration time, the total gives the scheduled iteration, and a slow link sends the
    large Linear lossy while a fast one keeps it exact."""
    factory = tmp_path / "wide.py"
    factory.write_text("from torch import nn\n\ndef build():\n"
                       "    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), "
                       "nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))\n")  # fmt: skip
    base = ["plan", "--torch", f"{factory}:build", "--torch-input", "32,256", "--workers", "4",
            "--compression", "auto"]  # fmt: skip
    assert main([*base, "--bandwidth", "10mbit"]) == 0
    slow = capsys.readouterr().out
    assert re.search(r"ms of backward \+ synchronisation as scheduled", slow)
    assert re.search(r"^2\s+FC\s+1024x1024\s+32(\s+\S+){4}\s+PowerSGD r4\s+[\d.]+\s+iteration "
                     r"[\d.]+ [µm]?s shorter than with", slow, re.MULTILINE)  # fmt: skip
    assert main([*base, "--bandwidth", "1000gbit"]) == 0
    fast = capsys.readouterr().out
    assert "lossy layers: none (every gradient exact)" in fast


def test_plan_reports_a_bad_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", str(tmp_path / "missing.prototxt"), "--workers", "2"]) == 2
    assert "poseidon plan: cannot load" in capsys.readouterr().err


def test_dispatcher_lists_every_subcommand() -> None:
    help_text = build_parser().format_help()
    for name in COMMANDS:
        assert name in help_text
    out = subprocess.run(
        [sys.executable, "-m", "poseidon.cli", "server", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--coordinator" in out and "--rank" in out


def test_node_commands_report_bad_settings(capsys: pytest.CaptureFixture) -> None:
    assert main(["coordinator", "--address", "127.0.0.1:0", "--token", ""]) == 2
    assert "token is empty" in capsys.readouterr().err
    assert main(["server", "--rank", "5", "--servers", "2", "--token", "t"]) == 2
    assert "rank=5 for a server" in capsys.readouterr().err


def test_a_caffe_net_and_a_torch_model_are_planned_by_the_same_code(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both front ends hand `poseidon plan` a layout of the core's SyncLayers, and one
    function of the core plans it (as their syncers declare it: tests/poseidon/
    test_plan_equals_job.py)."""
    import poseidon.plan
    from poseidon.sync.layout import SyncLayer

    calls: list[list] = []
    plan_layout = poseidon.plan.plan_layout

    def recording(layout, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(list(layout))
        return plan_layout(layout, *args, **kwargs)

    monkeypatch.setattr(poseidon.plan, "plan_layout", recording)
    net = tmp_path / "net.prototxt"
    net.write_text(NET)
    factory = tmp_path / "factory.py"
    factory.write_text("from torch import nn\n\ndef build():\n    return nn.Linear(4, 2)\n")
    assert main(["plan", "--model", str(net), "--workers", "2"]) == 0
    assert main(["plan", "--torch", f"{factory}:build", "--workers", "2",
                 "--torch-input", "8,4"]) == 0  # fmt: skip
    capsys.readouterr()
    assert len(calls) == 2 and all(isinstance(x, SyncLayer) for layout in calls for x in layout)
    assert [x.name for x in calls[0]] == ["conv1", "fc1", "fc2"]
    assert [(x.name, x.shape.kind) for x in calls[1]] == [("(root)", "FC")]


def test_compression_in_the_printed_plan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--compression lets the cost model pick lossy schemes: the table grows BF16 and PowerSGD
    columns, the scheme says the rank, each row why, and the lossy layers are named; with the
    link's rate the model ranks by predicted time and prints it."""
    path = tmp_path / "tiny.prototxt"
    path.write_text(NET)
    base = ["plan", "--model", str(path), "--workers", "4", "--batch", "500"]
    assert main(base) == 0
    exact = capsys.readouterr().out
    assert "BF16 MB/iter" not in exact and "lossy layers: none (every gradient exact)" in exact
    assert re.search(r"fc1\s+FC\s+512x144\s+500\s+\S+\s+\S+\s+PS\s+[\d.]+ [kM]?B fewer than SFB",
                     exact)  # fmt: skip
    assert main([*base, "--compression", "auto"]) == 0
    lossy = capsys.readouterr().out
    assert "BF16 MB/iter  PowerSGD MB/iter" in lossy
    chosen = r"fc1\s+FC\s+512x144\s+500(\s+\S+){4}\s+PowerSGD r4\s+[\d.]+ [kMG]?B fewer than"
    assert re.search(chosen, lossy)
    assert re.search(r"lossy layers: .*fc1", lossy)
    assert main([*base, "--compression", "powersgd:2", "--bandwidth", "100mbit",
                 "--gemm-rate", "5e9"]) == 0  # fmt: skip
    timed = capsys.readouterr().out
    assert "ms/iter" in timed and "PowerSGD r2" in timed and "link 100 Mbit/s" in timed
    assert re.search(r"fc1 .* PowerSGD r2 .* iteration [\d.]+ [µm]?s shorter than with", timed)
    assert re.search(r"ms of backward \+ synchronisation as scheduled", timed)
    # A forced scheme that the layer cannot serve, a bad value: errors naming them.
    assert main([*base, "--layer-schemes", "conv1=sfb"]) == 2
    assert "--layer-schemes: layer 'conv1' (conv, 4x27) cannot take sfb" in capsys.readouterr().err
    assert main([*base, "--compression", "zip"]) == 2
    assert "--compression='zip'" in capsys.readouterr().err
    assert main([*base, "--gemm-rate", "fast"]) == 2
    assert "--gemm-rate='fast': want a number" in capsys.readouterr().err
    assert main([*base, "--powersgd-rank", "0"]) == 2
    assert "--powersgd-rank must be >= 1" in capsys.readouterr().err
