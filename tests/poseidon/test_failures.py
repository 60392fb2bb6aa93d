"""poseidon.failures: a lost colocated shard is also named as the worker whose process it was."""

from __future__ import annotations

import pytest

import poseidon
from poseidon.failures import explain, naming_the_process


def peer_failure(message: str, peer: str) -> poseidon.PeerFailure:
    error = poseidon.PeerFailure(message)
    error.peer, error.layer, error.iteration = peer, 3, 7
    return error


def test_a_lost_colocated_shard_names_its_worker_and_keeps_type_and_attributes():
    error = peer_failure("server 1 (127.0.0.1:5) is gone", "server 1 (127.0.0.1:5)")
    again = naming_the_process(error, colocated_shards=2)
    assert type(again) is poseidon.PeerFailure
    assert str(again) == "server 1 (127.0.0.1:5) is gone [shard 1 ran inside worker 1's process]"
    assert (again.peer, again.layer, again.iteration) == ("server 1 (127.0.0.1:5)", 3, 7)


@pytest.mark.parametrize(
    ("peer", "colocated"),
    [
        ("worker 1 (127.0.0.1:5)", 2),  # a worker is named as itself
        ("server 2 (127.0.0.1:5)", 2),  # a shard beyond the colocated ones ran on its own
        ("server 1 (127.0.0.1:5)", 0),  # nothing colocated
        ("server 10 (127.0.0.1:5)", 1),  # rank 10, not 1
        ("coordinator (127.0.0.1:5)", 2),
    ],
)
def test_other_peers_keep_their_message_and_the_error_itself(peer, colocated):
    error = peer_failure(f"{peer} is gone", peer)
    assert explain(error, colocated) == f"{peer} is gone"
    assert naming_the_process(error, colocated) is error


def test_an_error_without_a_peer_is_left_alone():
    error = poseidon.CommTimeout("no reply in 30 s")
    assert naming_the_process(error, 4) is error
