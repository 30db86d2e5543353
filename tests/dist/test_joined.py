"""Two jobs launched apart (two torchrun commands, each its own world, store and layout),
joined at a join server this test serves: weight pushes bit-identical from layout to layout,
each fault of either job named on every rank of the other within the timeout and 3 s while
that one trains on, and the broken job, restarted by torchrun, met again in the next epoch.

workers/joined_push.py pushes from FSDP2 x TP (2 x 2) to TP 2 x 2 replicas. In
workers/joined_faults.py the trainer (FSDP2 over 2 processes) pushes to the generator (tp 2),
and each job in turn breaks, attempt after attempt of its torchrun (raise, kill, stop, hang),
in two runs side by side. workers/joined_bridges.py uses a bridge only, through a restart;
workers/joined_close.py closes a join at once.
"""

from __future__ import annotations

import json
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

import gangmesh as gm
from tests.dist.launch import REPO, Run, torchrun
from tests.shown import assert_line_shown, assert_output_shown

pytestmark = pytest.mark.dist

KINDS = ("raise", "kill", "stop", "hang")
TIMEOUT = 3.0
"""The workers' join timeout, seconds."""
FATES = {
    "raise": r"raised ValueError: the rollout buffer is corrupt \(",
    "kill": r"was killed by SIGKILL|is gone: it exited or was killed",
    "stop": r"is stopped \(SIGSTOP, SIGTSTP or a debugger\)",
    "hang": r"is alive but never entered it: it is at joined_faults\.py:\d+ in break_down: ",
}
COUNTERS = 2
"""Keys a join leaves in its server's store: each job's count of its arrivals."""
OTHER = {"trainer": "generator", "generator": "trainer"}


@dataclass
class Launch:
    """One job's torchrun command: the worker, its processes, arguments, torchrun options."""

    worker: str
    nproc: int
    args: tuple[str, ...]
    options: tuple[str, ...] = ()
    """torchrun's options; its workers are forked from it (``--start-method=fork``), which has
    imported torch: a restart takes a second, not the several a new interpreter takes."""


