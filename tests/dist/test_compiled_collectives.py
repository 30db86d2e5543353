"""Every Gang collective inside torch.compile(fullgraph=True), on two gloo processes
(workers/compiled_collectives.py): one graph with no graph break, the eager call's result to
the bit, written into the tensors passed in; on every kind of gang a job holds, each group
running as many collectives as eagerly."""

from __future__ import annotations

import pytest

from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist

OPS = ("all_reduce", "all_gather", "all_gather_to_list", "reduce_scatter", "all_to_all",
       "broadcast", "barrier")  # fmt: skip
GANGS = {"root", "tp (create_gangs)", "dp (create_gangs, size 1)", "create_gang([1, 0])",
         "create_gang of one", "part root", "bridge", "FakeGang"}  # fmt: skip
WITH_GROUPS = GANGS - {"dp (create_gangs, size 1)", "FakeGang"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One job for every collective: dynamo warms up once."""
    return every_rank_results("compiled_collectives.py", 2, tmp_path_factory.mktemp("compiled"))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("rank", [0, 1])
def test_a_gang_collective_compiles_whole_and_gives_the_eager_result_in_place(results, op, rank):
    got = results[rank][op]
    assert "error" not in got, got["error"]
    assert (got["graphs"], got["breaks"]) == (1, 0), got["break_reasons"]
    assert got["differ"] == [], "compiled and eager results differ"
    assert set(got["eager_collectives"]) == WITH_GROUPS
    assert got["compiled_collectives"] == got["eager_collectives"]
    assert all(count > 0 for count in got["eager_collectives"].values())
