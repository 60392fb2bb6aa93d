"""Poseidon's distributed client, written once for every front end (the Caffe engine's
caffe/parallel/, poseidon.torch): it knows nothing of a Caffe Net or a torch.nn.Module.

    layout.py     a job's synchronised layers (SyncLayer) and how the cost model sees each
                  (CommShape): what a front end describes its model as
    job.py        joining, hosting and leaving a job (Session; torchrun and uid hosting)
    client.py     this worker's side of a job: the agreed plan, one round per layer, CUDA
                  side stream and submit thread, timeline (SyncClient)
    round.py      one layer's round: PS push-pull or SFB all-gather, WFBP-ready (LayerRound)
    local.py      several workers per machine: the machine's local group (LocalGroup)
    local_round.py  a round through the local stage: sum inside the machine, the leader's
                  exchange, the result spread back
    staging.py    where a gradient meets the comm core: host memory (Note [GPU path])
    factors.py    sufficient factors: collection (FactorLog), wire layout, unpacking
    broadcast.py  rank 0's weights and buffers to every worker, bit for bit
    buckets.py    the all-reduce baseline's buckets (a pure function of the layout)
    allreduce.py  the all-reduce baseline itself over torch.distributed (BucketReducer)

The plan's derivation is poseidon/plan.py (`layer_specs`), the one that `poseidon plan`
prints; the cost model is the C++ core's (`_C.make_plan`). A front end's only jobs: say what
its layers are (a list of SyncLayer), when a layer's backward is done, and where a mean
gradient goes.
"""
