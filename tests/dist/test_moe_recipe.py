"""The mixture-of-experts recipe trains like one process on every expert layout."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, torchrun_like

pytestmark = pytest.mark.dist

# name: (processes, flags, the layout the recipe reports)
RUNS = {
    # Without expert parallelism: experts sharded over efsdp, gradients reduced over edp.
    "ep1": (4, ["--ep", "1"], "EP 1 x EFSDP 4 x ETP 1, dense TP 1 x DP 4 on 4 processes"),
    "tp2_ep1_etp1": (
        4,
        ["--tp", "2", "--ep", "1"],
        "EP 1 x EFSDP 4 x ETP 1, dense TP 2 x DP 2 on 4 processes",
    ),
    "ep2": (4, ["--ep", "2"], "EP 2 x EFSDP 2 x ETP 1, dense TP 1 x DP 4 on 4 processes"),
    "ep4": (4, ["--ep", "4"], "EP 4 x EFSDP 1 x ETP 1, dense TP 1 x DP 4 on 4 processes"),
    "hsdp2_ep2": (
        8,
        ["--dp-replicate", "2", "--ep", "2"],
        "EP 2 x EFSDP 2 x ETP 1, dense TP 1 x DP 8 on 8 processes",
    ),
    "tp2_ep4_etp1": (
        8,
        ["--tp", "2", "--ep", "4"],
        "EP 4 x EFSDP 2 x ETP 1, dense TP 2 x DP 4 on 8 processes",
    ),
    "tp2_ep2_etp2": (
        8,
        ["--tp", "2", "--etp", "2", "--ep", "2"],
        "EP 2 x EFSDP 2 x ETP 2, dense TP 2 x DP 4 on 8 processes",
    ),
}
ERROR = r"rel\. error ([\d.e+-]+)"


@pytest.mark.parametrize("name", list(RUNS))
def test_moe_recipe_matches_one_process(name):
    nproc, flags, layout = RUNS[name]
    run = torchrun_like(REPO / "docs/examples/moe_ep.py", nproc, *flags, timeout=360)
    assert run.returncode == 0, run.output
    assert layout in run.output, run.output
    steps = re.findall(
        r"step \d: loss [\d.]+ \(single process [\d.]+, " + ERROR + r"\)", run.output
    )
    assert len(steps) == 5, run.output
    gradients = re.findall(r"gradients of step 0: worst " + ERROR, run.output)
    parameters = re.findall(r"parameters after the last step: worst " + ERROR, run.output)
    assert len(gradients) == len(parameters) == 1, run.output
    assert max(float(e) for e in [*steps, *gradients, *parameters]) <= 1e-5
    assert re.search(
        r"time per step: [\d.]+ ms \(single process [\d.]+ ms, ratio [\d.]+\)", run.output
    )
    assert "matches the single-process run within 1e-05" in run.output
