"""Where a rank that takes no part stands: its main thread's stack, dumped on a survivor's signal.

A rank alive but stuck outside the collective (a loop, a sleep, a wait of its own) cannot be
named by how it ended. Each process has Python's ``faulthandler`` dump every thread's stack on
:data:`SIGNAL` (from a C signal handler: a rank that holds the interpreter answers too; nothing
runs until then) into an anonymous in-memory file (``memfd``) that ends with the process. A
survivor on the same host that names such a rank reads that file through
``/proc/PID/fd/N``, sends the signal, reads the dump, and keeps the main thread's innermost
frames of the program's own code (file:line, function, the line); it leaves that in the job's
store for the survivors on other hosts. A stopped or dead rank writes nothing and is said to
say nothing.

The signal is a real-time one that nothing else is expected to use (SIGUSR1 and SIGUSR2 stay
the program's and its scheduler's: SLURM's ``--signal``). Nothing is installed where the
program or a library handles it already, or where ``GANGMESH_STACKS=0``. Once
installed, the signal is never left at its default action (which ends a process): while the
dump is registered, faulthandler answers it; after :func:`uninstall`, it is ignored, and the
in-memory file is closed, so that a survivor reading an old report finds nothing to ask.
"""

from __future__ import annotations

import ctypes
import faulthandler
import linecache
import logging
import os
import re
import signal
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch.distributed

log = logging.getLogger("gangmesh")

SIGNAL = int(signal.SIGRTMAX) - 5
"""The signal a survivor asks with: real-time, so that SIGUSR1/SIGUSR2 stay the program's."""
SWITCH = "GANGMESH_STACKS"
"""``0`` (or ``off``) in the environment: no stack dumps, nothing installed."""
ANSWER_BOUND = 1.0
"""Seconds a survivor waits for a stuck rank's dump."""
NAME = "gangmesh-stacks"
"""The in-memory file's name, as ``/proc/PID/fd/N`` shows it (``/memfd:NAME (deleted)``)."""
_FRAMES = 2
"""The most frames of the stuck rank's own code an answer holds."""
_LINE = 100
"""The most characters of a source line an answer repeats."""
_PATHS = sysconfig.get_paths()
_STDLIB = Path(_PATHS["stdlib"]).resolve()
_PACKAGES = {Path(_PATHS[name]).resolve() for name in ("purelib", "platlib")}
_LIBRARIES = (
    *{str(Path(_PATHS[name]).resolve()) for name in ("stdlib", "purelib", "platlib")},
    str(Path(__file__).resolve().parents[2]),
)
"""Where code that is not the program's own lives: the standard library, installed packages
(torch among them), gangmesh itself."""
_COLLECTIVES = (
    Path(torch.distributed.__file__).resolve().parent,
    Path(__file__).resolve().parents[2],
)
"""torch.distributed's code and gangmesh's: a main thread with a frame there is in a
collective, a wait on one, or a meeting of the job's; one without is in the program's own."""
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')

_dump: int | None = None
"""The in-memory file this process's stacks are dumped to, while installed."""


def install() -> tuple[int, int] | None:
    """Dump this process's stacks on :data:`SIGNAL` from now on (once); the in-memory file's
    descriptor and the main thread's id, for the job's reports; None where the dumps are
    switched off, the program handles the signal itself, or there is no memfd."""
    global _dump
    main = threading.main_thread().ident or 0
    if _dump is not None:
        return _dump, main
    if os.environ.get(SWITCH, "").strip().lower() in ("0", "off", "false", "no"):
        return None
    if not _free() or not hasattr(os, "memfd_create"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None  # only the main thread may set a signal's Python handler
    fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
    signal.signal(SIGNAL, signal.SIG_IGN)  # what faulthandler restores: never the default
    faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)
    _dump = fd
    return fd, main


def _free() -> bool:
    """Whether :data:`SIGNAL` is free to take: at its default action, or ignored (as gangmesh
    leaves it, here or in the process that started this one: an ignored signal is inherited),
    as Python and the C library see it (a handler registered with faulthandler or by a C
    library shows only in the latter)."""
    if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        action = ctypes.create_string_buffer(512)  # larger than any libc's struct sigaction
        if libc.sigaction(int(SIGNAL), None, action) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return ctypes.c_void_p.from_buffer(action).value in (None, 0, 1)  # SIG_DFL 0, SIG_IGN 1


def uninstall() -> None:
    """Stop dumping: close the in-memory file, and leave the signal ignored (a survivor that
    read an old report may still send it)."""
    global _dump
    dump, _dump = _dump, None
    if dump is None:
        return
    os.close(dump)  # a survivor's check of /proc/PID/fd/N fails from here on
    faulthandler.unregister(SIGNAL)  # back to SIG_IGN, which install left under it


def dump_of(pid: int, fd: int) -> str | None:
    """The path of process ``pid``'s stack dump, descriptor ``fd``; None where that descriptor
    is not gangmesh's in-memory file (closed, reused, or the process gone)."""
    path = f"/proc/{pid}/fd/{fd}"
    try:
        target = os.readlink(path)
    except OSError:
        return None
    return path if target.startswith(f"/memfd:{NAME}") else None


@dataclass(frozen=True)
class Standing:
    """Where a process's main thread stands, from its stack dump."""

    where: str
    """Its innermost frames of the program's own code, in words."""
    in_collective: bool
    """Whether it is inside torch.distributed's code (a collective, a wait on one)."""


def ask(pid: int, fd: int, main: int, bound: float = ANSWER_BOUND) -> Standing | None:
    """Where process ``pid`` (of this host) stands: its main thread, from a dump it writes to
    its in-memory file ``fd`` on :data:`SIGNAL`; None where it has no such file or wrote
    nothing within ``bound`` seconds (stopped, gone, or its dumps ended)."""
    path = dump_of(pid, fd)
    if path is None:
        return None
    try:
        before = os.stat(path).st_size
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
    if block is None:
        return None
    return Standing(where(block), _in_collective(block))


def _in_collective(frames: list[tuple[str, int, str]]) -> bool:
    """Whether the innermost of ``frames`` (innermost first) that is not the standard
    library's is torch.distributed's or gangmesh's: a thread in a collective, a wait on one or
    a meeting of the job's. The program's own code called from a hook of torch's (a pipeline
    stage's forward, a module hook of FSDP2's) is the program's. No such frame: counted as
    in one (nothing proves otherwise)."""
    for file, _, _ in frames:
        path = Path(file).resolve()
        if file.startswith("<frozen") or (
            path.is_relative_to(_STDLIB) and not any(path.is_relative_to(p) for p in _PACKAGES)
        ):
            continue
        return any(path.is_relative_to(root) for root in _COLLECTIVES)
    return True


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
