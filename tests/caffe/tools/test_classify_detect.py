import csv
import subprocess
import sys

import h5py
import numpy as np
import pytest

import caffe
from caffe import io
from caffe.tools import classify, detect
from tests.caffe.deploy_fixtures import CLASSES, SIZE, write_deploy_net, write_png
from tests.caffe.tools.cli_helpers import REPO_ROOT, subprocess_env


@pytest.fixture(scope="module")
def deploy_net(tmp_path_factory):
    return write_deploy_net(tmp_path_factory.mktemp("scripts"))


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    """Three PNGs (and a .txt that the directory glob must skip)."""
    directory = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name, (h, w) in zip("bca", [(12, 10), (9, 9), (16, 20)]):
        write_png(directory / f"{name}.png", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    (directory / "notes.txt").write_text("not an image")
    return directory


def model_args(deploy_net, *extra):
    return ["--model_def", deploy_net[0], "--pretrained_model", deploy_net[1], *extra]


def test_classify_an_image_with_pycaffe_defaults(deploy_net, image_dir, tmp_path):
    out = tmp_path / "predictions.npy"
    image = str(image_dir / "a.png")
    args = [
        image,
        str(out),
        *model_args(deploy_net, "--images_dim", "10,11", "--input_scale", "0.01"),
    ]
    assert classify.main(args) == 0
    classifier = caffe.Classifier(
        *deploy_net, image_dims=(10, 11), input_scale=0.01, raw_scale=255.0, channel_swap=(2, 1, 0)
    )
    expected = classifier.predict([io.load_image(image)])
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-6)
    assert np.load(out).shape == (1, CLASSES)


def test_classify_a_directory_center_only_in_sorted_order(deploy_net, image_dir, tmp_path):
    out = tmp_path / "predictions"  # np.save adds .npy
    extra = ["--ext", "png", "--center_only", "--input_scale", "0.005"]
    assert classify.main([str(image_dir), str(out), *model_args(deploy_net, *extra)]) == 0
    classifier = caffe.Classifier(
        *deploy_net,
        image_dims=(256, 256),
        input_scale=0.005,
        raw_scale=255.0,
        channel_swap=(2, 1, 0),
    )
    images = [io.load_image(str(image_dir / f"{name}.png")) for name in "abc"]
    expected = classifier.predict(images, oversample=False)
    np.testing.assert_allclose(np.load(tmp_path / "predictions.npy"), expected, rtol=1e-6)
    assert not np.allclose(expected[0], expected[1])


def test_classify_a_npy_with_a_mean_file(deploy_net, tmp_path):
    images = np.random.default_rng(1).random((2, SIZE, SIZE, 3)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    mean = np.random.default_rng(2).random((3, SIZE, SIZE)) * 255
    np.save(tmp_path / "mean.npy", mean)
    out = tmp_path / "out.npy"
    extra = ["--images_dim", f"{SIZE},{SIZE}", "--mean_file", str(tmp_path / "mean.npy")]
    args = [str(tmp_path / "images.npy"), str(out), *model_args(deploy_net, *extra)]
    assert classify.main([*args, "--input_scale", "0.01"]) == 0
    classifier = caffe.Classifier(
        *deploy_net, mean=mean, input_scale=0.01, raw_scale=255.0, channel_swap=(2, 1, 0)
    )
    np.testing.assert_allclose(np.load(out), classifier.predict(images), rtol=1e-6)


def test_classify_errors_are_one_line(deploy_net, image_dir, tmp_path, caffe_log):
    out = str(tmp_path / "out.npy")
    cases = [
        ([str(tmp_path / "missing.png"), out], "Could not read the input"),
        ([str(tmp_path), out], "the directory has no *.jpg images"),
        ([str(image_dir / "a.png"), out, "--images_dim", "256"], "--images_dim '256'"),
        ([str(image_dir / "a.png"), out, "--channel_swap", "2,x"], "--channel_swap '2,x'"),
        ([str(image_dir / "a.png"), out, "--mean_file", str(tmp_path / "no.npy")], "mean file"),
    ]
    for args, message in cases:
        caffe_log.clear()
        assert classify.main([*args, *model_args(deploy_net)]) == 1, message
        assert message in caffe_log.text
    caffe_log.clear()
    args = [str(image_dir / "a.png"), out, "--model_def", str(tmp_path / "none.prototxt")]
    assert classify.main([*args, "--pretrained_model", deploy_net[1]]) == 1
    assert "Could not open file" in caffe_log.text


def write_windows_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["filename", "ymin", "xmin", "ymax", "xmax"])
        writer.writerows(rows)
    return str(path)


