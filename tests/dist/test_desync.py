"""Ranks that enter different collectives are named, with the call each is in, on every rank.

4 gloo processes (tp 2 x dp 2, timeout 4 s; workers/desync.py) step together three times,
then part: another op on the same gang, or a cycle of ranks each waiting in the other gang,
or another shape. Every rank's GangError says which collective each mismatched peer is in
(gang, op, shape, the gang's call number) and its own, within the timeout and 5 s. A rank
that hangs in no collective is named as not taking part, also by a rank blocked behind
another. The errors docs/howto.rst shows are these runs' own.
"""

from __future__ import annotations

import socket

import pytest

from tests.dist.launch import bare_jobs
from tests.shown import assert_line_shown

pytestmark = pytest.mark.dist

TIMEOUT_S = 4.0
MODES = ("op", "gang", "shape", "hang")
DOCS_BLOCK = "# rank 3 broadcasts on its tp gang"
VALUES = "on [8] torch.float32"


@pytest.fixture(scope="module")
def found(tmp_path_factory, quiet_host):
    """Every mode's job, launched at the same time: each waits out a timeout."""
    jobs = bare_jobs("desync.py", 4, tmp_path_factory.mktemp("desync"), MODES, host=quiet_host)
    results = {}
    for mode, (run, out) in jobs.items():
        results[mode] = run.results(out)
        assert sorted(results[mode]) == [0, 1, 2, 3], run.output
    return results


def in_time(got: dict) -> bool:
    return got["at"] - got["entered"] <= TIMEOUT_S + 5


def test_another_op_on_the_same_gang_is_named_on_both_sides_and_by_the_ranks_waiting(found):
    got = found["op"]
    reduce = f"all_reduce(SUM) {VALUES}, call 4"
    broadcast = f"broadcast(source_rank=0) {VALUES}, call 4"
    expected = {
        2: f"collectives do not match: global rank 3 is in {broadcast} of the gang; "
        f"this process is in {reduce} of gang 'tp'",
        3: f"collectives do not match: global rank 2 is in {reduce} of the gang; "
        f"this process is in {broadcast} of gang 'tp'",
    }
    for rank in (0, 1):  # their tp call ended; their barrier waits for ranks 2 and 3
        expected[rank] = (
            f"collectives do not match: global rank 2 is in {reduce} of gang 'tp'; "
            f"global rank 3 is in {broadcast} of gang 'tp'; this process is in barrier"
        )
    for rank, text in expected.items():
        assert text in got[rank]["error"], got[rank]["error"]
        assert got[rank]["culprits"] == ([3] if rank == 2 else [2] if rank == 3 else [2, 3])
        assert in_time(got[rank]), got[rank]


def test_a_cycle_of_ranks_each_in_another_gang_is_named_on_every_rank(found):
    got = found["gang"]
    # rank 0 waits in tp for rank 1, in dp for rank 3, in tp for rank 2, in dp for rank 0
    waits = {0: (1, "dp", "tp"), 1: (3, "tp", "dp"), 3: (2, "dp", "tp"), 2: (0, "tp", "dp")}
    for rank, (peer, theirs, mine) in waits.items():
        error = got[rank]["error"]
        assert (
            f"collectives do not match: global rank {peer} is in all_reduce(SUM) {VALUES}, "
            f"call 4 of gang '{theirs}'; this process is in all_reduce(SUM) {VALUES}, "
            f"call 4 of gang '{mine}'"
        ) in error, error
        assert got[rank]["culprits"] == [peer], error
        assert in_time(got[rank]), got[rank]


def test_a_shape_that_gloo_cannot_take_ends_its_process_and_every_other_rank_names_it(found):
    # gloo aborts the process whose tensor is too small for what its peer sends (rank 3's
    # 4 values against 8): it cannot say which call it was in; the others name how it ended
    got = found["shape"]
    assert "error" not in got[3]
    for rank in (0, 1, 2):
        error = got[rank]["error"]
        assert "global rank 3 on host " in error and "was killed by SIGABRT" in error, got
        assert got[rank]["culprits"] == [3], error
        assert in_time(got[rank]), got[rank]


def test_a_hung_rank_is_named_by_every_rank_also_behind_a_blocked_one(found, quiet_host):
    got = found["hang"]
    host = socket.gethostname() if quiet_host is None else quiet_host.name
    expected = {
        0: f"global ranks [3] on {host} did not take part and have not said why "
        "(global rank 2 waited for them)",
        1: f"gang ranks [1] (global ranks [3]) on {host} did not take part",
        2: f"gang ranks [1] (global ranks [3]) on {host} did not take part",
    }
    for rank, text in expected.items():
        assert text in got[rank]["error"], got[rank]["error"]
        assert got[rank]["culprits"] == [3], got[rank]["error"]
        assert in_time(got[rank]), got[rank]
    assert "error" not in got[3]


def test_the_docs_show_these_errors(found, quiet_host):
    hosts = [socket.gethostname() if quiet_host is None else quiet_host.name]
    errors = {mode: [got.get("error", "") for got in found[mode].values()] for mode in MODES}
    # a process whose peer raised first and ended finds its connection closed before its timeout
    alike = {"(a peer's connection closed)": f"(timed out after {TIMEOUT_S:g} s)"}
    for like, mode in [("global rank 2): collectives", "op"), ("barrier failed", "op"),
                       ("global rank 1 is in", "gang")]:  # fmt: skip
        assert_line_shown("howto.rst", DOCS_BLOCK, like, errors[mode], alike=alike)
    assert_line_shown("howto.rst", DOCS_BLOCK, "waited for them", errors["hang"], hosts=hosts)
