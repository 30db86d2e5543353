"""Where a rank that takes no part stands: its main thread's stack, dumped on a survivor's signal.

A rank alive but stuck outside the collective (a loop, a sleep, a wait of its own) cannot be
named by how it ended. Each process has Python's ``faulthandler`` dump every thread's stack to
a file of its own on SIGUSR2 (from a C signal handler: a rank that holds the interpreter
answers too; nothing runs until then). A survivor on the same host that names such a rank
sends it the signal, reads the dump, and keeps the main thread's innermost frames of the
program's own code (file:line, function, the line); it leaves that in the job's store for the
survivors on other hosts. A stopped or dead rank writes nothing and is said to say nothing.
Nothing is installed where the program handles SIGUSR2 itself.
"""

from __future__ import annotations

import faulthandler
import linecache
import logging
import os
import re
import signal
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

log = logging.getLogger("gangmesh")

SIGNAL = signal.SIGUSR2
ANSWER_BOUND = 1.0
"""Seconds a survivor waits for a stuck rank's dump."""
_FRAMES = 2
"""The most frames of the stuck rank's own code an answer holds."""
_LINE = 100
"""The most characters of a source line an answer repeats."""
_PATHS = sysconfig.get_paths()
_LIBRARIES = (
    *{str(Path(_PATHS[name]).resolve()) for name in ("stdlib", "purelib", "platlib")},
    str(Path(__file__).resolve().parents[2]),
)
"""Where code that is not the program's own lives: the standard library, installed packages
(torch among them), gangmesh itself."""
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')

_dump: IO[str] | None = None
"""The file this process's stacks are dumped to, while installed."""


def install() -> tuple[str, int] | None:
    """Dump this process's stacks on SIGUSR2 from now on (once); the dump file and the main
    thread's id, for the job's reports; None where the program handles SIGUSR2 itself."""
    global _dump
    main = threading.main_thread().ident or 0
    if _dump is not None:
        return _dump.name, main
    if signal.getsignal(SIGNAL) is not signal.SIG_DFL:
        return None
    _dump = tempfile.NamedTemporaryFile(  # noqa: SIM115 (open while the process runs)
        "w", prefix=f"gangmesh-stacks-{os.getpid()}-", suffix=".txt", delete=False
    )
    faulthandler.register(SIGNAL, file=_dump, all_threads=True, chain=False)
    return _dump.name, main


def uninstall() -> None:
    """Leave SIGUSR2 to its default again and remove the dump file."""
    global _dump
    dump, _dump = _dump, None
    if dump is None:
        return
    faulthandler.unregister(SIGNAL)
    dump.close()
    Path(dump.name).unlink(missing_ok=True)


def ask(pid: int, path: str, main: int, bound: float = ANSWER_BOUND) -> str | None:
    """Where process ``pid`` (of this host) stands: its main thread's innermost frames of the
    program's own code, from a dump it writes to ``path`` on SIGUSR2; None where it wrote
    none within ``bound`` seconds (stopped, gone)."""
    try:
        before = os.path.getsize(path)
        os.kill(pid, SIGNAL)
    except OSError:
        return None
    deadline = time.monotonic() + bound
    text = ""
    while time.monotonic() < deadline:
        time.sleep(0.02)  # the dump is not signalled to this process
        try:
            with open(path) as dump:
                dump.seek(before)
                text = dump.read()
        except OSError:
            return None
        if _main_block(text, main) is not None:
            break
    block = _main_block(text, main)
    return None if block is None else where(block)


def _main_block(text: str, main: int) -> list[tuple[str, int, str]] | None:
    """The frames of thread ``main`` in a whole faulthandler dump (innermost first)."""
    marker = f"0x{main:016x}"
    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", text, flags=re.M)
    for block in blocks:
        head, _, body = block.partition("\n")
        frames = [(m["file"], int(m["line"]), m["name"]) for m in map(_FRAME.match,
                  body.splitlines()) if m]  # fmt: skip
        if marker in head and frames:
            return frames
    return None


def where(frames: list[tuple[str, int, str]]) -> str:
    """``frames`` (innermost first) in words: the innermost of the program's own code
    ("train.py:57 in step: time.sleep(60)"), or the innermost of all where none is."""
    own = [f for f in frames if not str(Path(f[0]).resolve()).startswith(_LIBRARIES)]
    chosen = (own or frames[:1])[:_FRAMES]
    said = []
    for file, line, name in chosen:
        source = linecache.getline(file, line).split("  #")[0].strip()  # no inline comment
        said.append(
            f"{Path(file).name}:{line} in {name}" + (f": {source[:_LINE]}" if source else "")
        )
    return "; called from ".join(said)