@pytest.fixture
def windows_csv(image_dir, tmp_path):
    a, b = str(image_dir / "a.png"), str(image_dir / "b.png")
    rows = [(a, 0, 0, 8, 8), (b, 2, 1, 12, 10), (a, 4, 6, 16, 20)]
    # detect groups the windows by image, in order of first appearance.
    grouped = [(a, [0, 0, 8, 8]), (a, [4, 6, 16, 20]), (b, [2, 1, 12, 10])]
    return write_windows_csv(tmp_path / "windows.csv", rows), grouped


def expected_detections(deploy_net, windows):
    detector = caffe.Detector(
        *deploy_net, input_scale=0.01, raw_scale=255.0, channel_swap=(2, 1, 0), context_pad=2
    )
    pairs = [(name, np.array([window])) for name, window in windows]
    return [d["prediction"] for d in detector.detect_windows(pairs)]


def test_detect_a_window_list_to_csv(deploy_net, windows_csv, tmp_path):
    path, windows = windows_csv
    out = tmp_path / "detections.csv"
    extra = ["--crop_mode", "list", "--context_pad", "2", "--input_scale", "0.01"]
    assert detect.main([path, str(out), *model_args(deploy_net, *extra)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == [
        "filename",
        "ymin",
        "xmin",
        "ymax",
        "xmax",
        *(f"class{c}" for c in range(CLASSES)),
    ]
    assert [(r[0], [int(v) for v in r[1:5]]) for r in rows[1:]] == windows  # grouped by image
    scores = np.array([[float(v) for v in r[5:]] for r in rows[1:]])
    np.testing.assert_allclose(scores, expected_detections(deploy_net, windows), rtol=1e-6)


def test_detect_to_h5_with_a_pixel_mean_reduced_per_channel(deploy_net, windows_csv, tmp_path):
    path, windows = windows_csv
    mean = np.random.default_rng(3).random((3, 5, 5)) * 255
    np.save(tmp_path / "mean.npy", mean)
    out = tmp_path / "detections.h5"
    extra = [
        "--crop_mode",
        "list",
        "--mean_file",
        str(tmp_path / "mean.npy"),
        "--input_scale",
        "0.02",
    ]
    assert detect.main([path, str(out), *model_args(deploy_net, *extra)]) == 1  # pad 16 > 8×8
    assert detect.main([path, str(out), "--context_pad", "0", *model_args(deploy_net, *extra)]) == 0
    detector = caffe.Detector(
        *deploy_net,
        mean=mean.mean(axis=(1, 2)),
        input_scale=0.02,
        raw_scale=255.0,
        channel_swap=(2, 1, 0),
    )
    expected = detector.detect_windows([(name, np.array([window])) for name, window in windows])
    with h5py.File(out, "r") as f:
        assert [name.decode() for name in f["filename"][:]] == [name for name, _ in windows]
        np.testing.assert_array_equal(f["window"][:], [window for _, window in windows])
        assert f["prediction"].dtype == np.float32
        np.testing.assert_allclose(
            f["prediction"][:], [d["prediction"] for d in expected], rtol=1e-6
        )


def test_detect_errors_are_one_line(deploy_net, windows_csv, image_dir, tmp_path, caffe_log):
    path, _ = windows_csv
    image_list = tmp_path / "images.txt"
    image_list.write_text(f"{image_dir / 'a.png'}\n\n")
    bad_csv = write_windows_csv(tmp_path / "bad.csv", [(str(image_dir / "a.png"), 0, 0, 4.5, 4)])
    out = str(tmp_path / "out.csv")
    cases = [
        ([path, str(tmp_path / "out.json"), "--crop_mode", "list"], "must end in .csv or .h5"),
        ([str(tmp_path / "in.json"), out], "not .txt or .csv"),
        ([str(image_list), out, "--crop_mode", "list"], "--crop_mode list needs a .csv"),
        ([str(image_list), out, "--context_pad", "2"], "'selective_search_ijcv_with_python'"),
        ([bad_csv, out, "--crop_mode", "list", "--context_pad", "2"], "bad.csv:2: window"),
        ([str(tmp_path / "none.csv"), out, "--crop_mode", "list"], "Could not open file"),
    ]
    for args, message in cases:
        caffe_log.clear()
        assert detect.main([*args, *model_args(deploy_net)]) == 1, message
        assert message in caffe_log.text


def run_module(script, *args):
    return subprocess.run(
        [sys.executable, "-m", f"caffe.tools.{script}", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_scripts_run_as_modules(deploy_net, image_dir, tmp_path):
    out = tmp_path / "out.npy"
    run = run_module("classify", str(image_dir / "a.png"), str(out), *model_args(deploy_net))
    assert run.returncode == 0, run.stderr
    assert np.load(out).shape == (1, CLASSES) and "Classifying 1 inputs." in run.stderr
    missing = str(tmp_path / "missing.csv")
    run = run_module("detect", missing, str(tmp_path / "out.csv"), *model_args(deploy_net))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"Could not open file {missing}" in run.stderr
