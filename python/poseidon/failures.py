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

_SERVER = re.compile(r"server (\d+)\b")


def explain(error: CommError, colocated_shards: int) -> str:
    """`error`'s message, plus which worker a lost shard among the first `colocated_shards`
    (each inside the worker of its rank) lived with."""
    message = str(error)
    match = _SERVER.match(str(getattr(error, "peer", "")))
    if match and int(match.group(1)) < colocated_shards:
        rank = match.group(1)
        message += f" [shard {rank} ran inside worker {rank}'s process]"
    return message


def naming_the_process(error: CommError, colocated_shards: int) -> CommError:
    """`error` itself, or where `explain` says more, an error of the same type with that
    message and the same attributes (peer, layer, iteration)."""
    message = explain(error, colocated_shards)
    if message == str(error):
        return error
    again = type(error)(message)
    for name in ("peer", "layer", "iteration"):
        if hasattr(error, name):
            setattr(again, name, getattr(error, name))
    return again
