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
_WORKER = re.compile(r"worker (\d+)\b")


def explain(error: CommError, colocated_shards: int, workers_per_host: int = 1) -> str:
    """`error`'s message, plus which worker a lost shard among the first `colocated_shards`
    lived with (shard s inside worker s·G's process, G = `workers_per_host`), and with
    several workers per machine, which machine a lost worker was on."""
    message = str(error)
    peer = str(getattr(error, "peer", ""))
    match = _SERVER.match(peer)
    if match and int(match.group(1)) < colocated_shards:
        shard = int(match.group(1))
        message += f" [shard {shard} ran inside worker {shard * workers_per_host}'s process"
        message += f", machine {shard}'s leader]" if workers_per_host > 1 else "]"
    match = _WORKER.match(peer)
    if match and workers_per_host > 1:
        rank = int(match.group(1))
        message += (f" [worker {rank} was machine {rank // workers_per_host}'s worker "
                    f"{rank % workers_per_host} of {workers_per_host}]")  # fmt: skip
    return message


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
