"""A joined job broken and restarted many times in a row, while the other trains on.

    python -m benchmarks.join_stress [--restarts 50] [--kinds raise,kill,stop,hang] [--json F]

A trainer (FSDP-like shards over 2 gloo processes) pushes its weights every step to a
generator (tp 2) joined at a join server this process serves; the generator runs under
``torchrun --max-restarts N``, and in each attempt but the last one of its ranks breaks as it
enters its second push (the kinds in turn, the ranks in turn); the trainer names each fault,
trains on, and meets each new attempt in the next epoch, which gets the current weights. After
each epoch's first push (the first before any fault) the trainer's rank 0 counts its open
file descriptors, its threads and the keys of the join's store; they must not grow. No output
may say EADDRINUSE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import gangmesh as gm
from benchmarks.report import free_port, json_argument, print_table, write_json

TITLE = "A joined generator broken and restarted in a row (torchrun --max-restarts), gloo"
TIMEOUT = timedelta(seconds=3)
WAIT = timedelta(seconds=120)
SHARDS = {
    "trainer": {"w": gm.TensorShards((256, 256), "float32", {0: ("dp_shard",)})},
    "generator": {"w": gm.TensorShards((256, 256), "float32", {0: ("tp",)})},
}
LAYOUTS = {"trainer": {"dp_shard": 2}, "generator": {"tp": 2}}


def break_down(kind: str) -> None:
    """What the victim does as it enters its second push."""
    if kind == "raise":
        raise ValueError("the rollout buffer is corrupt")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "hang":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.sigtimedwait([signal.SIGUSR1], 300)


def join(role: str, root: gm.Gang, address: str) -> gm.JoinedJobs:
    other = "generator" if role == "trainer" else "trainer"
    plan = gm.MeshTopology(root.size, **LAYOUTS[role])
    return gm.join_jobs(root, job=role, other=other, address=address, plan=plan,
                        shards=SHARDS[role], timeout=TIMEOUT, wait=WAIT)  # fmt: skip


def victim(out: Path, address: str, restarts: int, kinds: list[str]) -> None:
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    root = gm.setup_root_gang(timeout=timedelta(seconds=30))
    started = time.monotonic()
    joined = join("generator", root, address)
    took = time.monotonic() - started
    if root.rank == 0:
        Path(out, f"attempt{attempt}.json").write_text(json.dumps({"join_s": took}))
    mine = {"w": torch.zeros(128, 256)}
    received = []
    while len(received) < (3 if attempt == restarts else 2):
        if attempt < restarts and len(received) == 1 and root.rank == attempt % 2:
            kind = kinds[attempt % len(kinds)]
            said = {"pid": os.getpid(), "rank": root.rank, "kind": kind, "at": time.time()}
            Path(out, f"victim{attempt}.json").write_text(json.dumps(said))
            break_down(kind)
        version = joined.receive(mine)
        if version is not None:
            received.append(version)
    if root.rank == 0:
        Path(out, f"attempt{attempt}.json").write_text(
            json.dumps({"join_s": took, "got": received})
        )
    joined.close()
    root.close()


def counts(store: Any) -> dict[str, int]:
    """This process's open descriptors and threads, and the join store's keys."""
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": len(os.listdir("/proc/self/task")),
        "keys": int(store.num_keys()),
    }


def survivor(out: Path, address: str, restarts: int) -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=30))
    joined = join("trainer", root, address)
    host, port = address.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=30))
    weights = {"w": torch.randn(128, 256)}
    errors: list[dict[str, Any]] = []
    samples: list[dict[str, int]] = []
    step, fresh, last = 0, False, 0
    while len(errors) < restarts or last < 3:
        step += 1
        weights["w"].add_(1.0)  # a step of training
        try:
            pushed = joined.push(step, weights)
        except gm.GangError as error:
            errors.append(
                {"error": str(error), "culprits": list(error.culprits), "at": time.time()}
            )
            fresh = False
            if root.rank == 0:  # every rank has its error (they agreed): end a stopped victim
                said = json.loads(Path(out, f"victim{len(errors) - 1}.json").read_text())
                with contextlib.suppress(ProcessLookupError):
                    os.kill(said["pid"], signal.SIGKILL)
            continue
        if pushed and not fresh:
            fresh = True
            samples.append(counts(store))
        if pushed and len(errors) == restarts:
            last += 1  # the pushes of the victim's last attempt
        elif not pushed:
            time.sleep(0.05)  # the time a step of training takes
    if root.rank == 0:
        Path(out, "survivor.json").write_text(json.dumps({"errors": errors, "samples": samples}))
    joined.close()
    root.close()


def launch(role: str, out: str, address: str, restarts: int, kinds: str) -> subprocess.Popen[bytes]:
    """One job of 2 processes under torchrun, its output in ``out/ROLE.log``."""
    again = [f"--max-restarts={restarts}"] if role == "generator" else []
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
        "--start-method=fork", *again, "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        "-m", "benchmarks.join_stress", "--worker", role, out, address,
        "--restarts", str(restarts), "--kinds", kinds,
    ]  # fmt: skip
    log = open(Path(out, f"{role}.log"), "wb")  # noqa: SIM115 (closed by the child's end)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def run(restarts: int, kinds: str) -> dict[str, Any]:
    with gm.serve_join() as server, tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        jobs = {role: launch(role, out, server.address, restarts, kinds) for role in LAYOUTS}
        for role, job in jobs.items():
            if job.wait(timeout=60 * restarts) != 0:
                raise SystemExit(Path(out, f"{role}.log").read_text()[-4000:])
        took = time.monotonic() - start
        said = json.loads(Path(out, "survivor.json").read_text())
        victims = [json.loads(Path(out, f"victim{k}.json").read_text()) for k in range(restarts)]
        attempts = [
            json.loads(Path(out, f"attempt{k}.json").read_text()) for k in range(1, restarts + 1)
        ]
        logs = "".join(Path(out, f"{role}.log").read_text(errors="replace") for role in LAYOUTS)
        keys_after = server.keys()
    named = sum(
        error["culprits"] == [v["rank"]] and f"(pid {v['pid']})" in error["error"]
        for error, v in zip(said["errors"], victims, strict=True)
    )
    samples, joins = said["samples"], [a["join_s"] for a in attempts]
    return {
        "restarts": restarts, "named": named, "rejoined": len(samples),
        "join_s_median": statistics.median(joins), "join_s_max": max(joins),
        **{what: _series([s[what] for s in samples]) for what in ("fds", "threads", "keys")},
        "keys_after": keys_after,
        "eaddrinuse": len(re.findall(r"EADDRINUSE|[Aa]ddress already in use", logs)),
        "seconds": took,
    }  # fmt: skip


def _series(values: list[int]) -> str:
    """``first->last (max N)``: a count over the epochs."""
    return f"{values[0]}->{values[-1]} (max {max(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--restarts", type=int, default=50)
    parser.add_argument("--kinds", default="raise,kill,stop,hang")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        role, out, address = args.worker
        if role == "trainer":
            survivor(Path(out), address, args.restarts)
        else:
            victim(Path(out), address, args.restarts, args.kinds.split(","))
        return
    rows = [run(args.restarts, args.kinds)]
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
