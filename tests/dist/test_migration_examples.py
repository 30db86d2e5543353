"""Both columns of each migration guide run on 4 processes and print the same lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.dist.launch import REPO, torchrun

pytestmark = pytest.mark.dist

MIGRATION = REPO / "docs/examples/migration"
SHIMS = Path(__file__).parent / "shims"


def printed(script: str, *, with_fairseq2_names: bool = False) -> list[str]:
    env = {"PYTHONPATH": f"{REPO}:{SHIMS}"} if with_fairseq2_names else None
    run = torchrun(MIGRATION / script, 4, env=env)
    assert run.returncode == 0, run.output
    # Ranks share one stdout, so a line may be interleaved with another rank's: find records.
    records = sorted(re.findall(r"(rank \d+: .*?)(?=rank \d+: |\n|$)", run.output))
    assert len(records) == 4, run.output
    return records


def test_fairseq2_code_runs_unchanged_on_gangmesh_names():
    gangmesh = printed("gangmesh_side.py")
    # sdp pairs consecutive dp ranks of each tp rank: {0,2}, {1,3}.
    assert gangmesh == [
        "rank 0: sdp sum 2.0, tp rank 0",
        "rank 1: sdp sum 4.0, tp rank 1",
        "rank 2: sdp sum 2.0, tp rank 0",
        "rank 3: sdp sum 4.0, tp rank 1",
    ]
    assert printed("fairseq2_side.py", with_fairseq2_names=True) == gangmesh


def test_gangs_replace_hand_made_mesh_groups():
    by_hand = printed("devicemesh_side.py")
    # shard groups {0,1} and {2,3} sum to 1 and 5; the replicate broadcast takes rank 2 or 3's 5.
    assert by_hand == [f"rank {r}: 5.0" for r in range(4)]
    assert printed("gangs_side.py") == by_hand
