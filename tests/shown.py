"""What the docs show the library printing, read back so that the tests which run the same
thing can compare it with what was printed.

A shown output is a ``console`` or ``text`` block of docs/*.rst or README.md. Its lines
that start with ``$`` are the command (``\\`` continues one), lines starting with ``#`` are
the docs' comments, and ``...`` (a line of its own, or one that starts and ends with it)
stands for lines left out. Text is compared word by word, so the docs may wrap long lines,
with what varies from run to run folded on both sides: pids, ports, temp paths, timestamps,
decimal numbers (times, losses, errors) and the names of the hosts a test ran on, which the
docs call ``vm`` (this machine's name; ``localhost`` is folded to it as well).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.rst")), ROOT / "README.md"]
DOCS_HOST = "vm"

FOLDS = (
    (r"\bpid:? \d+", "pid N"),
    (r"\b\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d\b", "TIME"),
    (r"(?:/tmp|/var/tmp)/\S+", "PATH"),
    (r"\b(127\.0\.0\.1|vm):\d+", r"\1:PORT"),
    (r"(?<![\d.])\d+\.\d+(?:e[+-]\d+)?(?![\d.])", "F"),
)


def page_text(name: str) -> str:
    """The text of the page called ``name`` (docs/NAME, or README.md)."""
    return next(page for page in PAGES if page.name == name).read_text("utf-8")


def output_blocks(text: str) -> list[list[str]]:
    """The lines of every console or text block of a page, indentation removed."""
    found = []
    for block in re.findall(r"(?ms)^\.\. code-block:: (?:console|text)\n\n(.*?)(?=^\S|\Z)", text):
        lines = [line[3:] if line.startswith("   ") else line for line in block.splitlines()]
        while lines and not lines[-1].strip():
            lines.pop()
        found.append(lines)
    found += [
        block.splitlines() for block in re.findall(r"(?ms)^```(?:console|text)\n(.*?)^```", text)
    ]
    return found


def shown_block(page: str, first: str) -> list[str]:
    """The block of ``page`` whose first line starts with ``first``."""
    blocks = [
        lines for lines in output_blocks(page_text(page)) if lines and lines[0].startswith(first)
    ]
    assert len(blocks) == 1, f"{page}: {len(blocks)} output blocks start with {first!r}"
    return blocks[0]


def command_and_output(lines: list[str]) -> tuple[str, list[str]]:
    """A block's command (its ``$`` line and continuations) and the lines after it."""
    command, rest = lines[0][2:], lines[1:]
    while command.endswith("\\"):
        command = command[:-1] + " " + rest.pop(0).strip()
    return command, rest


def folded(text: str, hosts: Iterable[str] = (), varying: Iterable[str] = ()) -> str:
    """``text`` in single spaces, with what varies between runs folded."""
    for host in (*hosts, "localhost"):
        text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", DOCS_HOST, text)
    for pattern in varying:
        text = re.sub(pattern, lambda match: re.sub(r"\d+", "N", match[0]), text)
    for pattern, replacement in FOLDS:
        text = re.sub(pattern, replacement, text)
    return " ".join(text.split())


def is_gap(line: str) -> bool:
    """Whether ``line`` stands for lines left out."""
    stripped = line.strip()
    return stripped == "..." or (stripped.startswith("... ") and stripped.endswith(" ..."))


def assert_output_shown(
    page: str,
    first: str,
    output: str,
    *,
    hosts: Iterable[str] = (),
    varying: Iterable[str] = (),
    each_line: bool = False,
) -> None:
    """The block of ``page`` starting with ``first`` is what ``output`` holds: each run of its
    lines between gaps (``...``) appears in ``output``, in the block's order; with
    ``each_line``, each line of the block is a line of ``output``, in any order (processes
    that print at the same moment)."""
    lines = shown_block(page, first)
    if lines[0].startswith("$ "):
        lines = command_and_output(lines)[1]
    runs: list[list[str]] = [[]]
    for line in lines:
        if is_gap(line) or line.startswith("#"):
            runs.append([])
        elif each_line:
            runs.append([line])
        else:
            runs[-1].append(line)
    hosts, varying = list(hosts), list(varying)
    if each_line:
        printed = {folded(line, hosts, varying) for line in output.splitlines()}
        for (line,) in filter(None, runs):
            wanted = folded(line, hosts, varying)
            assert wanted in printed, (
                f"{page} shows\n{wanted}\nwhich the run did not print:\n{output}"
            )
        return
    said = [
        words for line in output.splitlines() if (words := folded(line, hosts, varying).split())
    ]
    at = 0
    for run in filter(None, runs):
        wanted = folded("\n".join(run), hosts, varying).split()
        at = _printed_at(said, at, wanted)
        assert at >= 0, f"{page} shows\n{' '.join(wanted)}\nwhich the run did not print:\n{output}"


def _printed_at(said: list[list[str]], at: int, wanted: list[str]) -> int:
    """Where ``wanted`` (words) ends in ``said`` (the words of each printed line), from line
    ``at`` on: printed by whole lines, in order, which lines other processes printed at the
    same time may come between; -1 where it was not printed."""
    for start in range(at, len(said)):
        line, taken = start, 0
        while taken < len(wanted) and line < len(said):
            words = said[line]
            if wanted[taken : taken + len(words)] == words:
                taken += len(words)
            elif taken == 0:
                break
            line += 1
        if taken == len(wanted):
            return line
    return -1


def assert_line_shown(
    page: str,
    first: str,
    like: str,
    said: Iterable[str],
    *,
    hosts: Iterable[str] = (),
    alike: Mapping[str, str] | None = None,
) -> None:
    """The line of the block starting with ``first`` that contains ``like`` is the first line
    of one of the messages ``said`` (a line that starts with ``... `` ends one). ``alike``:
    words a run may print in place of the docs' (run's -> docs'), where which of them a
    process prints depends on which of its peers ended first."""
    lines = [line for line in shown_block(page, first) if like in line and not line.startswith("#")]
    assert len(lines) == 1, f"{page}: {len(lines)} lines of the block contain {like!r}"
    shown = folded(lines[0])
    hosts = list(hosts)
    firsts = []
    for message in filter(None, said):
        first_line = message.splitlines()[0]
        for words, docs_words in (alike or {}).items():
            first_line = first_line.replace(words, docs_words)
        firsts.append(folded(first_line, hosts))
    if shown.startswith("... "):
        assert any(f" {first_line}".endswith(shown[3:]) for first_line in firsts), (shown, firsts)
    else:
        assert shown in firsts, f"{page} shows\n{shown}\nwhere the run said\n" + "\n".join(firsts)
