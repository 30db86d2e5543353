"""A peer that breaks inside FSDP2's collectives is named like one that breaks in a gang call.

4 processes under torchrun train FSDP2 HSDP (dp_replicate 2 x dp_shard 2, timeout 5 s;
workers/train_faults.py); rank 3 hangs, is SIGKILLed or raises before its forward of step 2.
Almost every collective of a step is FSDP2's own (all-gathers, reduce-scatters, HSDP's
all-reduce), so torch raises its own error in each survivor: leaving ``with gangs:`` it
becomes a GangError naming rank 3; left uncaught, the survivor's last words name rank 3 and
never itself. torchrun's Root Cause is rank 3 for every fault.
"""

from __future__ import annotations

import re
import socket

import pytest

from tests.dist.launch import torchrun
from tests.dist.test_chaos import last_words
from tests.shown import assert_line_shown

TIMEOUT = 5.0
DOCS_BLOCK = "# rank 3 killed before its forward"  # docs/howto.rst shows these runs' errors
FATES = {
    # a survivor reads the signal from /proc until torchrun (looking every 0.1 s) reaps rank 3
    "sigkill": r"global rank 3 on host \S+ \(pid \d+\) (was killed by SIGKILL|is gone: it exited)",
    "raise": r"global rank 3 on host \S+ \(pid \d+\) raised ValueError: step 2: the loss is NaN",
    "hang": r"global ranks? \[?3\]?\)? .*(did not take part|took no part)",
}
SHOWN = {"sigkill": "killed by SIGKILL", "raise": "raised ValueError", "hang": "did not take part"}


def run_hsdp(out, fault: str, ending: str, options: tuple[str, ...] = ()):
    args = (str(out), "3", fault, "0", ending, f"{TIMEOUT:g}", "forward", "hsdp", "2")
    return torchrun("train_faults.py", 4, *args, timeout=150, options=options)


def assert_root_cause_is_rank_3(output: str) -> None:
    assert "Root Cause (first observed failure):" in output, output
    root_cause = output.split("Root Cause (first observed failure):", 1)[1]
    assert re.search(r"rank\s*: 3 \(local_rank: 3\)", root_cause), output


@pytest.mark.parametrize("fault", sorted(FATES))
def test_every_survivor_of_an_fsdp2_step_names_the_rank_that_broke(tmp_path, fault):
    run = run_hsdp(tmp_path, fault, "raise")
    found = run.results(tmp_path)
    assert run.returncode != 0 and 3 in found, run.output
    raised = [rank for rank in (0, 1, 2) if "error" in found.get(rank, {})]
    assert raised, run.output  # torchrun may stop some before their collective fails
    for rank in raised:
        error = found[rank]["error"]
        assert found[rank]["culprits"] == [3], error
        assert re.search(FATES[fault], error), error
        assert re.match(r"\S+ failed on process group '\w+' \(size 2, rank \d\)", error), error
        assert "FSDP2's" in error, error
        assert found[rank]["at"] - found[3]["broke_at"] <= TIMEOUT + 5, error
        assert "GLHF" not in error and ".cc:" not in error, "torch's text is left to __cause__"
        assert found[rank]["cause"], "torch's error is chained"
    assert_root_cause_is_rank_3(run.output)
    for rank in {0, 1, 2} - set(raised):  # stopped by torchrun first: it says why
        assert f"global rank {rank} stopped (SIGTERM) after global rank 3 on host" in run.output
    assert not re.search(
        r"global rank [012] stopped \(SIGTERM\) after global rank [012] ", run.output
    )
    if 2 in raised and SHOWN[fault] in found[2]["error"]:  # the docs show rank 2's error
        hosts = [socket.gethostname(), socket.getfqdn()]
        errors = [found[2]["error"]]
        assert_line_shown("howto.rst", DOCS_BLOCK, SHOWN[fault], errors, hosts=hosts)


