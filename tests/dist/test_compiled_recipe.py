"""The compiled tensor-parallel recipe (docs/examples/compiled_tp.py): blocks whose linears call
gang collectives inside autograd functions, each compiled with fullgraph=True, train as the
same blocks run eagerly and as one process, 5 steps within 1e-5; by inductor on the CPU over
TP 2, and by the eager backend under FSDP2 over TP 2 x FSDP2 2."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, torchrun_like
from tests.shown import assert_output_shown

pytestmark = pytest.mark.dist

RUNS = {
    "tp2_inductor": (2, "inductor", "TP 2 x FSDP2 1 on 2 processes, blocks compiled by inductor"),
    "tp2_fsdp2_eager": (4, "eager", "TP 2 x FSDP2 2 on 4 processes, blocks compiled by eager"),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_compiled_blocks_train_as_eager_and_as_one_process(name):
    nproc, backend, banner = RUNS[name]
    script = REPO / "docs/examples/compiled_tp.py"
    run = torchrun_like(script, nproc, "--backend", backend, timeout=400)
    assert run.returncode == 0, run.output
    assert banner in run.output
    assert "compiled matches eager within 1e-05" in run.output
    steps = re.findall(
        r"step \d: loss [\d.]+ \(single process [\d.]+, rel\. error ([\d.e+-]+)\)", run.output
    )
    assert len(steps) == 5, run.output
    assert max(float(e) for e in steps) <= 1e-5
    assert "matches the single-process run within 1e-05" in run.output
    if name == "tp2_inductor":
        assert_output_shown("howto.rst", "$ torchrun --nproc-per-node 2 docs/examples/compiled_tp.py",
                            run.output)  # fmt: skip
