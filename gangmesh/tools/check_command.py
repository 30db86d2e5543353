"""``gangmesh check``: as one rank of a job, or as the launcher of local ranks."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TextIO

import torch

from gangmesh.assembly.factories import create_gangs_from_layout
from gangmesh.assembly.record import layout_record
from gangmesh.assembly.replicas import join_replicas
from gangmesh.assembly.setup import setup_root_gang
from gangmesh.plan.layout import Layout
from gangmesh.plan.locality import check_ranks_per_node
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.ops import all_gather_objects, broadcast_flag
from gangmesh.runtime.process_group_gang import ProcessGroupGang
from gangmesh.tools.check import check_gangs, describe_failure, gather_reports, this_placement
from gangmesh.tools.check_replicas import check_across
from gangmesh.tools.check_report import (
    GangReport,
    Placement,
    cluster_of,
    nodes_text,
    parse_sizes,
    stragglers,
    summarize,
)
from gangmesh.tools.failure import Failure
from gangmesh.tools.launch import QUIET_SECONDS, WorkerExit, run_local_workers
from gangmesh.tools.render import findings_text, plan_title

STRAGGLER_SECONDS = 0.1
"""How late the rank that ``--inject-fault slow`` makes a straggler arrives at each barrier."""

COLLECTIVE_FAILED = 4
"""Exit status of a rank whose collective failed (a peer died, stopped answering or timed out)."""


def check_locally(
    args: argparse.Namespace, layout: Layout, argv: list[str], main: Callable[[list[str]], int]
) -> int:
    """Start ``--nproc`` local ranks of this same command, ``main(argv)`` in each (``main``:
    the ``gangmesh`` command's entry point), their arguments checked; 0 only if all of them
    pass."""
    device = local_device(args.device, args.nproc)
    noun = "process" if args.nproc == 1 else "processes"
    where = "gloo on 127.0.0.1" if device == "cpu" else "NCCL, one GPU each"
    print(f"gangmesh check: starting {args.nproc} local {noun} ({where})...",
          file=sys.stderr, flush=True)  # fmt: skip
    command = argv if args.device else [*argv, "--device", device]
    exits = run_local_workers(args.nproc, main, command, timeout=args.timeout)
    failed = [e for e in exits if e.returncode != 0]
    if not failed:
        return 0
    sys.stderr.write("\n".join(failure_report(exits, socket.gethostname())) + "\n")
    return 1


def failure_report(exits: list[WorkerExit], host: str) -> list[str]:
    """What went wrong, cause first: a rank that died, crashed or stopped answering, then
    what the others said. Ranks that merely saw a collective fail are not causes."""
    failed = [e for e in exits if e.returncode != 0]
    causes = [e for e in failed if _is_cause(e)]
    others = [e for e in failed if e not in causes]
    if causes:
        what = "; ".join(f"rank {e.rank} on {host} {_fate(e)}" for e in causes)
        lines = [f"gangmesh check: FAILED: {what}"]
        if others:
            noun = "process" if len(others) == 1 else "processes"
            lines[0] += f"; {len(others)} other {noun} failed after it"
    else:
        lines = [f"gangmesh check: FAILED on {len(failed)} of {len(exits)} processes"]
    for e in causes + others:
        tail = f": {_said(e.output_tail)}" if e.output_tail else ""
        lines.append(f"  rank {e.rank} {_fate(e)}{tail}")
    return lines


def _said(tail: str) -> str:
    """What a worker's output tail says: its own report lines where it has some (gloo's
    connection notices left out), else the tail as it is."""
    prefix = "gangmesh check: "
    own = [line.removeprefix(prefix) for line in tail.splitlines() if line.startswith(prefix)]
    return "\n".join(own) if own else tail


def _is_cause(e: WorkerExit) -> bool:
    """A worker that failed on its own: killed from outside, crashed, or stopped answering."""
    if e.killed is not None:
        return e.killed == "unanswering"
    return e.returncode not in (0, COLLECTIVE_FAILED, 1)


def _fate(e: WorkerExit) -> str:
    if e.killed == "unanswering":
        if e.stopped:
            return "stopped answering: it was stopped (SIGSTOP or a debugger); killed"
        return (
            f"stopped answering: still running {QUIET_SECONDS:g} s after the others ended; killed"
        )
    if e.killed == "late":
        return "was killed: still running when the timeout and grace period had passed"
    if e.returncode < 0:
        try:
            name = signal.Signals(-e.returncode).name
        except ValueError:
            name = f"signal {-e.returncode}"
        return f"died of {name}"
    if e.returncode == COLLECTIVE_FAILED:
        return "saw a collective fail"
    return f"exited with code {e.returncode}"


def check_as_rank(args: argparse.Namespace, layout: Layout) -> int:
    """Take part in the check as this process's rank; rank 0 prints the report."""
    timeout = timedelta(seconds=args.timeout)
    sizes = parse_sizes(args.sizes)
    root = root_gang(args.init_method, timeout, args.device)
    rank = root.rank
    try:
        if rank == 0:
            up = "1 process is" if root.size == 1 else f"{root.size} processes are"
            print(f"gangmesh check: {up} up; building the gangs...", file=sys.stderr, flush=True)
        plan = MeshTopology.from_layout(root.size, layout)
        if args.ranks_per_node is not None:
            check_ranks_per_node(root.size, args.ranks_per_node)
        replicas = None
        if args.lighthouse is not None:
            replicas = join_replicas(root, lighthouse=args.lighthouse, timeout=timeout)
        gangs = create_gangs_from_layout(
            root, layout, timeout=timeout, placement=args.placement or None, replicas=replicas
        )
        plan = gangs.plan
        if args.inject_rank == rank and args.inject_fault != "slow":
            _inject(args.inject_fault)
        per_node = args.ranks_per_node or _ranks_per_node(args) or root.size
        placements = all_gather_objects(root, this_placement(rank, per_node))
        record = layout_record(gangs)
        late = STRAGGLER_SECONDS if args.inject_rank == rank and args.inject_fault == "slow" else 0
        reports = check_gangs(gangs, plan, sizes, args.iters, late=late)
        everything = gather_reports(gangs, reports)
        passed = True
        if everything is not None:
            out = sys.stdout if args.json != "-" else sys.stderr
            passed, summary = report(args, root, plan, everything, sizes, placements, record, out)
            write_summary(args.json, summary)
        if replicas is not None:
            across, line = check_across(replicas, gangs)
            if rank == 0:
                print(line, file=sys.stdout if args.json != "-" else sys.stderr)
            passed = passed and across
            replicas.close()
        return 0 if broadcast_flag(root, passed) else 1
    except GangError as ex:
        sys.stderr.write(f"gangmesh check: {describe_failure(ex, rank)}\n")
        return COLLECTIVE_FAILED