@pytest.mark.parametrize("fault", ["sigkill", "hang"])
def test_torch_s_own_error_uncaught_is_a_consequence_that_names_the_rank_that_broke(
    tmp_path, fault
):
    # trained outside `with gangs:`: torch's RuntimeError ends each survivor; its last words
    # and error file name rank 3, so torchrun's summary does too. torchrun looks seldom, so
    # that most survivors get to their last words; one it stops first says why it stopped
    run = run_hsdp(tmp_path, fault, "torch", (f"--monitor-interval={TIMEOUT + 6:g}",))
    assert run.returncode != 0, run.output
    said = last_words(run.output, [0, 1, 2])
    assert said, run.output
    for rank in {0, 1, 2} - set(said):
        assert f"global rank {rank} stopped (SIGTERM) after global rank 3 on host" in run.output
    for got in said.values():
        assert got["culprits"] == [3], got["error"]
        assert re.search(FATES[fault], got["error"]), got["error"]
    assert_root_cause_is_rank_3(run.output)
    assert not re.search(r"raised RuntimeError", run.output), "a survivor blamed as a culprit"
    if fault == "sigkill":
        hosts = [socket.gethostname(), socket.getfqdn()]
        lines = [f"global rank {rank}: GangError: {got['error']}" for rank, got in said.items()]
        assert_line_shown("howto.rst", "# trained outside", "GangError", lines, hosts=hosts)


@pytest.mark.parametrize(("job", "fault"), [("pp_fsdp", "sigkill"), ("pp", "raise")])
def test_inside_a_pipeline_stage_torch_s_wrapper_is_seen_through(tmp_path, job, fault):
    # A pipeline stage raises its own RuntimeError ("[Stage 1] failed to run forward") from
    # whatever its forward raised: FSDP2's failed all-gather in rank 2, the program's
    # ValueError in rank 3. Both are read as the error inside: rank 2 names rank 3 and FSDP2's
    # collective; rank 3's error, as every survivor and torchrun tell it, is its ValueError.
    args = (str(tmp_path), "3", fault, "0", "raise", f"{TIMEOUT:g}", "forward", job, "2")
    options = (
        f"--monitor-interval={TIMEOUT + 20:g}",
    )  # its first look: after every survivor raised
    run = torchrun("train_faults.py", 4, *args, timeout=150, options=options)
    found = run.results(tmp_path)
    assert run.returncode != 0 and 3 in found, run.output
    for rank in (0, 1, 2):
        assert "error" in found[rank], run.output
        error = found[rank]["error"]
        assert found[rank]["culprits"] == [3], error
        assert re.search(FATES[fault], error), error
        assert "failed to run forward" not in error, error
    if job == "pp_fsdp":
        assert re.match(r"all_gather failed on process group '\w+' .*FSDP2's", found[2]["error"])
    assert_root_cause_is_rank_3(run.output)
    root_cause = run.output.split("Root Cause (first observed failure):", 1)[1]
    assert fault != "raise" or "ValueError: step 2: the loss is NaN" in root_cause, run.output


@pytest.mark.parametrize("fault", ["hang"])
def test_a_tensor_parallel_step_s_failure_names_its_collective_and_group(tmp_path, fault):
    # TP x FSDP2 (tp 2 x dp_shard 2): DTensor's all-reduces are functional collectives, whose
    # group torch does not say where their wait fails; each survivor still says which
    # collective and which group broke, names rank 3, and a hung rank 3 is ended once
    args = (str(tmp_path), "3", fault, "0", "raise", f"{TIMEOUT:g}", "forward", "tp_fsdp", "2")
    options = (f"--monitor-interval={TIMEOUT + 6:g}",)
    run = torchrun("train_faults.py", 4, *args, timeout=150, options=options)
    found = run.results(tmp_path)
    assert run.returncode != 0 and 3 in found, run.output
    raised = [rank for rank in (0, 1, 2) if "error" in found.get(rank, {})]
    assert raised, run.output
    for rank in raised:
        error = found[rank]["error"]
        assert found[rank]["culprits"] == [3], error
        assert re.search(FATES[fault], error), error
        assert re.match(r"[a-z_ ]+ failed on process group '\w+' \(size \d, rank \d", error), error
        assert not error.startswith("a collective failed"), error
    assert len(re.findall(r"takes no part: ending it", run.output)) <= 1, run.output
    assert_root_cause_is_rank_3(run.output)
    # torchrun's summary shows each survivor's GangError first, not torch's gloo text
    failures = run.output.split("Failures:", 1)[-1].split("Root Cause", 1)[0]
    for rank in raised:
        shown = re.search(rf"rank\s*: {rank} \(local_rank.*?traceback : (.*)", failures, re.S)
        assert shown is None or shown.group(1).startswith("GangError: "), failures
