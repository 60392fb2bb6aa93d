"""`caffe train` end to end on a tiny solver: log lines, snapshots, resume and finetune."""

import re

from tests.caffe.tools.cli_helpers import messages, run_caffe


def test_train_logs_caffes_sequence_and_snapshots(trained_tiny):
    directory, status, log = trained_tiny
    assert status == 0, log
    lines = messages(log)
    order = [
        "Use CPU.",
        "Solver scaffolding done.",
        "Starting Optimization",
        "Solving tiny",
        "Learning Rate Policy: fixed",
        "Optimization Done.",
    ]
    positions = [lines.index(line) for line in order]
    assert positions == sorted(positions)
    assert lines.count("Optimization Done.") == 1  # the solver's line, not repeated
    for iteration in (3, 6):
        assert (directory / f"tiny_iter_{iteration}.caffemodel").is_file()
        assert (directory / f"tiny_iter_{iteration}.solverstate").is_file()


def test_level_and_stages_reach_the_train_state(trained_tiny):
    _, _, log = trained_tiny
    parameters = "\n".join(messages(log))
    assert "train_state {" in parameters
    assert "level: 2" in parameters
    assert 'stage: "deep"' in parameters


def test_resume_from_snapshot_continues_at_its_iteration(trained_tiny):
    directory, _, _ = trained_tiny
    solver = directory / "solver.prototxt"
    state = directory / "tiny_iter_3.solverstate"
    status, log = run_caffe("train", "--solver", str(solver), "--snapshot", str(state))
    assert status == 0, log
    lines = messages(log)
    assert f"Resuming from {state}" in lines
    assert lines.index(f"Resuming from {state}") < lines.index("Starting Optimization")
    displays = [re.match(r"Iteration (\d+) \(", line) for line in lines]
    iterations = [int(m.group(1)) for m in displays if m]
    assert iterations and iterations[0] == 3
    assert not any("Finetuning from" in line for line in lines)


def test_weights_finetune_from_a_caffemodel(trained_tiny):
    directory, _, _ = trained_tiny
    solver = directory / "solver.prototxt"
    weights = directory / "tiny_iter_6.caffemodel"
    status, log = run_caffe("train", "--solver", str(solver), "--weights", str(weights))
    assert status == 0, log
    assert f"Finetuning from {weights}" in messages(log)
