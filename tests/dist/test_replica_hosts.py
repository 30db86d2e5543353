"""Two replica groups on two hosts of a bed, the lighthouse on host0: group 1 loses a process
(SIGKILL) or its host's link at a random moment, drawn by a seeded generator, and group 0
trains on without a restart; a group restarted by torchrun heals from group 0."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from gangmesh.testing.hostbed import HostBed
from gangmesh.testing.netns import HOST_KINDS, namespaces_unavailable, processes_in
from gangmesh.tools.lighthouse import lighthouse_command
from tests.dist.launch import REPO
from tests.dist.multihost import OnHost, run_on_hosts

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "-"),
]

EXAMPLES = REPO / "docs/examples"
RECIPE = EXAMPLES / "fault_tolerant_hsdp.py"
HEARTBEAT_S = 1.0
JOIN_TIMEOUT_S = 60.0
"""How long the lighthouse waits for a group that has not asked to join a quorum: a survivor
that waited for the lost group would stall this long (its usual stall, the heartbeat timeout
and a step, is measured by benchmarks/replica_bench.py)."""
REPLICA_TIMEOUT_S = 0.5
"""Below the heartbeat timeout: a cut-off group's collective fails before the lighthouse
drops the group, so the survivors' next quorum is the first without it."""
SEED = int(os.environ.get("GANGMESH_CHAOS_SEED", "0")) or random.randrange(1 << 30)
_DRAW = random.Random(SEED)
AFTER_STEP, DELAY_S = _DRAW.randint(1, 4), _DRAW.uniform(0, 0.3)
"""When the fault strikes: after group 1's AFTER_STEP-th step together with group 0, and
DELAY_S seconds into the next (drawn from the seed, printed on failure)."""


