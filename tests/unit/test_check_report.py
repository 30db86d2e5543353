"""The report ``gangmesh check`` prints, from what the processes found (no processes)."""

from __future__ import annotations

from gangmesh.plan.cluster import Site
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.check_command import COLLECTIVE_FAILED, failure_report
from gangmesh.tools.check_report import (
    CHECKED_GANGS,
    GangReport,
    Placement,
    checked_gangs,
    nodes_text,
    stragglers,
    summarize,
)
from gangmesh.tools.launch import WorkerExit


def reports_of(plan: MeshTopology, sizes: list[int], iters: int) -> list[list[GangReport]]:
    """What every rank would send when everything passed, 1 ms per all_reduce."""
    everything = []
    for rank in range(plan.world_size):
        reports = []
        for name in checked_gangs(plan):
            size = plan.world_size if name == "root" else len(plan.group_of(rank, name))
            timed = size > 1
            report = GangReport(name, size, iters=iters if timed else 0)
            report.timings = {s: 1e-3 for s in sizes} if timed else {}
            reports.append(report)
        reports[0].communicators = 3
        everything.append(reports)
    return everything


def test_the_table_fits_80_columns_and_folds_the_gangs_of_size_1():
    plan = MeshTopology(8, tp=2, pp=2)
    sizes = [8, 1024, 65536, 1 << 20, 1 << 24]
    table, failures, summary = summarize(plan, reports_of(plan, sizes, 7), sizes)
    assert failures == []
    lines = table.splitlines()
    assert max(map(len, lines)) <= 80, table
    assert "size 1 (pass): rdp, cp" in lines  # a dense job builds no expert gangs
    assert not any(line.startswith(("rdp ", "cp ", "ep ", "etp ")) for line in lines)
    assert "mean of 7 iterations per size" in table
    assert "reduce_scatter" in table and "all_to_all" in table
    (tp,) = [line.split() for line in lines if line.startswith("tp ")]
    assert tp[:4] == ["tp", "2", "4", "pass"] and tp[4] == "1000.0"
    assert summary["iters"] == 7 and "etp" not in summary["gangs"]


def test_nothing_timed_says_nothing_about_iterations():
    plan = MeshTopology(1)
    table, _, _ = summarize(plan, reports_of(plan, [8], 10), [8])
    assert "iteration" not in table
    assert table.splitlines()[-2].startswith("size 1 (pass): root, dp")


def test_a_failed_gang_of_size_1_keeps_its_row():
    plan = MeshTopology(2, tp=2)
    everything = reports_of(plan, [8], 3)
    everything[1][CHECKED_GANGS.index("pp")].problems.append("membership: wrong")
    table, failures, _ = summarize(plan, everything, [8])
    assert any(line.split()[:4] == ["pp", "1", "2", "FAIL"] for line in table.splitlines())
    assert failures == ["gang pp on rank 1: membership: wrong"]


def test_nodes_are_counted_in_the_singular_and_the_plural():
    assert nodes_text([Placement(Site("a"), 0)])[0] == "nodes: 1 of 1 rank\n  node 0 on a: rank 0"
    text, problems = nodes_text(
        [Placement(Site("a"), 0), Placement(Site("b"), 1), Placement(Site("a"), 0)]
    )
    assert text.splitlines()[0] == "nodes: 2, 1 / 2 ranks each"
    assert problems == ["node 0: ranks [0, 2] are not consecutive"]


def test_a_failure_report_names_the_cause_before_those_who_saw_it():
    exits = [
        WorkerExit(0, COLLECTIVE_FAILED, ""),
        WorkerExit(1, -9, "", killed="unanswering", stopped=False),
        WorkerExit(2, COLLECTIVE_FAILED, "gangmesh check: rank 2: all_gather failed"),
        WorkerExit(3, 0, ""),
    ]
    assert failure_report(exits, "h") == [
        "gangmesh check: FAILED: rank 1 on h stopped answering: still running 3 s after the "
        "others ended; killed; 2 other processes failed after it",
        "  rank 1 stopped answering: still running 3 s after the others ended; killed",
        "  rank 0 saw a collective fail",
        "  rank 2 saw a collective fail: rank 2: all_gather failed",
    ]


def test_without_a_cause_the_report_counts_the_failures():
    exits = [WorkerExit(0, 1, ""), WorkerExit(1, -9, "", killed="late"), WorkerExit(2, 0, "")]
    assert failure_report(exits, "h") == [
        "gangmesh check: FAILED on 2 of 3 processes",
        "  rank 0 exited with code 1",
        "  rank 1 was killed: still running when the timeout and grace period had passed",
    ]


def arrivals(report: GangReport, last: list[int], late: float) -> GangReport:
    report.last = last
    report.lateness = [late] * len(last)
    report.own_wait = [1e-3] * len(last)
    return report


def test_a_rank_last_at_most_barriers_by_more_than_a_barrier_is_consistently_slowest():
    tp = CHECKED_GANGS.index("tp")
    everything = []
    for rank in range(4):
        reports = [GangReport(name, 1, members=[rank]) for name in CHECKED_GANGS]
        group = [0, 1] if rank < 2 else [2, 3]
        last = [1, 1, 1, 1, 0] if rank < 2 else [2, 3, 2, 3, 2]
        reports[tp] = arrivals(GangReport("tp", 2, members=group), last, 0.05)
        everything.append(reports)
    placements = [Placement(Site(f"h{rank // 2}"), rank // 2) for rank in range(4)]
    lines, found = stragglers(everything, placements)
    assert lines == [
        "last to arrive at each gang's barriers (median lateness):",
        "  tp    rank 1 on h0: last at 4 of 5 barriers, 50.00 ms after the first",
        "consistently slowest: rank 1 on h0 (in tp)",
    ]
    assert found["tp"]["group"] == [0, 1] and found["tp"]["consistent"]


def test_lateness_within_a_barriers_cost_flags_nobody():
    tp = CHECKED_GANGS.index("tp")
    everything = []
    for rank in range(2):
        reports = [GangReport(name, 1, members=[rank]) for name in CHECKED_GANGS]
        reports[tp] = arrivals(GangReport("tp", 2, members=[0, 1]), [1] * 5, 0.5e-3)
        everything.append(reports)
    lines, found = stragglers(everything, [Placement(Site("h"), 0)] * 2)
    assert not found["tp"]["consistent"]
    assert not any(line.startswith("consistently") for line in lines)


def test_a_workers_own_lines_are_quoted_without_the_backends_notices():
    tail = "[Gloo] Rank 1 is connected to 3 peer ranks.\ngangmesh check: rank 1: all_gather failed"
    exits = [WorkerExit(0, 3, ""), WorkerExit(1, COLLECTIVE_FAILED, tail)]
    assert (
        failure_report(exits, "h")[-1]
        == "  rank 1 saw a collective fail: rank 1: all_gather failed"
    )
