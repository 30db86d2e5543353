"""A rank's own error is its own: nobody else is blamed or ended for it, and torch's errors
stay catchable as the types torch raised.

4 processes under torchrun (tp = 2, timeout 4 s; workers/own_error.py), torchrun looking only
after every survivor has raised (``--monitor-interval`` above the timeout and 5 s).
"""

from __future__ import annotations

import re
import socket

from tests.dist.launch import torchrun, torchrun_exit_codes

WATCH = "--monitor-interval=12"


def test_a_store_error_of_a_rank_s_own_ends_that_rank_alone(tmp_path):
    # rank 1 dies of torch's DistStoreError (a store of its own) inside `with gangs:` while
    # the others are busy in their own code: its error is its own, not a collective's
    run = torchrun("own_error.py", 4, str(tmp_path), "store", timeout=150, options=(WATCH,))
    found = run.results(tmp_path)
    host = socket.gethostname()
    assert "takes no part: ending it" not in run.output, run.output
    assert "took no part in the collective" not in run.output, run.output
    rank_1 = f"global rank 1 on host {host} (pid {found[1]['pid']}) raised DistStoreError: "
    codes = torchrun_exit_codes(run.output)
    for rank in (0, 2, 3):  # each names rank 1 and how it broke, raising or stopped
        if "error" in found.get(rank, {}):
            assert found[rank]["culprits"] == [1], found[rank]
            assert rank_1 in found[rank]["error"], found[rank]
        else:
            assert f"global rank {rank} stopped (SIGTERM) after {rank_1}" in run.output
        # its error ended it, or torchrun's SIGTERM as it ended: never a survivor's SIGKILL
        assert codes[rank] in (1, 143, -15), run.output
    assert codes[1] == 1, run.output  # its own error ended it
    root_cause = run.output.split("Root Cause (first observed failure):", 1)[1]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)", root_cause), run.output
    assert "torch.distributed.DistStoreError: wait timeout" in root_cause, run.output
    assert "GangError" not in root_cause, run.output


def test_torch_s_error_of_a_collective_leaves_the_block_as_the_type_torch_raised(tmp_path):
    # torch's own collectives on a gangmesh group, inside `with gangs:`: what leaves the block
    # names the culprit and is still an instance of the type torch raised
    run = torchrun("own_error.py", 4, str(tmp_path), "backend-caught", timeout=150,
                   options=(WATCH,))  # fmt: skip
    found = run.results(tmp_path)
    for rank in (0, 1, 2):
        got = found[rank]
        assert got["culprits"] == [3], got
        assert got["type"] == "GangError" and got["cause"] in got["caught_as"], got
        assert "exited with code 3" in got["error"], got
