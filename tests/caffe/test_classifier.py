import numpy as np
import pytest

import caffe
from caffe import io
from caffe.errors import CaffeError, WeightsError
from tests.caffe.deploy_fixtures import (
    CHANNELS,
    CLASSES,
    SIZE,
    numpy_forward,
    preprocess,
    write_deploy_net,
)

MEAN = np.array([100.0, 120.0, 140.0])
RAW_SCALE, INPUT_SCALE, SWAP = 255.0, 0.02, (2, 1, 0)


@pytest.fixture(scope="module")
def deploy_net(tmp_path_factory):
    return write_deploy_net(tmp_path_factory.mktemp("classifier"))


@pytest.fixture
def classifier(deploy_net):
    return caffe.Classifier(
        *deploy_net,
        image_dims=(10, 12),
        mean=MEAN,
        input_scale=INPUT_SCALE,
        raw_scale=RAW_SCALE,
        channel_swap=SWAP,
    )


def random_images(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random((*shape, CHANNELS)).astype(np.float32) for shape in shapes]


def expected_scores(net, crops):
    batch = np.stack([preprocess(c, MEAN, RAW_SCALE, INPUT_SCALE, SWAP) for c in crops])
    return numpy_forward(net, batch)


def test_is_a_test_phase_net_with_the_weights(deploy_net, classifier):
    assert caffe.Classifier is type(classifier) and isinstance(classifier, caffe.Net)
    assert classifier.phase == caffe.TEST
    plain = caffe.Net(deploy_net[0], caffe.TEST, weights=deploy_net[1])
    np.testing.assert_array_equal(classifier.params["ip"][0].data, plain.params["ip"][0].data)
    np.testing.assert_array_equal(classifier.crop_dims, (SIZE, SIZE))
    np.testing.assert_array_equal(classifier.image_dims, (10, 12))


def test_oversample_averages_the_ten_explicit_crops(classifier):
    # Three images (more crops than one net batch of 5, and not a multiple of it).
    images = random_images([(9, 11), (10, 12), (20, 16)])
    predictions = classifier.predict(images)
    assert predictions.shape == (3, CLASSES)
    for image, prediction in zip(images, predictions):
        resized = io.resize_image(image, (10, 12))
        corners = [(0, 0), (0, 4), (2, 0), (2, 4), (1, 2)]  # 4 corners of 10×12, then the centre
        crops = [resized[y : y + SIZE, x : x + SIZE] for y, x in corners]
        crops += [crop[:, ::-1] for crop in crops]
        scores = expected_scores(classifier, crops)
        np.testing.assert_allclose(prediction, scores.mean(axis=0), rtol=1e-5, atol=1e-6)
        assert not np.allclose(scores[0], scores[4])  # the crops really differ


def test_center_only_is_the_centre_crop(classifier):
    images = random_images([(10, 12), (7, 7)], seed=1)
    predictions = classifier.predict(images, oversample=False)
    assert predictions.shape == (2, CLASSES)
    centres = [io.resize_image(im, (10, 12))[1 : 1 + SIZE, 2 : 2 + SIZE] for im in images]
    expected = expected_scores(classifier, centres)
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-6)


def test_images_are_resized_as_bvlc_caffe_did(classifier):
    # Shrunk 3x to image_dims: BVLC Caffe 1.0's resize (the scikit-image of its time, no
    # anti-aliasing), not today's scikit-image default, which smooths first.
    pytest.importorskip("skimage")
    from tests.caffe.test_io import pycaffe_resize_image

    image = random_images([(30, 36)], seed=3)[0]
    prediction = classifier.predict([image], oversample=False)[0]
    bvlc = pycaffe_resize_image(image, (10, 12), 1)[1 : 1 + SIZE, 2 : 2 + SIZE]
    today = pycaffe_resize_image(image, (10, 12), 1, anti_aliasing=True)[1 : 1 + SIZE, 2 : 2 + SIZE]
    np.testing.assert_allclose(prediction, expected_scores(classifier, [bvlc])[0], rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    assert not np.allclose(prediction, expected_scores(classifier, [today])[0], rtol=1e-3)


def test_defaults_no_preprocessing_and_image_dims_of_the_input(deploy_net):
    classifier = caffe.Classifier(*deploy_net)
    np.testing.assert_array_equal(classifier.image_dims, (SIZE, SIZE))
    images = random_images([(SIZE, SIZE)] * 6, seed=2)  # 6: a full batch and a padded one
    predictions = classifier.predict(iter(images), oversample=False)
    expected = numpy_forward(classifier, np.stack([im.transpose(2, 0, 1) for im in images]))
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-6)
    # Oversampling an image of the input size: all five crops are the image, then its mirror.
    oversampled = classifier.predict(images[:1])
    both = np.stack([images[0], images[0][:, ::-1]]).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(oversampled[0], numpy_forward(classifier, both).mean(0), rtol=1e-5)


def test_pixel_mean_is_resized_to_the_input(deploy_net):
    mean = np.random.default_rng(3).random((CHANNELS, 4, 4))
    classifier = caffe.Classifier(*deploy_net, mean=mean)
    image = random_images([(SIZE, SIZE)], seed=4)[0]
    prediction = classifier.predict([image], oversample=False)
    full_mean = io.resize_image(mean.transpose(1, 2, 0), (SIZE, SIZE)).transpose(2, 0, 1)
    expected = numpy_forward(classifier, (image.transpose(2, 0, 1) - full_mean)[np.newaxis])
    np.testing.assert_allclose(prediction, expected, rtol=1e-5, atol=1e-6)


def test_bad_inputs_are_named(classifier):
    with pytest.raises(CaffeError, match="no input images"):
        classifier.predict([])
    with pytest.raises(CaffeError, match=r"input 1 has shape \(10, 12\); expected an H×W×3"):
        classifier.predict([np.zeros((10, 12, 3)), np.zeros((10, 12))])
    with pytest.raises(CaffeError, match=r"input 0 has shape \(10, 12, 1\)"):
        classifier.predict([np.zeros((10, 12, 1))])


def test_bad_construction_arguments_are_named(deploy_net, tmp_path):
    with pytest.raises(
        CaffeError, match=r"image_dims \(6, 12\) are smaller than the net input \(8, 8\)"
    ):
        caffe.Classifier(*deploy_net, image_dims=(6, 12))
    with pytest.raises(CaffeError, match="image_dims must be two positive integers"):
        caffe.Classifier(*deploy_net, image_dims=(10,))
    with pytest.raises(CaffeError, match=r"channel_swap .* outside 0\.\.2"):
        caffe.Classifier(*deploy_net, channel_swap=(3, 1, 0))
    with pytest.raises(CaffeError, match="channel_swap does not fit"):
        caffe.Classifier(*deploy_net, channel_swap=(1, 0))
    with pytest.raises(CaffeError, match="mean does not fit"):
        caffe.Classifier(*deploy_net, mean=np.zeros(2))
    with pytest.raises(WeightsError, match="Could not open file"):
        caffe.Classifier(deploy_net[0], str(tmp_path / "missing.caffemodel"))