def launched_apart(server: gm.JoinServer, out: Path, jobs: dict[str, Launch]) -> dict[str, Run]:
    """Each job (by name) under a torchrun of its own, all at once, joined at ``server``."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        runs = {
            name: pool.submit(
                torchrun,
                job.worker,
                job.nproc,
                str(out),
                name,
                server.address,
                *job.args,
                timeout=240,
                options=("--start-method=fork", *job.options),
            )
            for name, job in jobs.items()
        }
        return {name: run.result() for name, run in runs.items()}


def results(folder: Path) -> dict[int, dict[str, Any]]:
    return {
        int(p.stem.removeprefix("rank")): json.loads(p.read_text())
        for p in folder.glob("rank*.json")
    }


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    out = tmp_path_factory.mktemp("pushed")
    with gm.serve_join() as server:
        args = ("fsdp_tp", "tp_dp", "3")
        runs = launched_apart(server, out, {
            "trainer": Launch("joined_push.py", 4, args),
            "generator": Launch("joined_push.py", 4, args),
        })  # fmt: skip
        keys = server.keys()
    for run in runs.values():
        assert run.returncode == 0, run.output
    return results(out / "trainer"), results(out / "generator"), keys


def test_a_push_from_fsdp_x_tp_to_tp_replicas_is_bit_identical_to_the_whole_weights(pushed):
    trainer, generator, _ = pushed
    for step, said in enumerate(trainer[0]["steps"]):
        assert said["pushed"]
        for g, got in generator.items():
            assert got["steps"][step]["version"] == step
            wanted = {name: digests[g] for name, digests in said["wanted"].items()}
            assert got["steps"][step]["held"] == wanted, (step, g)


def test_a_bridge_joins_the_ranks_asked_and_bad_input_is_refused_by_name(pushed):
    trainer, generator, _ = pushed
    for rank, got in generator.items():
        assert got["bridged"] == [rank, 5, 42.0]  # the generator's ranks first: jobs by name
    assert trainer[0]["bridged"] == [4, 5, 42.0] and "bridged" not in trainer[1]
    for rank, got in [*trainer.items(), *generator.items()]:
        assert got["bad_rank"] == "generator: expected unique ranks in [0, 4), got [4]", rank
        assert got["twice"] == "generator: expected unique ranks in [0, 4), got [1, 1]", rank
        assert "ranks_by_job: unknown job 'critic'" in got["bad_job"], rank
        assert re.match(
            r"tensors\['0\.bias'\]: expected this rank's shard \[\d+:\d+\] of \[16\]",
            got["bad_tensors"],
        )


def test_every_trainer_rank_sends_its_own_shard_and_no_more(pushed):
    trainer, _, keys = pushed
    total, senders = trainer[0]["total"], trainer[0]["senders"]
    for rank, said in trainer.items():
        # a quarter each (pieces padded to 16 bytes in the buffer): no rank gathers the rest
        assert total / senders <= said["sent"] <= total / senders + 16 * 8, (rank, said["sent"])
    assert keys == COUNTERS


def test_a_join_closed_at_once_by_each_rank_0_still_meets_its_slower_ranks(tmp_path):
    """Each rank 0 closes its join (taking its job's keys out) before its rank 1 read how
    the meeting went: rank 1 still joins, in the same epoch, and no key is left."""
    gate = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with gm.serve_join() as server:
        runs = launched_apart(server, tmp_path, {
            job: Launch("joined_close.py", 2, (str(gate.port),)) for job in ("trainer", "generator")
        })  # fmt: skip
        keys = server.keys()
    for run in runs.values():
        assert run.returncode == 0, run.output
    for job in ("trainer", "generator"):
        said = results(tmp_path / job)
        assert said[1] == said[0] == {"epoch": 1, "other_size": 2}, (job, said)
    assert keys == COUNTERS


@pytest.fixture(scope="module")
def bridged(tmp_path_factory):
    """workers/joined_bridges.py: jobs that use only a bridge, the generator killed once."""
    out = tmp_path_factory.mktemp("bridged")
    with gm.serve_join() as server:
        runs = launched_apart(server, out, {
            "trainer": Launch("joined_bridges.py", 2, ()),
            "generator": Launch("joined_bridges.py", 2, (), ("--max-restarts=1",)),
        })  # fmt: skip
        keys = server.keys()
    for run in runs.values():
        assert run.returncode == 0, run.output
    return results(out / "trainer"), results(out / "generator"), keys


def test_jobs_that_only_use_bridges_meet_again_after_a_restart(bridged):
    trainer, generator, keys = bridged
    victim = generator.pop(2)["pid"]
    (error,) = trainer[0]["errors"]  # the epoch is over at once: no second bridge tried in it
    assert error["job"] == "generator" and error["culprits"] == [1], error
    assert re.search(rf"rank 1 of job generator on host \S+ \(pid {victim}\) "
                     f"(?:{FATES['kill']})", error["error"]), error  # fmt: skip
    # both trainer ranks (rank 1 in no bridge) agreed: the broken epoch over, then a later one
    assert trainer[0]["met_after_error"] == trainer[1]["met_after_error"]
    first, *later = trainer[0]["met_after_error"]
    assert first[1] is False and later[-1][1] is True and later[-1][0] > first[0], first
    after = trainer[0]["sent"][-3:]
    assert all(epoch == trainer[0]["epoch"] > first[0] for _, epoch in after), after
    for rank in (0, 1):  # the restarted generator got what was sent in its epoch
        assert generator[rank] == {"attempt": 1, "got": after, "epoch": trainer[0]["epoch"]}
    assert keys == COUNTERS


def breaking(server: gm.JoinServer, out: Path, victim: str) -> dict[str, Run]:
    """The trainer and the generator, joined at ``server``: ``victim`` breaks in each of its
    torchrun's attempts but the last, one kind of fault after another."""
    restarts = (f"--max-restarts={len(KINDS)}",)
    return launched_apart(server, out, {
        job: Launch("joined_faults.py", 2, (victim, ",".join(KINDS)), restarts if job == victim else ())
        for job in ("trainer", "generator")
    })  # fmt: skip


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """Two runs side by side: in one the generator breaks, in the other the trainer; what the
    survivors said, what the victims did, and the keys left in each join's store."""
    out = tmp_path_factory.mktemp("faults")
    found = {}
    with gm.serve_join() as first, gm.serve_join() as second, ThreadPoolExecutor(2) as pool:
        servers = {"generator": first, "trainer": second}
        started = {v: pool.submit(breaking, server, out / v, v) for v, server in servers.items()}
        runs = {victim: run.result() for victim, run in started.items()}
        keys = {victim: server.keys() for victim, server in servers.items()}
    for victim, jobs in runs.items():
        for run in jobs.values():
            assert run.returncode == 0, run.output
        folder = out / victim
        attempts = {p.stem: json.loads(p.read_text()) for p in (folder / "attempts").glob("*.json")}
        found[victim] = {
            "survivor": results(folder / "survivor"),
            "victims": results(folder / "victim"),
            "attempts": attempts,
            "keys": keys[victim],
        }
    return found


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("victim", ["generator", "trainer"])
def test_every_rank_of_the_other_job_names_the_fault_within_the_timeout_and_3_s(
    faults, victim, kind
):
    attempt = KINDS.index(kind)
    broke = faults[victim]["victims"][attempt]
    assert broke["kind"] == kind
    for rank, said in faults[victim]["survivor"].items():
        error = said["errors"][attempt]
        text = error["error"]
        assert error["job"] == victim and error["culprits"] == [broke["rank"]], text
        who = rf"rank {broke['rank']} of job {victim} on host {re.escape(said['host'])} \(pid {broke['pid']}\) "
        assert re.search(who + f"(?:{FATES[kind]})", text), text
        assert error["at"] - broke["broke_at"] <= TIMEOUT + 3, (rank, text)
        assert "GLHF" not in text and ".cc:" not in text, "torch's text is left to __cause__"
        # the survivor trained on, with its own groups, after the fault
        assert error["own_steps_after"] > 0, text


@pytest.mark.parametrize("victim", ["generator", "trainer"])
def test_the_restarted_job_joins_the_next_epoch_and_the_pushes_go_on(faults, victim):
    survivor = faults[victim]["survivor"]
    for said in survivor.values():
        after = [[t for t in said["transfers"] if t["after"] == n] for n in range(len(KINDS) + 1)]
        assert all(after), "a transfer after each fault, and before the first"
        epochs = [t[0]["epoch"] for t in after]
        assert epochs == sorted(set(epochs)), "each restart met in a later epoch"
    attempts = faults[victim]["attempts"]
    for rank in (0, 1):
        last = attempts[f"{len(KINDS)}-{rank}"]
        assert len(last["transfers"]) == 3, "the last attempt ran through"
    assert faults[victim]["keys"] == COUNTERS, "no key left behind by 5 attempts"


def test_a_restarted_generator_gets_the_trainer_s_current_weights(faults):
    trainer = faults["generator"]["survivor"]
    pushed = {t["version"]: t["wanted"] for t in trainer[0]["transfers"]}
    for name, record in faults["generator"]["attempts"].items():
        generator_rank = int(name.split("-")[1])
        for got in record["transfers"]:
            wanted = {n: digests[generator_rank] for n, digests in pushed[got["version"]].items()}
            assert got["held"] == wanted, (name, got["version"])


SHOWN = {
    "raise": "raised ValueError",
    "kill": "is gone",
    "stop": "is stopped",
    "hang": "is alive but never entered it",
}
"""The words of the line docs/joined.rst shows, per fault."""
KILLED = {"was killed by SIGKILL": "is gone: it exited or was killed, and left no report"}
"""A killed process's end, as /proc shows it before and after its launcher reaps it."""
ENDED = {**KILLED, f"(timed out after {TIMEOUT:g} s)": "(a peer's connection closed)"}
"""The same, and a process that ended as slowly as the timeout (its exit's teardown)."""
DOCS_BLOCK = "# the generator's rank raised"


def test_the_docs_show_what_a_trainer_rank_says_of_each_fault(faults):
    survivor = faults["generator"]["survivor"]
    hosts = [said["host"] for said in survivor.values()]
    for attempt, kind in enumerate(KINDS):
        errors = [said["errors"][attempt]["error"] for said in survivor.values()]
        alike = ENDED if kind in ("raise", "kill") else {}
        assert_line_shown("joined.rst", DOCS_BLOCK, SHOWN[kind], errors, hosts=hosts, alike=alike)


@pytest.fixture(scope="module")
def rl_loop():
    """docs/examples/rl_jobs.py: the trainer, and the generator killed at version 3 once."""
    script = REPO / "docs/examples/rl_jobs.py"
    with gm.serve_join() as server, ThreadPoolExecutor(2) as pool:
        options = ("--start-method=fork",)
        trainer = pool.submit(torchrun, script, 2, "trainer", server.address, timeout=240,
                              options=options)  # fmt: skip
        generator = pool.submit(torchrun, script, 2, "generator", server.address, "--kill-at",
                                "3", timeout=240, options=(*options, "--max-restarts=1"))  # fmt: skip
        return trainer.result(), generator.result(), server.keys()


def test_the_rl_loop_of_the_docs_trains_through_a_generator_restart(rl_loop):
    trainer, generator, keys = rl_loop
    assert trainer.returncode == 0, trainer.output
    assert generator.returncode == 0, generator.output
    hosts = [socket.gethostname()]
    said = trainer.output.replace(*next(iter(KILLED.items()))[::-1])
    assert_output_shown(
        "joined.rst",
        "$ torchrun --nproc-per-node 2 --master-port 29500 docs/examples/rl_jobs.py trainer",
        said,
        hosts=hosts,
    )
    assert_output_shown(
        "joined.rst",
        "$ torchrun --nproc-per-node 2 --master-port 29501 --max-restarts 1",
        generator.output,
        hosts=hosts,
    )
    assert keys == COUNTERS
