"""Shared by worker scripts: write this rank's results as JSON; join the job before a fault."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any


def write_results(rank: int, results: dict[str, Any]) -> None:
    """Write ``results`` to ``<out_dir>/rank<rank>.json``; out_dir is argv[1]."""
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"rank{rank}.json.partial"  # whole or absent to a reader
    partial.write_text(json.dumps(results))
    partial.replace(out_dir / f"rank{rank}.json")


def join_job(timeout: timedelta) -> None:
    """Connect to the job's store and meet every rank, each wait bounded by ``timeout``, then
    close the root gang again: the setup a fault script tests next runs on that connection
    (gangmesh keeps it per process), so its short timeout bounds the setup and the fault,
    not the start of the job. (The barrier keeps a rank from closing its end of the group
    while a peer is still connecting to it.)

    torch looks up the host name of every store connection's address (reverse DNS), on both
    ends, the server's lookups one after another on its one thread; a name server that drops
    a query holds the lookup for its retry time (glibc: 5 s). Those seconds belong to
    starting the job, not to the fault. (On the tests' quiet host no lookup waits; see
    tests/dist/conftest.py. Elsewhere this keeps them out of the fault's time.)
    """
    import gangmesh as gm

    root = gm.setup_root_gang(timeout=timeout)
    root.barrier()
    root.close()


def end_victim(victim: int, world_size: int = 4) -> None:
    """The last survivor to write its error (or that it ended of torch's) kills a victim
    still stopped or hanging, as a scheduler ending the job would (each survivor checks after
    writing)."""
    out = Path(sys.argv[1])
    found = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(world_size)}
    if all("error" in found[r] or "ended" in found[r] for r in found if r != victim):
        with contextlib.suppress(ProcessLookupError):
            os.kill(found[victim]["pid"], signal.SIGKILL)


def listening_at(port: int) -> list[str]:
    """The addresses sockets of this network namespace listen at on ``port``, as
    /proc/net/tcp and tcp6 show them ("0.0.0.0" or "::" for every interface)."""
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:  # 0A: listening
                continue
            raw = bytes.fromhex(address)  # 32-bit words in the host's (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, words))
    return found
