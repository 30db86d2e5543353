"""``gangmesh join-server``: serve the store that jobs launched apart meet in, until stopped.

It prints where it serves (``serving a join store at HOST:PORT``), then holds the store until
SIGTERM or SIGINT. torch is imported only when it runs.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from gangmesh.tools.failure import Failure


def add_parser(commands: Any, formatter: Any, to_int: Any) -> argparse.ArgumentParser:
    """The command's parser, added to ``commands``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "join-server",
        help="serve the store two jobs launched apart meet in (gangmesh.join_jobs)",
        description="Serve the store that jobs launched apart meet in (gangmesh.join_jobs), "
        "until SIGTERM or SIGINT. Neither job serves it, so that either may break and be "
        "restarted while the other learns who broke and meets it again.",
        formatter_class=formatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address of this host to listen at")
    parser.add_argument("--port", type=to_int, default=0, help="port to listen at (0: a free one)")
    return parser


def run_join_server(args: argparse.Namespace) -> int:
    """Serve until stopped; the exit status.

    :raises Failure: a host that is no address of this host, a port out of range or taken.
    """
    stops = {signal.SIGTERM, signal.SIGINT}
    # blocked before torch starts any thread (every thread then leaves them to sigwait), and
    # unblocked again after: a process that calls this and goes on keeps its signals
    before = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        _serve_until_stopped(args, stops)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    return 0


def _serve_until_stopped(args: argparse.Namespace, stops: set[signal.Signals]) -> None:
    """Serve until one of ``stops`` (blocked in every thread) comes.

    :raises Failure: as :func:`run_join_server` says.
    """
    from gangmesh.assembly.join_server import serve_join  # puts off torch
    from gangmesh.runtime.gang import GangError

    try:
        server = serve_join(args.host, args.port)
    except ValueError as ex:  # it names the argument: host or port
        raise Failure(f"--{ex}") from ex
    except GangError as ex:
        raise Failure(str(ex)) from ex
    with server:
        sys.stdout.write(f"serving a join store at {server.address}\n")
        sys.stdout.flush()
        signal.sigwait(stops)
