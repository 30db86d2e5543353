"""Replica groups given bad input; each process writes what it saw to OUT/rank<N>.json, N its
index among all the processes started (GANGMESH_TEST_INDEX).

    replicas.py OUT unreachable PORT   join a lighthouse that nothing serves at PORT
    replicas.py OUT silent PORT        join a "lighthouse" at PORT that never answers
    replicas.py OUT lonely ADDRESS     join one that waits for two groups; start a step; rank 0
                                       says where its stores listen
    replicas.py OUT missing            join with torchft not importable
    replicas.py OUT replicate ADDRESS  join, then ask create_gangs for dp_replicate=2 as well
    replicas.py OUT twice ADDRESS      join with group 0, as another launch does; start a step
    replicas.py OUT layouts ADDRESS    join; group 0 shards over 2, group 1 splits tp=2; start
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from common import listening_at, write_results

import gangmesh as gm

SHORT = timedelta(seconds=3)


def main() -> None:
    scenario, where = sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
    index = int(os.environ["GANGMESH_TEST_INDEX"])
    if scenario == "missing":
        sys.modules["torchft"] = None  # type: ignore[assignment]  # as if it were not installed
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    started = time.monotonic()
    result: dict[str, object] = {}
    try:
        if scenario in ("unreachable", "silent"):
            gm.join_replicas(root, lighthouse=f"127.0.0.1:{where}", group=0, quorum_timeout=SHORT)
            result["joined"] = True
        elif scenario == "lonely":
            replicas = gm.join_replicas(root, lighthouse=where, group=0, timeout=SHORT,
                                        quorum_timeout=SHORT)  # fmt: skip
            if root.rank == 0:
                result["job_store"] = listening_at(int(os.environ["MASTER_PORT"]))
                result["manager_store"] = listening_at(replicas._store.port)
            gm.create_gangs(root, replicas=replicas)
            try:
                replicas.start_step()
            finally:
                replicas.close()
        elif scenario == "missing":
            gm.join_replicas(root, lighthouse="127.0.0.1:1", group=0)
        else:
            group = 0 if scenario == "twice" else index // root.size
            replicas = gm.join_replicas(root, lighthouse=where, group=group, timeout=SHORT)
            sizes = {"replicate": {"dp_replicate": 2}, "layouts": {"dp_shard": 1, "tp": 2}}
            chosen = sizes.get(scenario, {}) if group == 1 or scenario == "replicate" else {}
            gm.create_gangs(root, replicas=replicas, **chosen)
            replicas.start_step()
            replicas.close()
        result["error"] = None
    except (ValueError, ImportError, gm.GangError) as ex:
        result.update(error=str(ex), kind=type(ex).__name__)
    result["waited"] = time.monotonic() - started
    write_results(index, result)


if __name__ == "__main__":
    main()