def _inject(fault: str) -> None:
    """A fault, for fault-injection tests: exit without cleanup, die of SIGKILL, or stop."""
    if fault == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)


def local_device(asked: str | None, nproc: int) -> str:
    """The device type of ``nproc`` local processes: ``asked`` (--device), else cuda where
    torch sees a GPU for each, else cpu.

    :raises Failure: cuda asked for, with fewer GPUs than processes.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if asked == "cuda" and gpus < nproc:
        raise Failure(
            f"--device: cuda runs one process per GPU, but torch sees {gpus} GPU"
            f"{'' if gpus == 1 else 's'} for --nproc {nproc}; use --nproc {gpus} or --device cpu"
            if gpus
            else "--device: cuda, but torch sees no GPU on this machine; use --device cpu"
        )
    return asked or ("cuda" if 0 < nproc <= gpus else "cpu")


def root_gang(init_method: str | None, timeout: timedelta, device: str | None = None) -> Gang:
    """The job's root gang: from the launcher's variables (on ``device``, a device type;
    None: setup_root_gang's default), or from ``--init-method`` (each local rank on cuda:RANK
    where ``device`` is cuda, else cpu)."""
    if init_method is None:
        local = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        chosen = None if device is None else local if device == "cuda" else torch.device("cpu")
        return setup_root_gang(chosen, timeout=timeout)
    rank = int(os.environ["RANK"])
    return ProcessGroupGang.create_default_process_group(
        torch.device("cuda", rank) if device == "cuda" else torch.device("cpu"),
        timeout=timeout,
        init_method=init_method,
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
    )


def report(
    args: argparse.Namespace,
    root: Gang,
    plan: MeshTopology,
    everything: list[list[GangReport]],
    sizes: list[int],
    placements: list[Placement],
    record: dict[str, Any],
    out: TextIO,
) -> tuple[bool, dict[str, Any]]:
    """Print the table, nodes, findings and verdict to ``out`` (on rank 0 of ``root``);
    ``placements`` holds every rank of the job, which for a part's report (``plan`` of part
    of the job) leaves out the nodes and findings.

    Whether every gang matched the plan, and the JSON summary.
    """
    table, failures, summary = summarize(plan, everything, sizes)
    layout = plan_title(plan).removeprefix(f"MeshTopology({plan.world_size}, ").removesuffix(")")
    noun = "process" if plan.world_size == 1 else "processes"
    print(f"gangmesh check: {plan.world_size} {noun} on {root.device.type}", file=out)
    print(f"layout: {layout}", file=out)
    print(table, end="", file=out)
    late_lines, summary["stragglers"] = stragglers(everything, placements)
    print("\n".join(late_lines), file=out)
    if len(placements) == plan.world_size:  # a part's report leaves the nodes to the job's
        _print_locality(plan, placements, summary, out)
    if failures:
        print(f"FAILED: {len(failures)} problem(s)", file=out)
        for failure in failures:
            print(f"  - {failure}", file=out)
    else:
        print(f"PASSED: every gang of {plan.world_size} {noun} matches the plan", file=out)
    summary["layout_record"] = record
    return not failures, summary


def _print_locality(
    plan: MeshTopology, placements: list[Placement], summary: dict[str, Any], out: TextIO
) -> None:
    """Print where the ranks run and the locality findings; add both to ``summary``."""
    nodes, scattered = nodes_text(placements)
    print("\n".join([nodes, *(f"  note: {line}" for line in scattered)]), file=out)
    if scattered:  # the launcher interleaved the nodes: their hosts say what is local
        findings = plan.check_locality(cluster_of(placements))
        lines = findings_text(findings)
    else:
        per_node = max(placements.count(p) for p in placements)
        findings = plan.check_locality(per_node) if plan.world_size % per_node == 0 else []
        lines = findings_text(findings, plan=plan, ranks_per_node=per_node)
    print("\n".join(lines), file=out)
    summary["nodes"] = [
        {"host": p.host, "domain": p.site.domain, "rack": p.site.rack, "node": p.node}
        for p in placements
    ]
    summary["locality_findings"] = [
        {"dim": f.dim, "level": f.level, "group": f.group, "nodes": f.nodes,
         "avoidable": f.avoidable, "message": f.message} for f in findings
    ]  # fmt: skip


def write_summary(path: str | None, summary: dict[str, Any]) -> None:
    """Write the JSON summary to ``path``, or to standard output for "-"."""
    if path == "-":
        json.dump(summary, sys.stdout, indent=1)
        print()
    elif path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(summary, file, indent=1)


def _ranks_per_node(args: argparse.Namespace) -> int | None:
    if args.init_method:
        return int(os.environ["LOCAL_WORLD_SIZE"])
    env = read_launch_environment()
    return env.local_world_size if env else None
