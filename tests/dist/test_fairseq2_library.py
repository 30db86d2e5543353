"""fairseq2 0.8.1's own library on gangmesh's gangs: gangs from ``create_gangs``, entered into
fairseq2 with its ``set_gangs``, train its sharded layers, its FSDP2 and DDP wrappers and a
model of its hub as one process does, and as fairseq2's own gangs do (the control, in the
same world): a difference is seen as fairseq2's or gangmesh's."""

from __future__ import annotations

import re
import socket

import pytest

from tests.dist.launch import every_rank_results, torchrun_like
from tests.shown import assert_line_shown

pytest.importorskip(
    "fairseq2", reason="fairseq2 0.8.1 is not installed (pip install 'gangmesh[fairseq2]')"
)

pytestmark = pytest.mark.dist

WORLD = 4
DOCS_BLOCK = "# rank 3 raises in fairseq2's step"  # docs/migration.rst shows rank 2's error
TOLERANCE = 1e-5
LAYOUTS = [
    "sharded layers, FSDP2, tp 2 x dp_shard 2",
    "FSDP2 (HSDP), dp_replicate 2 x dp_shard 2",
    "sharded layers, DDP, tp 2 x dp_replicate 2",
    "DDP, dp_replicate 4",
    "hub's LLaMA, FSDP2, tp 2 x dp_shard 2",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every layout trained on each rank, once for the module: a world of 4 processes."""
    return every_rank_results("fairseq2_library.py", WORLD, tmp_path_factory.mktemp("fairseq2"))


def difference(run: dict, other: dict) -> float:
    ours, theirs = [*run["steps"], run["after"]], [*other["steps"], other["after"]]
    return max(abs(a - b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fairseq2_trains_on_gangmesh_gangs_as_one_process_and_as_on_its_own(results, layout):
    for rank in range(WORLD):
        runs = results[rank][layout]
        expected = runs["one process"]
        assert len(expected["steps"]) == 5 and expected["after"] < expected["steps"][0]
        assert difference(runs["fairseq2"], expected) <= TOLERANCE, (rank, runs)
        assert difference(runs["gangmesh"], expected) <= TOLERANCE, (rank, runs)
        # sharded where the layout shards: tensor parallel layers, FSDP2
        sharded = "DDP, dp_replicate" not in layout
        assert (runs["gangmesh"]["held"] < expected["held"]) is sharded, (rank, runs)
        assert runs["gangmesh"]["held"] == runs["fairseq2"]["held"], (rank, runs)


def test_a_rank_that_breaks_inside_fairseq2_s_step_is_named_by_every_survivor(tmp_path):
    run = torchrun_like("fairseq2_fault.py", WORLD, str(tmp_path), timeout=120)
    found = run.results(tmp_path)
    assert run.returncode != 0 and "broke_at" in found.get(3, {}), run.output
    raised = [rank for rank in (0, 1, 2) if "error" in found.get(rank, {})]
    assert raised == [0, 1, 2], run.output
    for rank in raised:
        error = found[rank]["error"]
        assert found[rank]["culprits"] == [3], error
        assert re.search(
            r"global rank 3 on host \S+ \(pid \d+\) raised ValueError: step 2", error
        ), error
        assert found[rank]["at"] - found[3]["broke_at"] <= 5 + 5, error
    # rank 2, rank 3's tensor parallel partner, waits in fairseq2's all-reduce
    hosts = [socket.gethostname(), socket.getfqdn()]
    assert_line_shown("migration.rst", DOCS_BLOCK, "failed on gang 'tp'", [found[2]["error"]],
                      hosts=hosts)  # fmt: skip
