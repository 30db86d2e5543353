"""The job's store traffic of a failure, per survivor, as the world grows.

    python -m benchmarks.failure_traffic [--worlds 64,1024,16384] [--timeout 10]

One survivor's reading of the failure reports after its collective failed, against a
counting store (torch's HashStore, every call counted) that holds the reports of a job of N
ranks, 8 per host, every other rank alive and silent: the worst case, in which the survivor
looks until its wait for its peers ends and then asks nobody (its peers on this host are
this process, in its own code). Two gangs: the root gang (all N ranks) and a gang of 8 (a
tp group). The requests and the bytes read are those of the whole reading (about 3 s);
requests per second is what the store sees from this one survivor, and from each of the
others like it. Baseline: the same reading at the smallest world of the run.
Goal: requests per survivor per second independent of N (ratio about 1).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from benchmarks.report import json_argument, print_table, write_json
from gangmesh.runtime.faults import peer_state, report_reading
from gangmesh.runtime.faults.culprits import Call
from gangmesh.runtime.faults.report_channel import PREFIX, Channel
from gangmesh.runtime.faults.store_line import Line

TITLE = "Store requests of one survivor's reading of a failure (counting store, 8 ranks a host)"
PER_HOST = 8


class CountingStore:
    """A store whose every call is counted, with the bytes its answers carry."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()
        self.bytes_read = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            answer = method(*args)
            if isinstance(answer, bytes):
                self.bytes_read += len(answer)
            elif isinstance(answer, list):
                self.bytes_read += sum(len(a) for a in answer if isinstance(a, bytes))
            return answer

        return counted


def job_store(world: int) -> CountingStore:
    """The reports of a job of ``world`` ranks as their setups leave them: where each runs
    (this host's ranks are this process, alive), nothing of a failure yet."""
    store = CountingStore(dist.PrefixStore(PREFIX, dist.HashStore()))  # type: ignore[attr-defined]
    here, pid, now = socket.gethostname(), os.getpid(), time.time()
    started = peer_state.start_time(pid)
    for rank in range(world):
        host = here if rank < PER_HOST else f"host{rank // PER_HOST}"
        record = {"rank": rank, "pid": pid, "started": started, "seconds": now, "error_file": ""}
        report_reading.register(store, rank, host, record)
    store.calls.clear()
    return store


def reading(world: int, gang: list[int], timeout: float) -> dict[str, Any]:
    """One survivor's reading (global rank 1) of a failed collective of ``gang``."""
    store = job_store(world)
    line = Line(lambda: store)
    channel = Channel(line, 1, world)
    store.calls.clear()
    store.bytes_read = 0
    call = Call("gang", tuple(gang), 7, "all_reduce")
    started = time.monotonic()
    channel.explain(gang, gang.index(1), timedelta(seconds=timeout), call)
    seconds = time.monotonic() - started
    line.end(1.0)
    requests = sum(store.calls.values())
    return {"requests": requests, "seconds": seconds, "bytes": store.bytes_read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="64,1024,16384")
    parser.add_argument("--timeout", type=float, default=10.0)
    json_argument(parser)
    args = parser.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    rows = []
    for name in ("root", "tp of 8"):
        base = None
        for world in worlds:
            print(f"{name}, {world} ranks ...", flush=True)
            gang = list(range(world)) if name == "root" else list(range(PER_HOST))
            found = reading(world, gang, args.timeout)
            rate = found["requests"] / found["seconds"]
            base = base or rate
            row = {"gang": name, "world": world, "requests": found["requests"]}
            row.update(seconds=round(found["seconds"], 2), requests_per_s=round(rate))
            rows.append({**row, "kib_read": round(found["bytes"] / 1024), "ratio": rate / base})
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
