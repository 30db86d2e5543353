"""The outputs the docs show are what the library prints. Every console or text block of
docs/*.rst and README.md that starts with ``$ gangmesh plan`` is run here, and its output
(its last K lines for a command ending ``| tail -n K``) compared with the block's,
whitespace aside (the docs wrap long lines). Every other block that shows an output is
compared, by the test that runs the same job, with what that job printed (tests/shown.py)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from gangmesh.tools.cli import main
from tests.shown import (
    PAGES,
    ROOT,
    assert_line_shown,
    assert_output_shown,
    command_and_output,
    output_blocks,
    shown_block,
)

RERUN_ELSEWHERE = {
    ("checkpoint.rst", "attempt 0: HSDP 2x2"): "dist/test_checkpoint.py",
    (
        "fault_tolerance.rst",
        "$ gangmesh check --nproc 2 --replica-groups 2",
    ): "dist/test_replicas.py",
    (
        "fault_tolerance.rst",
        "$ python docs/examples/fault_tolerant_hsdp.py",
    ): "dist/test_replicas.py",
    ("howto.rst", "# rank 3 raised ValueError"): "dist/test_culprit.py",
    ("howto.rst", "# rank 1 SIGKILLed between its two compiled blocks"): (
        "dist/test_compiled_faults.py"
    ),
    (
        "howto.rst",
        "$ torchrun --nproc-per-node 2 docs/examples/compiled_tp.py",
    ): "dist/test_compiled_recipe.py",
    ("howto.rst", "Root Cause"): "dist/test_culprit.py",
    ("howto.rst", "# killed while the default group connects"): "dist/test_setup_deaths.py",
    ("howto.rst", "# rank 3 broadcasts on its tp gang"): "dist/test_desync.py",
    ("howto.rst", "# rank 3 killed before its forward"): "dist/test_training_faults.py",
    ("howto.rst", "# trained outside"): "dist/test_training_faults.py",
    ("howto.rst", "ValueError: device: LOCAL_WORLD_SIZE"): "unit/test_default_device.py",
    (
        "migration.rst",
        "$ torchrun --nproc-per-node 4 docs/examples/migration/fairseq2_library.py",
    ): "dist/test_migration_examples.py",
    ("migration.rst", "# rank 3 raises in fairseq2's step"): "dist/test_fairseq2_library.py",
    ("joined.rst", "# the generator's rank raised"): "dist/test_joined.py",
    (
        "joined.rst",
        "$ torchrun --nproc-per-node 2 --master-port 29500 docs/examples/rl_jobs.py trainer",
    ): "dist/test_joined.py",
    (
        "joined.rst",
        "$ torchrun --nproc-per-node 2 --master-port 29501 --max-restarts 1",
    ): "dist/test_joined.py",
    (
        "parts.rst",
        "$ torchrun --nproc-per-node 8 docs/examples/two_models.py",
    ): "dist/test_recipes.py",
    ("testing.rst", "AssertionError: read twice"): "unit/test_docs_examples_testing.py",
}
"""Blocks whose job runs in another test: (page, how the block starts) -> that test's file."""


def shown_runs(text: str) -> list[tuple[str, str]]:
    """(command, output) of each block whose first line is ``$ gangmesh plan ...``."""
    runs = []
    for lines in output_blocks(text):
        if lines and lines[0].startswith("$ gangmesh plan"):
            command, output = command_and_output(lines)
            runs.append((command, "\n".join(output)))
    return runs


def words(text: str) -> list[str]:
    return text.split()


def printed(command: str) -> str:
    command, _, tail = command.partition(" | tail -n ")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(shlex.split(command)[1:])
    text = out.getvalue() + err.getvalue()
    return "\n".join(text.splitlines()[-int(tail) :]) if tail else text


RUNS = [(page.name, *run) for page in PAGES for run in shown_runs(page.read_text("utf-8"))]


def test_the_docs_show_plan_commands():
    assert len(RUNS) >= 3, RUNS


