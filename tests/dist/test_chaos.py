"""A seeded chaos battery: one rank of a training job breaks at a random moment, in a random way.

Each trial draws, from a generator seeded by the trial's seed:

- the job: a loop of gang calls (dp_shard 2 x tp 2; workers/chaos.py), or real training steps
  (workers/train_faults.py): FSDP2 HSDP (2 x 2), tensor parallel x FSDP2 (2 x 2), a 2-stage
  pipeline schedule beside data parallel 2, or the same with each stage under FSDP2, where
  most collectives are torch's own;
- the victim, any of 4 ranks;
- the kind of fault: an exception, an exit, SIGKILL, SIGSTOP, a hang (alive, it stops
  entering collectives), or a desync (an all-reduce of its own on the root gang that no peer
  makes; in gang loops and HSDP, not in setup: a pipeline's batched sends and DTensor's
  functional collectives raise where no group shows, so no calls are compared there);
- the moment: 0 to 0.4 s from the start of setup (inside ``setup_root_gang``, gloo's connect
  included, inside ``create_gangs``, FSDP2's wrapping, or the first steps), struck by a thread
  of the victim wherever its main thread is; in a gang loop, 0 to 1.5 s into the loop; in
  training, the forward, the backward or the optimizer step of step 1 to 3, at once or 0 to
  0.3 s later (then wherever that leaves the main thread: inside FSDP2's all-gathers and
  reduce-scatters, DTensor's all-reduces, a pipeline's sends);
- how the survivors end: the GangError uncaught, or caught and ``sys.exit(1)`` at once; in
  training also torch's own error uncaught (trained outside ``with gangs:``);
- the launcher: torchrun with its default ``--monitor-interval`` (it stops the survivors
  0.1 s after the first process ends), torchrun looking only after the timeout and 5 s, or
  processes that no launcher watches (rank 0 then serves the job's store, and the reports
  with it).

Each trial asserts that no survivor ends a rank but the victim (a hung one, once), and that
torchrun's summary shows no survivor killed; that every survivor that raised (all of them, where nothing stops them
first) named the victim, its host and how it broke (its pid too, where it ended or
stopped), in ``GangError.culprits`` too, within the timeout and 5 s, with torch's own text
left to ``__cause__`` (where torch's error went uncaught: its last words name the victim);
that torchrun's "Root Cause" is the victim (a hung one too: a survivor on its host ends it);
that a survivor torchrun stopped before it raised says why in one line; and that no process
is left behind. A failure prints the trial and the command that replays it.

The suite runs ``GANGMESH_CHAOS_TRIALS`` trials (default 6) from a seed that changes every
run (``GANGMESH_CHAOS_SEED`` replays one). At length, on a developer's machine::

    GANGMESH_CHAOS_TRIALS=200 python -m pytest -q -n 0 tests/dist/test_chaos.py

A victim that breaks before it reached the job's store (it never arrived) is named by its
rank alone: no host, pid or cause is known of it.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from gangmesh.testing.hostbed import Host
from tests.dist.launch import Run, bare_processes, sessions_alive, torchrun, torchrun_exit_codes

TIMEOUT = 4.0
MONITOR_ABOVE = TIMEOUT + 6  # torchrun looks only after every survivor has raised
TRIALS = int(os.environ.get("GANGMESH_CHAOS_TRIALS", "6"))
FIRST_SEED = int(os.environ.get("GANGMESH_CHAOS_SEED", str(random.SystemRandom().randrange(2**32))))

# What a survivor's error says of the victim, per kind.
FATES = {
    "raise": r"raised ValueError: step \d+: the loss is NaN \(",
    "exit": r"exited with code 3|is gone: it exited or was killed",
    "sigkill": r"was killed by SIGKILL|is gone: it exited or was killed",
    "sigstop": r"is stopped \(SIGSTOP, SIGTSTP or a debugger\)|was killed by SIGKILL",
    "hang": r"did not take part and have not said why|took no part in the collective",
    "desync": r"collectives do not match: global rank \d+ is in all_reduce\(SUM\) on \[3\] ",
}
LAUNCHERS = ("torchrun", "torchrun-monitor-above-timeout", "bare")
JOBS = ("gangs", "hsdp", "tp_fsdp", "pp", "pp_fsdp")


@dataclass(frozen=True)
class Trial:
    seed: int
    job: str
    victim: int
    kind: str
    delay: float
    ending: str
    launcher: str
    moment: str
    step: int = 0

    @classmethod
    def draw(cls, seed: int) -> Trial:
        rng = random.Random(seed)
        job = rng.choice(JOBS)
        phases = ["loop"] if job == "gangs" else ["forward", "backward", "optimizer"]
        moment = rng.choice(["setup", *phases])
        desync = moment != "setup" and job in ("gangs", "hsdp")
        kinds = [k for k in sorted(FATES) if k != "desync" or desync]
        later = rng.random() < 0.5
        delay = 0.4 if moment == "setup" else 1.5 if job == "gangs" else 0.3 if later else 0
        endings = ["raise", "catch"] if job == "gangs" else ["raise", "catch", "torch"]
        return cls(
            seed,
            job=job,
            victim=rng.randrange(4),
            kind=rng.choice(kinds),
            delay=round(rng.uniform(0.0, delay), 3),
            ending=rng.choice(endings),
            launcher=rng.choice(LAUNCHERS),
            moment=moment,
            step=0 if job == "gangs" else rng.randint(1, 3),
        )

    def run(self, out: Path, host: Host | None) -> Run:
        args = [str(out), str(self.victim), self.kind, str(self.delay), self.ending, str(TIMEOUT),
                self.moment]  # fmt: skip
        script = "chaos.py" if self.job == "gangs" else "train_faults.py"
        if self.job != "gangs":
            args += [self.job, str(self.step)]
        watch = f"--monitor-interval={MONITOR_ABOVE:g}"
        options = (watch,) if "monitor" in self.launcher else ()
        if self.launcher == "bare":
            return bare_processes(script, 4, *args, timeout=120, host=host)
        return torchrun(script, 4, *args, timeout=120, options=options, host=host)


def check(trial: Trial, run: Run, found: dict[int, dict], host: str) -> None:
    """What every trial must show (see the module docstring)."""
    victim = found[trial.victim]
    survivors = [r for r in range(4) if r != trial.victim]
    if trial.ending == "torch":
        said = last_words(run.output, survivors)
        found = {r: {**found.get(r, {}), **said.get(r, {})} for r in {*found, *said}}
    raised = [r for r in survivors if "error" in found.get(r, {})]
    # torchrun looking only after the timeout and 5 s stops no survivor before it raises,
    # unless the survivor began its setup late (its timeout runs from there)
    if trial.launcher == "bare" or (trial.launcher != "torchrun" and trial.moment == "loop"):
        assert raised == survivors, run.output
    for rank in raised:
        got = found[rank]
        error = got["error"]
        assert got["culprits"] == [trial.victim], error
        if trial.moment == "setup" and re.search(never_there(trial.victim), error):
            pass  # it broke before it reached the job's store: nothing more is known of it
        elif trial.kind == "hang" and "took no part" not in error:  # alive, unnamed
            assert re.search(rf"global ranks \[{trial.victim}\]\)? on {host} ", error), error
        elif trial.kind == "desync":  # named with the call it is in
            assert re.search(FATES["desync"], error), error
            assert f"global rank {trial.victim} is in all_reduce(SUM) on [3] " in error, error
        else:
            assert f"global rank {trial.victim} on host {host} (pid {victim['pid']}) " in error, (
                error
            )
            assert re.search(FATES[trial.kind], error), error
        # a survivor that starts after the fault has its timeout from its own start
        if "at" in got:  # when torch's error goes uncaught, its last words have no time
            assert got["at"] - max(victim["broke_at"], got["started"]) <= TIMEOUT + 5, error
        assert "GLHF" not in error and ".cc:" not in error, "torch's text is left to __cause__"
        assert got["cause"], "torch's error is chained"
    # no healthy rank is ever ended: only the victim, by one survivor, once
    ended = re.findall(r"global rank (\d+) \(pid \d+\) takes no part: ending it", run.output)
    assert [int(rank) for rank in ended] in ([], [trial.victim]), run.output
    if trial.launcher == "bare":
        return
    killed = [r for r, code in torchrun_exit_codes(run.output).items() if code == -signal.SIGKILL]
    assert set(killed) <= {trial.victim}, run.output
    for rank in set(survivors) - set(raised):  # stopped by torchrun first: it says why
        said = (
            f"global rank {rank} stopped (SIGTERM) after global rank {trial.victim} on host {host}"
        )
        if trial.moment == "loop":
            assert said in run.output, run.output
            continue
        # In setup, the victim may have broken before it reached the job's store, or this
        # survivor may not have reached it (or not even begun its setup: then it is silent).
        blamed = re.search(rf"global rank {rank} stopped \(SIGTERM\) after", run.output)
        assert blamed is None or said in run.output, run.output
        during = re.search(
            rf"global rank {rank} .*during setup; global ranks (\[.*\]) had", run.output
        )
        assert during is None or trial.victim in json.loads(during.group(1)), run.output
    assert "Root Cause (first observed failure):" in run.output, run.output
    root_cause = run.output.split("Root Cause (first observed failure):", 1)[1]
    local = f"rank\\s*: {trial.victim} \\(local_rank: {trial.victim}\\)"
    assert re.search(local, root_cause), run.output


def last_words(output: str, ranks: list[int]) -> dict[int, dict]:
    """What each of ``ranks`` said of the error that ended it, uncaught: torch's, named in its
    last words ("global rank R: GangError: ..."), or a GangError of a gang call (torch prints
    "[rankR]: ...GangError: ..."), as the results of a rank that caught a GangError."""
    said = {}
    for rank in ranks:
        own = rf"global rank {rank}: GangError: (.*)$|^\[rank{rank}\]: \S*GangError: (.*)$"
        found = re.search(own, output, flags=re.M)
        if found:
            error = found.group(1) or found.group(2)
            detail = error.split("): ", 1)[-1]
            culprits = re.findall(r"global ranks? \[?(\d+)", detail)[:1]
            said[rank] = {"error": error, "culprits": [int(c) for c in culprits], "cause": "yes"}
    return said


def never_there(victim: int) -> str:
    """What a survivor says of a victim that broke before it reached the job's store."""
    if victim != 0:  # where it runs beside the survivor, /proc says how it stands
        return rf"rank {victim}( \(pid \d+ is stopped[^)]*\))? did not arrive within"
    return (
        r"rank 0 serves it \(it is gone\)|rank 0 is gone or did not start"
        r"|served by rank 0, did not answer|rank 0 \(pid \d+ is stopped[^)]*\) has not started"
    )


