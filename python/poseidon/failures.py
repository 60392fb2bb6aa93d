"""Whose process a lost peer was.

The comm core names the connection it lost: "server 1 (127.0.0.1:43545) is gone". Where
shard r runs inside worker r's process (the paper's colocated layout, and what
`poseidon launch` and poseidon.torch start), one death closes both connections, and a
survivor may see either first; so a lost colocated shard is also named as the worker whose
process it was, for the user who killed, or lost, "rank 1".
"""

from __future__ import annotations

import re

from poseidon._C import CommError

_NODE = re.compile(r"(server|worker) (\d+)\b")


def process_note(role: str, rank: int, colocated_shards: int, workers_per_host: int = 1) -> str:
    """What a lost node's name alone does not say: the worker whose process ran shard `rank`
    (one of the first `colocated_shards`: shard s inside worker s·G, G = `workers_per_host`),
    or, with several workers per machine, which machine worker `rank` was on. "" if nothing."""
    g = workers_per_host
    if role == "server" and rank < colocated_shards:
        leader = f", machine {rank}'s leader" if g > 1 else ""
        return f" [shard {rank} ran inside worker {rank * g}'s process{leader}]"
    if role == "worker" and g > 1:
        return f" [worker {rank} was machine {rank // g}'s worker {rank % g} of {g}]"
    return ""


def explain(error: CommError, colocated_shards: int, workers_per_host: int = 1) -> str:
    """`error`'s message, plus process_note of the node it lost."""
    match = _NODE.match(str(getattr(error, "peer", "")))
    if not match:
        return str(error)
    note = process_note(match.group(1), int(match.group(2)), colocated_shards, workers_per_host)
    return str(error) + note


def naming_the_process(error: CommError, colocated_shards: int,
                       workers_per_host: int = 1) -> CommError:  # fmt: skip
    """`error` itself, or where `explain` says more, an error of the same type with that
    message and the same attributes (peer, layer, iteration)."""
    message = explain(error, colocated_shards, workers_per_host)
    if message == str(error):
        return error
    again = type(error)(message)
    for name in ("peer", "layer", "iteration"):
        if hasattr(error, name):
            setattr(again, name, getattr(error, name))
    return again
