"""``gangmesh check`` with replica groups: the groups started on this machine with a
lighthouse, and each rank's check of the reduction across them."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch

from gangmesh.assembly.gangs import Gangs
from gangmesh.assembly.replicas import Replicas
from gangmesh.runtime.gang import ReduceOperation
from gangmesh.tools.lighthouse import start_lighthouse

_GRACE_S = 60.0
"""What a group's launch may take beyond its collective timeout: starting, the checks."""


def check_replica_groups_locally(args: argparse.Namespace, argv: list[str]) -> int:
    """Start a lighthouse and ``--replica-groups`` local launches of ``--nproc`` processes of
    this same check (its arguments checked), each one replica group; print each group's
    report; 0 if all pass."""
    groups = args.replica_groups
    noun = "group" if groups == 1 else "groups"
    print(f"gangmesh check: starting {groups} replica {noun} of {args.nproc} local processes "
          "and a lighthouse...", file=sys.stderr, flush=True)  # fmt: skip
    with (
        start_lighthouse(groups, heartbeat_timeout=timedelta(seconds=5)) as lighthouse,
        tempfile.TemporaryDirectory(prefix="gangmesh-groups-") as folder,
    ):
        command = [sys.executable, "-m", "gangmesh", *_without_groups(argv),
                   "--lighthouse", lighthouse.address]  # fmt: skip
        logs = [Path(folder) / f"group{group}.log" for group in range(groups)]
        launches = []
        for group, log in enumerate(logs):
            env = {**os.environ, "GANGMESH_REPLICA_GROUP": str(group)}
            env.setdefault("RUST_LOG", "warn")  # torchft's own log: its warnings only
            with log.open("w") as out:
                launch = subprocess.Popen(
                    command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            launches.append(launch)
        codes = _wait(launches, args.timeout + _GRACE_S)
        for group, (log, code) in enumerate(zip(logs, codes, strict=True)):
            print(f"--- replica group {group} (exit status {code}) ---")
            print(log.read_text().rstrip())
    failed = [group for group, code in enumerate(codes) if code != 0]
    if failed:
        print(f"FAILED: replica groups {', '.join(map(str, failed))} of {groups}")
        return 1
    print(f"PASSED: {groups} replica {noun} of {args.nproc} processes: each matches its plan, "
          "and the reduction across them is right")  # fmt: skip
    return 0


def _without_groups(argv: list[str]) -> list[str]:
    """``argv`` without its --replica-groups option."""
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--replica-groups":
            skip = True
        elif not token.startswith("--replica-groups="):
            kept.append(token)
    return kept


def _wait(launches: list[subprocess.Popen[bytes]], seconds: float) -> list[int]:
    """Each launch's exit status, -9 for one killed (with its session) at the deadline."""
    deadline = time.monotonic() + seconds
    codes = []
    for launch in launches:
        try:
            codes.append(launch.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
            codes.append(-9)
    return codes


def check_across(replicas: Replicas, gangs: Gangs) -> tuple[bool, str]:
    """One step across the replica groups: each group's rank among them, summed; whether the
    sum is right and the step committed, and the line that says so."""
    replicas.start_step()
    rank, size = gangs.rdp.rank, gangs.rdp.size
    values = torch.full((8,), float(rank), device=gangs.device)
    start = time.perf_counter()
    gangs.rdp.all_reduce(values, ReduceOperation.SUM)
    milliseconds = 1000 * (time.perf_counter() - start)
    right = bool((values == size * (size - 1) / 2).all())
    committed = replicas.commit()
    line = (
        f"replica groups: {size} in the step (this one: group {replicas.group}, rank {rank}); "
        f"all_reduce across them {'right' if right else 'WRONG'} in {milliseconds:.2f} ms; "
        f"the step {'committed' if committed else 'did NOT commit'}"
    )
    return right and committed, line
