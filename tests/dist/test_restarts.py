"""torchrun restarts a job whose process died, and the new attempt sets up its gangs again."""

from __future__ import annotations

import sys

import pytest

from tests.dist.launch import WORKERS, free_port, run_command

pytestmark = pytest.mark.dist


def restarted_job(out, rendezvous: str, *args: str):
    if rendezvous == "static":
        where = ["--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    else:
        where = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    return run_command(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=1",
         *where, str(WORKERS / "restart.py"), str(out), *args],
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
@pytest.mark.parametrize("death", ["exit", "raise", "kill"])
def test_a_restarted_attempt_comes_back(tmp_path, rendezvous, death):
    job = restarted_job(tmp_path, rendezvous, "--die-by", death)
    assert job.returncode == 0, job.output
    results = job.results(tmp_path)
    # The second attempt of both ranks finished: 2 ranks summed 1s, then the tp pair summed.
    assert results == {0: {"attempt": 1, "sum": 4.0}, 1: {"attempt": 1, "sum": 4.0}}
