"""Poseidon: distributed communication for the Caffe engine."""

from poseidon._C import CommError, CommTimeout, ConfigError, PeerFailure, ProtocolError
from poseidon.config import Config

__all__ = ["CommError", "CommTimeout", "Config", "ConfigError", "PeerFailure", "ProtocolError"]