@pytest.fixture
def recipe():
    """The recipe as a module: its reference and its records' form."""
    spec = importlib.util.spec_from_file_location("fault_tolerant_hsdp", RECIPE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


def records(out: Path, group: int) -> list[dict]:
    path = out / f"group{group}.jsonl"
    # the lines written whole: a writer may be halfway through the last one
    whole = path.read_text().split("\n")[:-1] if path.exists() else []
    return [json.loads(line) for line in whole]


def committed(out: Path, group: int) -> list[dict]:
    return [r for r in records(out, group) if r["event"] == "committed"]


def joint_steps(out: Path) -> int:
    """The steps group 1 committed together with group 0."""
    return sum(r["groups"] == 2 for r in committed(out, 1))


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # a file another process appends to: nothing to wait on but time
    return True


def launches(bed: HostBed, out: Path, *, restarts: bool, group0_ends_alone: bool) -> list[OnHost]:
    """Each replica group as a torchrun launch of 2 processes on a host of its own: group 0 on
    host0, group 1 on host1 (restarted once where ``restarts``)."""
    recipe = ["--lighthouse", f"{bed.hosts[0].address}:29510", "--out", str(out),
              "--steps", "400", "--replica-timeout", str(REPLICA_TIMEOUT_S)]  # fmt: skip
    launched = []
    for group in (0, 1):
        torchrun = ["--nproc-per-node=2", f"--max-restarts={int(restarts and group == 1)}",
                    "--monitor-interval=0.2", "--master-addr=127.0.0.1", "--master-port=29500"]  # fmt: skip
        ends = ["--groups", "1" if group0_ends_alone and group == 0 else "2"]
        env = {"GANGMESH_REPLICA_GROUP": str(group), "RUST_LOG": "warn"}
        argv = [*torchrun, str(RECIPE), *recipe, *ends]
        launched.append(OnHost(group, "torch.distributed.run", argv, env, module=True))
    return launched


def start_lighthouse(bed: HostBed) -> subprocess.Popen[bytes]:
    command = lighthouse_command(1, f"{bed.hosts[0].address}:29510",
                                 timedelta(seconds=HEARTBEAT_S), timedelta(seconds=JOIN_TIMEOUT_S))  # fmt: skip
    return subprocess.Popen(bed.command(0, command), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


def workers_on(bed: HostBed, host: int) -> dict[int, int]:
    """The recipe's processes on ``host`` by their RANK."""
    holder = bed.hosts[host].holder
    inodes = [os.stat(f"/proc/{holder}/ns/{kind}").st_ino for kind in HOST_KINDS]
    found = {}
    for pid in processes_in(inodes):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(RECIPE).encode() in command and b"torch.distributed.run" not in command:
            for entry in environ:
                if entry.startswith(b"RANK="):
                    found[int(entry[5:])] = pid
    return found


def check_reference(recipe, out: Path, cut_at: float | None = None) -> None:
    """Every committed step against one process trained on the groups that took part. A
    group cut off at ``cut_at`` may still commit the step whose reduction reached it but
    not group 0, which then takes that step alone: that branch ends with the cut group
    (torchft asks each group alone whether to commit), and is left out."""
    cut_off = [r for r in committed(out, 1) if cut_at is None or r["time"] < cut_at]
    every = committed(out, 0) + cut_off
    want = recipe.reference(every)
    for record in every:
        worst = (torch.tensor(record["weights"]) - want[record["step"]]).abs().max().item()
        assert worst <= 1e-5, f"step {record['step']} differs from the reference by {worst}"


def check_group0_went_on(out: Path, fault_time: float, seed: int) -> float:
    """Group 0 committed every step in turn, never restarted, and committed a step without
    group 1 after the fault, before the lighthouse's join timeout; when it did."""
    mine = committed(out, 0)
    assert [r["step"] for r in mine] == list(range(len(mine))), f"seed {seed}: a step was lost"
    assert {r["attempt"] for r in records(out, 0)} == {0}, f"seed {seed}: group 0 restarted"
    alone = [r["time"] for r in mine if r["time"] > fault_time and r["groups"] == 1]
    assert alone, f"seed {seed}: group 0 committed no step without group 1 after the fault"
    stall = alone[0] - fault_time
    print(f"seed {seed}: group 0 committed a step without group 1 {stall:.2f} s after the fault")
    assert stall < JOIN_TIMEOUT_S, f"seed {seed}: group 0 waited {stall:.2f} s for group 1"
    return alone[0]


def with_fault(bed: HostBed, out: Path, strike, *, restarts: bool, group0_ends_alone: bool):
    """Run both groups and the lighthouse; ``strike()`` once group 1 has taken its drawn
    number of steps together with group 0 and the drawn delay within a step has passed.
    The run, and when the fault struck (None: never)."""
    lighthouse = start_lighthouse(bed)
    fault: dict[str, float] = {}

    def striker() -> None:
        if wait_for(lambda: joint_steps(out) >= AFTER_STEP, 120):
            time.sleep(DELAY_S)  # the fault's moment within a step, drawn
            fault["time"] = time.time()
            strike()

    thread = threading.Thread(target=striker, daemon=True)
    thread.start()
    try:
        run = run_on_hosts(bed, launches(bed, out, restarts=restarts,
                                         group0_ends_alone=group0_ends_alone), timeout=200)  # fmt: skip
    finally:
        lighthouse.kill()
        lighthouse.wait()
    thread.join(timeout=5)
    assert "time" in fault, f"seed {SEED}: the fault never struck\n{run.output}"
    return run, fault["time"]


def test_group1_loses_a_process_group0_goes_on_and_the_restarted_group_heals(bed, tmp_path, recipe):
    victim = random.Random(SEED + 1).randrange(2)
    print(
        f"seed {SEED}: SIGKILL of group 1's rank {victim} {DELAY_S:.3f} s after step {AFTER_STEP}"
    )
    run, struck = with_fault(bed, tmp_path, lambda: os.kill(workers_on(bed, 1)[victim], 9),
                             restarts=True, group0_ends_alone=False)  # fmt: skip
    assert run.returncode == 0, f"seed {SEED}\n{run.output}"
    went_on = check_group0_went_on(tmp_path, struck, SEED)
    back = [r for r in committed(tmp_path, 1) if r["attempt"] == 1]
    assert back, f"seed {SEED}: group 1 did not come back\n{run.output}"
    assert went_on < back[0]["time"], f"seed {SEED}: group 0 waited for group 1's restart"
    same_step = {r["step"]: r for r in committed(tmp_path, 0)}[back[0]["step"]]
    assert back[0]["weights"] == pytest.approx(same_step["weights"], abs=1e-6), "healed weights"
    check_reference(recipe, tmp_path)


def test_group1s_host_cut_off_mid_step_group0_goes_on_alone(bed, tmp_path, recipe):
    print(f"seed {SEED}: host1 cut off {DELAY_S:.3f} s after step {AFTER_STEP}")

    def cut() -> None:
        bed.cut(1)
        # group 1 cannot end by itself while cut off: once group 0 is done, end it
        if wait_for(lambda: any(r["event"] == "done" for r in records(tmp_path, 0)), 120):
            bed.kill(1)

    run, struck = with_fault(bed, tmp_path, cut, restarts=False, group0_ends_alone=True)
    assert any(r["event"] == "done" for r in records(tmp_path, 0)), f"seed {SEED}\n{run.output}"
    check_group0_went_on(tmp_path, struck, SEED)
    check_reference(recipe, tmp_path, cut_at=struck)
