"""Imported by the fork server of a world's ranks: one empty pytest session, run once there.

Each rank is a pytest session. Loading the installed plugins, and what they import as a
session ends (hypothesis, for one), costs a new session a second or more of CPU, most of
it pytest rewriting the plugins' asserts again wherever Python may not write bytecode
(``PYTHONDONTWRITEBYTECODE``). A session run in the server before it forks imports those
modules once, through pytest's own import hook, so each forked rank finds them imported
as pytest would have imported them. The session collects an empty folder, with its own
empty configuration, its output going to the server's log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

log = logging.getLogger("gangmesh")


def _warm() -> None:
    """Run an empty pytest session in this process, without the caller's ``PYTEST_ADDOPTS``."""
    addopts = os.environ.pop("PYTEST_ADDOPTS", None)
    try:
        with tempfile.TemporaryDirectory(prefix="gangmesh-warm-") as folder:
            ini = Path(folder) / "pytest.ini"
            ini.write_text("[pytest]\n")
            arguments = ["-q", "-p", "no:cacheprovider", "--capture=no", "-c", str(ini),
                         f"--rootdir={folder}", folder]  # fmt: skip
            with contextlib.redirect_stdout(sys.stderr):
                code = pytest.main(arguments)
            log.debug("warm-up pytest session ended with %s", code)
    finally:
        if addopts is not None:
            os.environ["PYTEST_ADDOPTS"] = addopts


_warm()