@pytest.mark.parametrize(("page", "command", "shown"), RUNS, ids=[r[1] for r in RUNS])
def test_a_shown_plan_output_is_what_the_command_prints(
    page, command, shown, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where --output writes
    assert words(printed(command)) == words(shown), f"{page}: {command}"


def test_an_edited_output_is_caught():
    _, command, shown = next(run for run in RUNS if run[2].strip())
    edited = shown.replace("--tp", "--tpx", 1) if "--tp" in shown else shown + " more"
    assert words(printed(command)) != words(edited)


def compares(test_file: str, page: str, first: str) -> bool:
    """Whether ``test_file`` calls a comparison of the block of ``page`` that starts with
    ``first`` (given as it, or as the file's DOCS_BLOCK)."""
    call = rf'assert_(?:output|line)_shown\(\s*"{re.escape(page)}",\s*'
    named = f'DOCS_BLOCK = "{first}' in test_file and re.search(call + "DOCS_BLOCK", test_file)
    return bool(named or re.search(call + re.escape(f'"{first}'), test_file))


def test_every_shown_output_is_compared_with_a_run():
    claimed = set()
    for page in PAGES:
        for lines in output_blocks(page.read_text("utf-8")):
            if not lines:
                continue
            if lines[0].startswith("$ ") and not command_and_output(lines)[1]:
                continue  # a command alone: nothing shown to compare
            if lines[0].startswith("$ gangmesh plan"):
                continue  # run above
            keys = [
                key
                for key in RERUN_ELSEWHERE
                if key[0] == page.name and lines[0].startswith(key[1])
            ]
            assert len(keys) == 1, f"{page.name}: no test compares the block {lines[0]!r}"
            test_file = (ROOT / "tests" / RERUN_ELSEWHERE[keys[0]]).read_text("utf-8")
            assert compares(test_file, *keys[0]), f"{RERUN_ELSEWHERE[keys[0]]}: {keys[0]}"
            claimed.add(keys[0])
    assert claimed == set(RERUN_ELSEWHERE), set(RERUN_ELSEWHERE) - claimed


def test_a_run_that_prints_otherwise_than_the_docs_is_caught():
    block = "# rank 3 raised ValueError"
    lines = shown_block("howto.rst", block)
    (shown,) = [line for line in lines if "raised ValueError" in line and line[0] != "#"]
    # what varies between runs (the pid, this machine's name) is no difference
    rerun = shown.replace("(pid 20315)", "(pid 4242)").replace("host vm", "host ci-runner")
    assert_line_shown("howto.rst", block, "raised ValueError", [rerun], hosts=["ci-runner"])
    for edit in (("step 5", "step 6"), ("global rank 3", "global rank 1"), ("tp", "dp")):
        with pytest.raises(AssertionError):
            assert_line_shown("howto.rst", block, "raised ValueError", [rerun.replace(*edit, 1)])
    lines = shown_block("checkpoint.rst", "attempt 0: HSDP 2x2")
    printed = "\n".join(line for line in lines if not line.startswith("..."))
    assert_output_shown(
        "checkpoint.rst", "attempt 0: HSDP 2x2", printed.replace("4.348139", "4.3481")
    )
    with pytest.raises(AssertionError):
        assert_output_shown(
            "checkpoint.rst", "attempt 0: HSDP 2x2", printed.replace("saved", "wrote")
        )
    with pytest.raises(AssertionError):
        assert_output_shown(
            "checkpoint.rst", "attempt 0", printed.replace("step 4:", "step 5:"), each_line=True
        )
    # other processes' lines between the shown ones are no difference; a line left out is
    noisy = printed.replace("\n", "\n[Gloo] Rank 1 is connected to 3 peer ranks.\n")
    assert_output_shown("checkpoint.rst", "attempt 0: HSDP 2x2", noisy)
    without = "\n".join(line for line in printed.splitlines() if not line.startswith("saved"))
    with pytest.raises(AssertionError):
        assert_output_shown("checkpoint.rst", "attempt 0: HSDP 2x2", without)
