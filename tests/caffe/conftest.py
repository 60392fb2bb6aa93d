import logging

import pytest


@pytest.fixture
def caffe_log(caplog):
    """caplog for the 'caffe' logger (which does not propagate to the root logger)."""
    logger = logging.getLogger("caffe")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="caffe")
    yield caplog
    logger.removeHandler(caplog.handler)
