"""torch's error text in a few words, for the first line of a GangError.

torch's own text (a source path, gloo's advice, C++ frames) stays in the GangError's
``__cause__``; the message says only what kind of failure it was.
"""

from __future__ import annotations

import re
from pathlib import PurePath

import torch
import torch.distributed as dist

_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
"""The "[.../file.cc:123] " that gloo and c10d put before their messages."""
_BACKEND_TEXT = re.compile(
    r"^\[[^\]]*(?:/gloo/[^\]]*|ProcessGroup\w*)\.(?:cc|cpp|h|hpp):\d+\]"
    r"|^Application timeout caused pair closure"
)
"""The text gloo and c10d's process groups give a failed collective's work (torch 2.9.1 to
2.15.0, as the suite's tests of real failures see it on each): a tag where gloo or a process
group raised it (a store's, ``TCPStore.cpp`` or ``socket.cpp``, is not one), or gloo's words
for a call after a timeout closed its connections, which carry no tag."""
_KINDS = (
    (re.compile(r"Timed out|timed out|[Tt]imeout"), "timed out after {timeout:g} s"),
    (
        re.compile(
            r"Connection closed by peer|Connection reset by peer|Broken pipe"
            r"|Connection was likely closed"
        ),
        "a peer's connection closed",
    ),
    (re.compile(r"Connection refused"), "a peer refused the connection"),
)
_TORCH = PurePath(torch.__file__).parent
"""Where torch's own code lies."""
_MAX = 160
"""The most characters of torch's first line that a message repeats."""


def from_a_backend(error: BaseException) -> bool:
    """Whether ``error`` is of the kind torch.distributed's backends raise when a collective
    fails (a timeout, a closed connection, a backend's error): torch's distributed error
    types, or a RuntimeError whose text is gloo's or c10d's. Where it was raised (in a
    collective, or in a store call of the program's own) is for the caller to read from its
    traceback."""
    if isinstance(error, dist.DistError):
        return True
    return isinstance(error, RuntimeError) and (
        bool(_SOURCE.match(str(error).strip())) or backend_text(error)
    )


def backend_text(error: BaseException) -> bool:
    """Whether ``error``'s text is one gloo or a c10d process group gives a failed collective."""
    return bool(_BACKEND_TEXT.match(str(error).strip()))


def unwrapped(error: BaseException) -> BaseException:
    """The error ``error`` stands for: where torch raised it around another one (``raise ...
    from``: a pipeline stage's "failed to run forward" around the program's error or around a
    collective's), that one, followed inward as long as torch wrapped it."""
    while error.__cause__ is not None and _raised_by_torch(error):
        error = error.__cause__
    return error


def _raised_by_torch(error: BaseException) -> bool:
    """Whether ``error`` was raised in torch's code (its innermost frame lies in torch)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and PurePath(tb.tb_frame.f_code.co_filename).is_relative_to(_TORCH)


def summary(cause: BaseException, timeout: float) -> str:
    """What ``cause`` says happened, in a few words (``timeout``: the gang's, in seconds)."""
    text = str(cause).strip()
    for pattern, words in _KINDS:
        if pattern.search(text):
            return words.format(timeout=timeout)
    first = _SOURCE.sub("", text.splitlines()[0] if text else type(cause).__name__)
    first = first.split(". This is typically caused", 1)[0]
    return first if len(first) <= _MAX else first[: _MAX - 3] + "..."
