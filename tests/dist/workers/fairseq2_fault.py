"""fairseq2's sharded layers under FSDP2 on gangmesh's gangs (tp 2 x dp_shard 2, timeout 5 s),
4 processes; rank 3 raises before its forward of step 2. Every other rank writes the error
it gets, which names rank 3, to JSON.

    fairseq2_fault.py OUT
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import fairseq2.gang as fs2
from common import write_results
from fairseq2.nn.fsdp import to_fsdp2
from fairseq2_training import sharded_model, train

import gangmesh as gm

VICTIM = 3


def main() -> None:
    me = int(os.environ["RANK"])
    root = gm.setup_root_gang(timeout=timedelta(seconds=5))
    gangs = gm.create_gangs(root, tp=2, dp_shard=2)
    forwards = 0

    def break_at_step_2(*_: object) -> None:
        nonlocal forwards
        forwards += 1
        if forwards == 2:
            write_results(me, {"broke_at": time.time()})
            raise ValueError("step 2: the loss is NaN")

    try:
        with gangs, fs2.set_gangs(gangs):
            model = sharded_model()
            if me == VICTIM:
                model.register_forward_pre_hook(break_at_step_2)
            model = to_fsdp2(model, gangs, lambda module, wrap: module)
            train(model, gangs.dp.rank, gangs.dp.size, lambda loss: loss)
    except gm.GangError as ex:
        write_results(me, {"error": str(ex), "culprits": list(ex.culprits), "at": time.time()})
        sys.exit(1)


if __name__ == "__main__":
    main()
