"""docs/examples/checkpoint.py resumes from DCP checkpoints, after a torchrun restart and on
other layouts, and ends where one uninterrupted process ends."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field

import pytest

from tests.dist.launch import REPO, Run, free_port, run_command, torchrun_like
from tests.shown import assert_output_shown

pytestmark = pytest.mark.dist

SCRIPT = REPO / "docs/examples/checkpoint.py"
RTOL = 1e-5
ATTEMPT = re.compile(
    r"^attempt (\d+): (.+), (?:resuming from (\S+)|from scratch) at step (\d+)$", re.M
)
STEP = re.compile(
    r"^step (\d+): loss ([\d.]+) \(single process ([\d.]+), rel\. error (\S+)\)$", re.M
)
FINAL = re.compile(
    r"^final parameters match the single-process run of (\d+) steps within 1e-05 \(worst (\S+);",
    re.M,
)


@dataclass
class Attempt:
    layout: str
    resumed_from: str | None
    start: int
    steps: list[int] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    losses: dict[int, str] = field(default_factory=dict)


def attempts(output: str) -> dict[int, Attempt]:
    """What rank 0 of each torchrun attempt logged: its banner and the steps it trained."""
    found: dict[int, Attempt] = {}
    banners = list(ATTEMPT.finditer(output))
    ends = [banner.start() for banner in banners[1:]] + [len(output)]
    for banner, end in zip(banners, ends, strict=True):
        number, layout, folder, start = banner.groups()
        attempt = Attempt(layout, folder, int(start))
        text = output[banner.end() : end]
        for step, loss, _, error in STEP.findall(text):
            attempt.steps.append(int(step))
            attempt.errors.append(float(error))
            attempt.losses[int(step)] = loss
        found[int(number)] = attempt
    return found


def final_parameter_error(run: Run, steps: int) -> float:
    match = FINAL.search(run.output)
    assert match is not None, run.output
    assert int(match.group(1)) == steps
    return float(match.group(2))


def test_a_crashed_job_restarted_by_torchrun_resumes_from_its_last_checkpoint(tmp_path):
    run = run_command(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", "--max-restarts=1",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(SCRIPT),
         "--layout", "hsdp", "--steps", "6", "--every", "2", "--crash-at", "3", "--dir", str(tmp_path)],
        timeout=400,
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert "rank 1: exiting at step 3, as asked" in run.output
    found = attempts(run.output)
    assert sorted(found) == [0, 1], run.output
    first, second = found[0], found[1]
    # The first attempt saved after step 1, trained step 2 and lost rank 1 at step 3.
    assert (first.resumed_from, first.steps) == (None, [0, 1, 2]), run.output
    assert f"saved {tmp_path / 'step-2'}" in run.output
    # The second one took up from that checkpoint and trained the rest.
    assert second.layout == "HSDP 2x2 on 4 processes"
    assert (second.resumed_from, second.start) == (str(tmp_path / "step-2"), 2)
    assert second.steps == [2, 3, 4, 5], run.output
    assert max(first.errors + second.errors) <= RTOL
    # Step 2 ran in both attempts, from the same state: the same loss.
    assert first.losses[2] == second.losses[2]
    assert final_parameter_error(run, 6) <= RTOL
    assert (tmp_path / "step-6" / ".metadata").is_file()
    # what docs/checkpoint.rst shows of this run (ranks 0 and 1 print at the same moment)
    assert_output_shown("checkpoint.rst", "attempt 0: HSDP 2x2", run.output, each_line=True)


@pytest.fixture(scope="module")
def hsdp_checkpoint(tmp_path_factory):
    """A folder with the checkpoints of 4 steps of HSDP 2x2 on 4 processes."""
    folder = tmp_path_factory.mktemp("hsdp")
    run = torchrun_like(SCRIPT, 4, "--layout", "hsdp", "--steps", "4", "--every", "2", "--dir", str(folder), timeout=300)  # fmt: skip
    assert run.returncode == 0, run.output
    found = attempts(run.output)
    assert found[0].steps == [0, 1, 2, 3], run.output
    assert max(found[0].errors) <= RTOL
    assert final_parameter_error(run, 4) <= RTOL
    assert (folder / "step-4" / ".metadata").is_file()
    return folder


@pytest.mark.parametrize(
    ("layout", "nproc", "banner"),
    [("fsdp", 2, "FSDP on 2 processes"), ("tp", 4, "TP 2 x FSDP 2 on 4 processes")],
)
def test_b_an_hsdp_checkpoint_resumes_on_another_layout(
    hsdp_checkpoint, tmp_path, layout, nproc, banner
):
    folder = tmp_path / "checkpoints"
    shutil.copytree(hsdp_checkpoint, folder)
    run = torchrun_like(SCRIPT, nproc, "--layout", layout, "--steps", "6", "--every", "2", "--dir", str(folder), timeout=300)  # fmt: skip
    assert run.returncode == 0, run.output
    found = attempts(run.output)
    assert sorted(found) == [0], run.output
    resumed = found[0]
    assert resumed.layout == banner
    assert (resumed.resumed_from, resumed.start) == (str(folder / "step-4"), 4)
    assert resumed.steps == [4, 5], run.output
    assert max(resumed.errors) <= RTOL
    assert final_parameter_error(run, 6) <= RTOL
