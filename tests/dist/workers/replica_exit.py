"""Replica groups of 2 processes whose group 1 ends while others wait on its heartbeat.

    replica_exit.py OUT LIGHTHOUSE GATE_PORT held     two groups; group 1 raises
    replica_exit.py OUT LIGHTHOUSE GATE_PORT stopped  one group; its rank 0 is stopped

held: both groups take steps together (an all_reduce across the groups, then the commit); at
their second step together, group 1's code raises on both ranks. Its rank 0 (torchft's
Manager server, whose heartbeat the lighthouse counts) is then held at exit, after
gangmesh's exit handler, until group 0 says (key ``alone`` in the test's gate store) that it
committed a step without group 1, or 30 s. Group 0 takes steps until then, or 30 s.
stopped: rank 0 puts its pid in the gate store (key ``pid``) and waits there until its
launcher's SIGTERM (the test's) ends it; rank 1 waits for it in a barrier.
Each process of group 0 and group 1's rank 0 write what they saw to OUT/rank<N>.json (N:
GANGMESH_TEST_INDEX).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import write_results

import gangmesh as gm

HELD = timedelta(seconds=30)
SHORT = timedelta(seconds=3)


def held_at_exit(index: int, gate: dist.Store) -> None:
    """Group 1's rank 0, at exit: whether group 0 went on while this process still lives.
    (The uncaught error's frames keep the replica group alive until the process ends.)"""
    try:
        gate.wait(["alone"], HELD)
        write_results(index, {"others_went_on": True})
    except dist.DistStoreError:
        write_results(index, {"others_went_on": False})


def main() -> None:
    lighthouse, gate_port, scenario = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    index = int(os.environ["GANGMESH_TEST_INDEX"])
    group = index // 2
    gate = dist.TCPStore("127.0.0.1", gate_port, is_master=False, timeout=HELD)
    if scenario == "held" and index == 2:  # before gangmesh's exit handler: runs after it
        atexit.register(held_at_exit, index, gate)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = gm.setup_root_gang(timeout=timedelta(seconds=30))
    replicas = gm.join_replicas(root, lighthouse=lighthouse, group=group, timeout=SHORT,
                                quorum_timeout=SHORT)  # fmt: skip
    gm.create_gangs(root, replicas=replicas)
    if scenario == "stopped":
        if root.rank == 0:
            gate.set("pid", str(os.getpid()))
            gate.wait(["never"], HELD)
        root.barrier()
        return
    together, alone, deadline = 0, 0, time.monotonic() + HELD.total_seconds()
    while time.monotonic() < deadline and not alone:
        try:
            replicas.start_step()
        except gm.GangError:  # no quorum yet: the lighthouse waits for a group it hears
            continue
        groups = replicas.gang.size
        if group == 1 and groups == 2 and together == 1:
            raise RuntimeError("group 1's own code broke")
        replicas.gang.all_reduce(torch.ones(4), gm.ReduceOperation.SUM)
        if replicas.commit():
            together += groups == 2
            alone += groups == 1 and together > 0
    if alone:
        gate.set("alone", str(root.rank))
    write_results(index, {"together": together, "alone": alone})
    replicas.close()


if __name__ == "__main__":
    main()
