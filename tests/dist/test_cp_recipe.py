"""The context-parallel recipe attends over whole sequences from chunks and trains like one
process, with FSDP2 over dp_shard x cp and tensor parallelism beside it."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, processes, torchrun_like

pytestmark = pytest.mark.dist

SCRIPT = REPO / "docs/examples/cp_attention.py"
# name: (processes, flags, the layout the recipe reports, the local shard of q's weight)
RUNS = {
    "dp2_cp2": (4, [], "CP 2 x TP 1 x DP_SHARD 2 x DP_REPLICATE 1 on 4 processes", "(8, 32)"),
    "cp2_tp2": (
        4,
        ["--tp", "2"],
        "CP 2 x TP 2 x DP_SHARD 1 x DP_REPLICATE 1 on 4 processes",
        "(8, 32)",
    ),
}
ERROR = r"rel\. error ([\d.e+-]+)"


def assert_matches_one_process(output: str) -> None:
    steps = re.findall(r"step \d: loss [\d.]+ \(single process [\d.]+, " + ERROR + r"\)", output)
    assert len(steps) == 4, output
    gradients = re.findall(r"gradients of step 0: worst " + ERROR, output)
    parameters = re.findall(r"parameters after the last step: worst " + ERROR, output)
    assert len(gradients) == len(parameters) == 1, output
    assert max(float(e) for e in [*steps, *gradients, *parameters]) <= 1e-5
    assert "matches the single-process run within 1e-05" in output


@pytest.mark.parametrize("name", list(RUNS))
def test_cp_recipe_matches_one_process_and_shards_over_dp_shard_cp(name):
    nproc, flags, layout, shard = RUNS[name]
    run = torchrun_like(SCRIPT, nproc, *flags, timeout=300)
    assert run.returncode == 0, run.output
    assert f"{layout}, 4 positions per process" in run.output, run.output
    assert f"blocks[0].attention.q.weight: local shard {shard} of global (32, 32)" in run.output
    assert_matches_one_process(run.output)


def test_cp_recipe_as_one_process_without_torchrun():
    run = processes(str(SCRIPT), 1, "--cp", "1", timeout=180, env_of=lambda rank: {})
    assert run.returncode == 0, run.output
    assert "running as a job of one process" in run.output
    assert (
        "CP 1 x TP 1 x DP_SHARD 1 x DP_REPLICATE 1 on 1 process, 8 positions per process"
        in run.output
    )
    assert "blocks[0].attention.q.weight: local shard (32, 32) of global (32, 32)" in run.output
    assert_matches_one_process(run.output)
