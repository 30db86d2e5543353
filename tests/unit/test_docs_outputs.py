"""The outputs the docs show for ``gangmesh plan`` are what it prints: every console or text
block of docs/*.rst and README.md that starts with ``$ gangmesh plan`` is run, and its
output (its last K lines for a command ending ``| tail -n K``) compared with the block's,
whitespace aside (the docs wrap long lines)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from gangmesh.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.rst")), ROOT / "README.md"]


def shown_runs(text: str) -> list[tuple[str, str]]:
    """(command, output) of each block whose first line is ``$ gangmesh plan ...``."""
    runs = []
    for block in re.findall(r"(?ms)^\.\. code-block:: (?:console|text)\n\n(.*?)(?=^\S|\Z)", text):
        lines = [line[3:] if line.startswith("   ") else line for line in block.splitlines()]
        if not lines or not lines[0].startswith("$ gangmesh plan"):
            continue
        command = lines[0][2:]
        rest = lines[1:]
        while command.endswith("\\"):
            command = command[:-1] + " " + rest.pop(0).strip()
        runs.append((command, "\n".join(rest)))
    for block in re.findall(r"(?ms)^```(?:console|text)\n(.*?)^```", text):
        first, _, output = block.partition("\n")
        if first.startswith("$ gangmesh plan"):
            runs.append((first[2:], output))
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
