"""Distributed training of a Caffe Solver: the engine's front end to Poseidon's client core
(poseidon/sync/), and the only part of the engine that imports poseidon.

    attach.py     join a job and attach a syncer: attach_from_environment (POSEIDON_*,
                  `caffe train` under a launcher), join (a Config), join_uid (caffe.NCCL)
    syncer.py     PoseidonSync: WFBP and HybComm tied to the Net's and Solver's hooks
    allreduce.py  AllreduceSync: the DDP-style baseline (POSEIDON_SYNC=allreduce)
    layout.py     sync_layout: which layers of a net move, as the core's SyncLayers
    timeline.py   the forward/backward spans of every layer on a syncer's timeline
    nccl.py       pycaffe's caffe.NCCL (BVLC's python/train.py) over the same core

Everything a syncer calls on a Net, a Solver or a Layer is listed in caffe/training_hooks.py.
"""

from caffe.parallel.allreduce import AllreduceSync
from caffe.parallel.attach import (
    attach_from_environment,
    join,
    join_uid,
    new_uid,
    prepare_worker,
    worker_config,
)
from caffe.parallel.layout import sync_layout
from caffe.parallel.syncer import PoseidonSync

__all__ = [
    "AllreduceSync",
    "PoseidonSync",
    "attach_from_environment",
    "join",
    "join_uid",
    "new_uid",
    "prepare_worker",
    "sync_layout",
    "worker_config",
]