def left_behind(found: dict[int, dict]) -> list[int]:
    """The trial's processes still running (each rank wrote its pid)."""
    pids = [got["pid"] for got in found.values()]
    return [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("index", range(TRIALS))
def test_a_rank_broken_at_random_is_named_by_every_survivor_and_by_torchrun(
    tmp_path, index, quiet_host
):
    trial = Trial.draw(FIRST_SEED + index)
    host = os.uname().nodename if quiet_host is None else quiet_host.name
    started = time.monotonic()
    run = trial.run(tmp_path, quiet_host)
    found = run.results(tmp_path)
    leftovers = left_behind(found) + sessions_alive(run.pids)
    for pid in leftovers:  # ended all the same, then reported
        os.kill(pid, signal.SIGKILL)
    replay = f"GANGMESH_CHAOS_SEED={trial.seed} GANGMESH_CHAOS_TRIALS=1"
    what = f"{trial} ({time.monotonic() - started:.1f} s); replay with {replay}"
    assert run.returncode != 0, f"{what}\n{run.output}"
    assert trial.victim in found, f"{what}\n{run.output}"
    assert not leftovers, f"{what}: processes left behind {leftovers}"
    try:
        check(trial, run, found, host)
    except AssertionError as ex:
        raise AssertionError(f"{what}\n{ex}") from None
