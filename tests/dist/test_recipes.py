"""The parallel recipes in docs/examples train like one process and really shard."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, processes, torchrun_like
from tests.shown import assert_output_shown

pytestmark = pytest.mark.dist

RECIPES = {
    "hsdp_2x2": ("hsdp.py", 4, [], "HSDP on 4 processes", "(64, 32) of global (128, 32)"),
    "fsdp_4": ("hsdp.py", 4, ["--fsdp"], "FSDP on 4 processes", "(32, 32) of global (128, 32)"),
    "tp2_dp2": ("tp_fsdp.py", 4, [], "TP 2 x DP 2", "(32, 32) of global (128, 32)"),
    "pp2_tp2_dp2": ("pp_tp_dp.py", 8, [], "PP 2 x TP 2 x DP 2", "(64, 32) of global (128, 32)"),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_matches_one_process_and_shards(name):
    script, nproc, args, banner, shard = RECIPES[name]
    run = torchrun_like(REPO / "docs/examples" / script, nproc, *args, timeout=300)
    assert run.returncode == 0, run.output
    assert banner in run.output
    assert f"blocks[0].up.weight: local shard {shard}" in run.output
    steps = re.findall(
        r"step \d: loss [\d.]+ \(single process [\d.]+, rel\. error ([\d.e+-]+)\)", run.output
    )
    assert len(steps) == 4, run.output
    assert max(float(e) for e in steps) <= 1e-5
    assert "matches the single-process run within 1e-05" in run.output


@pytest.mark.parametrize("script", ["hsdp.py", "tp_fsdp.py"])
def test_one_process_without_torchrun_runs_the_same_code_on_a_real_mesh(script):
    run = processes(str(REPO / "docs/examples" / script), 1, timeout=180, env_of=lambda rank: {})
    assert run.returncode == 0, run.output
    assert "running as a job of one process" in run.output
    # FSDP2 made the weight a DTensor over a one-process mesh: the shard is the whole weight.
    assert "blocks[0].up.weight: local shard (128, 32) of global (128, 32)" in run.output
    assert "matches the single-process run within 1e-05" in run.output


def test_two_models_recipe_matches_one_process():
    run = torchrun_like(REPO / "docs/examples/two_models.py", 8, timeout=300)
    assert run.returncode == 0, run.output
    assert "Parts(trainer ranks 0-3, generator ranks 4-7" in run.output
    losses = re.findall(r"step \d: trainer loss [\d.]+ \(single process [\d.]+\)", run.output)
    assert len(losses) == 3, run.output
    assert "matches the single-process run within 1e-05" in run.output
    assert_output_shown("parts.rst", "$ torchrun --nproc-per-node 8 docs/examples/two_models.py",
                        run.output)  # fmt: skip
