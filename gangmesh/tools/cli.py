"""The ``gangmesh`` command: ``plan`` a layout, ``check`` a cluster, serve a ``join-server``.

Its arguments, its error messages and its exit codes; the commands run in
:mod:`gangmesh.tools.plan_command` and :mod:`gangmesh.tools.check_command`. ``plan`` needs
numpy only: this module imports the check (and with it torch) only when ``check`` runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from typing_extensions import override

from gangmesh import __version__
from gangmesh.plan.dim_keywords import closest
from gangmesh.plan.dims import DENSE_DIMS, FACTS, SIZE_NAMES, option
from gangmesh.plan.layout import Layout
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.tools.check_entry import run_check
from gangmesh.tools.failure import Failure
from gangmesh.tools.join_command import add_arguments as add_join_arguments
from gangmesh.tools.join_server_command import add_parser as add_join_server_parser
from gangmesh.tools.join_server_command import run_join_server
from gangmesh.tools.plan_command import run_plan
from gangmesh.tools.render import JSON_CONTENTS

USAGE_ERROR = 2
"""Exit code for bad arguments and any other error the command reports in one line."""

_SPELLED = ("world_size", "ranks_per_node", "hosts_per_domain", "domains_per_rack", "rank", "order")

OPTIONS: dict[str, str] = {name: option(name) for name in (*_SPELLED, *SIZE_NAMES)}
"""The command-line spelling of each name the planner's error messages use."""

CHECK_OPTIONS: dict[str, str] = {
    **OPTIONS,
    **{name: option(name) for name in ("nproc", "sizes", "iters", "timeout")},
    "world_size": "--nproc",
}
"""The same for ``gangmesh check`` started locally, where ``--nproc`` is the world size."""

LAUNCHED_CHECK_OPTIONS: dict[str, str] = {**CHECK_OPTIONS, "world_size": "the world size"}
"""The same for ``gangmesh check`` under a launcher, which sets the world size."""


class _HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, where it has one worth showing."""

    @override
    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
            and "%(default)" not in text
        ):
            text += " (default: %(default)s)"
        return text


def _int(text: str) -> int:
    """An int option's value: an int of at most 2**62 either way, else a one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
    if abs(value) > 2**62:
        raise argparse.ArgumentTypeError(f"expected an int of at most 2**62, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2; an unknown option is
    named first (before a missing one), with the closest option."""

    @override
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")

    @override
    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        if self._subparsers is None:  # a command's own parser: every option is its own
            self._refuse_unknown_options(given)
        return super().parse_known_args(given, namespace)

    def _refuse_unknown_options(self, given: list[str]) -> None:
        known = [name for name in self._option_string_actions if name.startswith("--")]
        for token in given:
            if token == "--":
                return
            name = token.partition("=")[0]
            if not name.startswith("--") or any(option.startswith(name) for option in known):
                continue
            valid = [option[2:].replace("-", "_") for option in known]
            guess = closest(name[2:].replace("-", "_"), valid)
            hint = f"; did you mean --{guess.replace('_', '-')}?" if guess else ""
            text = f"unknown option {name}{hint} (see {self.prog} --help)"
            self.exit(USAGE_ERROR, f"{self.prog}: error: {text}\n")


class _Size(argparse.Action):
    """Stores a size and notes its option in ``given_sizes`` (what the command line set,
    as opposed to a default)."""

    @override
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        given = getattr(namespace, "given_sizes", ())
        namespace.given_sizes = (*given, option_string or self.dest)


def _add_dim_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("parallel dimensions (one may be -1: inferred)")
    for name in SIZE_NAMES:
        facts = FACTS[name]
        group.add_argument(
            option(name), type=_int, default=facts.default, help=facts.help, action=_Size
        )
    group.add_argument(
        "--order",
        help=f"the five dense dimensions, comma-separated, outermost first "
        f"(default: {','.join(DENSE_DIMS)}); or Megatron-Core's spelling, innermost first "
        f"with dashes, as plans print it (e.g. {Layout().megatron_order()})",
    )
    group.add_argument(
        "--expert",
        action="store_true",
        help="the expert view's gangs at ep = 1 and etp = 1 too (a mixture of experts without "
        "expert parallelism); ep or etp above 1 asks for them anyway",
    )


def _add_part_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--part",
        action="append",
        metavar="NAME=SIZE[:DIM=SIZE,...]",
        help="a part of a job that runs several models: SIZE consecutive ranks after the "
        "parts before it (-1: the ranks the others leave), laid out by its own sizes (e.g. "
        "trainer=4:tp=2); repeat for each part, in rank order. Groups are shown in global "
        "ranks; the size options above go in each part's spec",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``gangmesh``, its commands included."""
    return build_parsers()[0]


def help_text(command: str | None = None, *, width: int | None = None) -> str:
    """The ``--help`` text of ``gangmesh`` or of one of its commands (``plan``, ``check``).

    ``width`` wraps it at that many columns instead of the terminal's width.
    """
    parser, commands = build_parsers(width)
    return (parser if command is None else commands[command]).format_help()


def build_parsers(
    width: int | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser of ``gangmesh`` and the parser of each command, by name.

    ``width`` wraps the help at that many columns instead of the terminal's width.
    """
    formatter = functools.partial(_HelpFormatter, width=width) if width else _HelpFormatter
    parser = _Parser(
        prog="gangmesh",
        description="Plan parallel layouts and check that a cluster gets them.",
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"gangmesh {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    plan = commands.add_parser(
        "plan",
        help="print the gangs of a layout, computed without processes",
        description="Print every gang of a layout (table, JSON or SVG) without processes. "
        "Exit status: 0, or 1 with --strict when a locality finding is one to fix, or 2 for "
        "bad arguments and other errors.",
        formatter_class=formatter,
    )
    _add_plan_arguments(plan)
    check = commands.add_parser(
        "check",
        help="check gang layouts and collectives on real processes",
        description=(
            "Build the gangs on every process, check memberships against the plan, run "
            "all_reduce, all_gather, all_to_all, reduce_scatter, broadcast and barrier on "
            "every gang, time all_reduce and who arrives last at barriers, and report "
            "where each rank runs. "
            "Under torchrun or SLURM each process takes part as its rank; otherwise NPROC "
            "local CPU processes are started (gloo on 127.0.0.1)."
        ),
        formatter_class=formatter,
    )
    nproc = "local processes (default: 4, or the sum of the --part sizes)"
    check.add_argument("--nproc", type=_int, help=nproc)
    _add_dim_arguments(check)
    _add_part_argument(check)
    check.add_argument("--sizes", default="8,1K,64K,1M", help="all_reduce message sizes")
    iters = "timed all_reduces per size, and timed barriers per gang"
    check.add_argument("--iters", type=_int, default=10, help=iters)
    check.add_argument("--timeout", type=float, default=60.0, help="collective timeout, seconds")
    check.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        help="each process's device: cpu (gloo) or cuda (NCCL, one GPU per process); default: "
        "cuda where torch sees at least NPROC GPUs, else cpu (under a launcher: cuda:LOCAL_RANK "
        "where GPUs are visible)",
    )
    check.add_argument(
        "--ranks-per-node",
        type=_int,
        help="processes per node, for the locality report (default: the launcher's local "
        "world size, if any)",
    )
    check.add_argument(
        "--replica-groups",
        type=_int,
        help="run this many replica groups of --nproc processes each on this machine, with a "
        "lighthouse, and check the reduction across them (needs gangmesh[ft])",
    )
    check.add_argument(
        "--lighthouse",
        help="take part as one replica group (GANGMESH_REPLICA_GROUP) of a job whose groups "
        "meet at this lighthouse (host:port): checks the reduction across them too",
    )
    check.add_argument(
        "--placement",
        action="store_true",
        help="lay the mesh over the ranks by where they run (create_gangs(..., "
        "placement=True): GANGMESH_HOST or the hostname, GANGMESH_DOMAIN, GANGMESH_RACK)",
    )
    check.add_argument("--json", help="write the results as JSON to this file, or to - (stdout)")
    check.add_argument("--init-method", help=argparse.SUPPRESS)
    check.add_argument("--inject-rank", type=_int, help=argparse.SUPPRESS)
    check.add_argument(
        "--inject-fault",
        choices=("exit", "kill", "stop", "slow"),
        default="exit",
        help=argparse.SUPPRESS,
    )
    join_server = add_join_server_parser(commands, formatter, _int)
    return parser, {"plan": plan, "check": check, "join-server": join_server}


def _add_plan_arguments(plan: argparse.ArgumentParser) -> None:
    plan.add_argument(
        "--world-size",
        type=_int,
        help="number of processes (required without --part or --job; with --part, the sum of "
        "the parts' sizes by default)",
    )
    _add_part_argument(plan)
    add_join_arguments(plan)
    plan.add_argument(
        "--ranks-per-node",
        type=_int,
        help="processes per node (a factor of the world size, or the world on one node): draws "
        "nodes and checks that the gangs meant to stay on one node do (default: no check)",
    )
    plan.add_argument(
        "--hosts-per-domain",
        type=_int,
        help="nodes per NVLink domain (consecutive nodes; needs --ranks-per-node): also "
        "checks that the gangs which should stay in one domain do",
    )
    plan.add_argument(
        "--domains-per-rack",
        type=_int,
        help="NVLink domains per rack (needs --hosts-per-domain): also checks racks",
    )
    _add_dim_arguments(plan)
    plan.add_argument(
        "--replica-groups",
        type=_int,
        help="the job is this many replica groups (launches of --world-size processes each, "
        "reduced across groups by torchft: join_replicas); the layout is one group's",
    )
    plan.add_argument(
        "--rank",
        type=_int,
        help="also show this rank's coordinate and gangs (table, JSON), or outline its "
        "groups (SVG)",
    )
    plan.add_argument(
        "--format",
        choices=("table", "json", "svg"),
        default="table",
        help="table: sizes, group counts, the first groups and the locality report; json: "
        "for tools (see --json-content); svg: a picture, one panel per dimension",
    )
    plan.add_argument(
        "--json-content",
        choices=JSON_CONTENTS,
        help="with --format json, all: every group of every dimension (about 54 MB at "
        "2**20 ranks); counts: sizes and group counts only. --rank adds that rank's groups "
        "either way (default: all)",
    )
    plan.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a locality finding is one to fix (needs --ranks-per-node)",
    )
    plan.add_argument("--output", help="write to this file (default: standard output)")


def option_spelling(message: str, options: dict[str, str] = OPTIONS) -> str:
    """A planner's message with the names it starts with (and sizes) spelled as options.

    ``options`` maps each name to its spelling (``plan``'s by default).

    >>> option_spelling("dp_shard, tp: tp=3 does not divide world_size 32")
    '--dp-shard, --tp: --tp=3 does not divide --world-size 32'
    >>> option_spelling("tp: tp=4 does not divide world_size 6", CHECK_OPTIONS)
    '--tp: --tp=4 does not divide --nproc 6'
    """
    subject, colon, rest = message.partition(": ")
    names = re.split(r", | and ", subject)
    if not colon or not all(name in options for name in names):
        return message
    for name in names:
        subject = re.sub(rf"\b{name}\b", options[name], subject)
    if names != ["order"]:
        rest = re.sub(r"\b(\w+)=(?=-?\d)", lambda m: f"{options.get(m[1], m[1])}=", rest)
        rest = re.sub(r"\bworld_size(?= (?:is )?\d)", options["world_size"], rest)
        inferred = r"\b(\w+)(?= cannot infer| is -1 by default)"
        rest = re.sub(inferred, lambda m: options.get(m[1], m[1]), rest)
    return f"{subject}: {rest}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gangmesh`` with ``argv`` (default: the command line); the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        sys.stderr.write(parser.format_help())
        return USAGE_ERROR
    if getattr(args, "ranks_per_node", None) is not None and args.ranks_per_node < 1:
        parser.exit(USAGE_ERROR, f"gangmesh {args.command}: error: --ranks-per-node must be >= 1\n")
    try:
        if args.command == "check":
            return run_check(args, sys.argv[1:] if argv is None else list(argv), main)
        if args.command == "join-server":
            return run_join_server(args)
        return run_plan(args)
    except ValueError as ex:
        return _fail(args.command, option_spelling(str(ex), _spellings(args)))
    except Failure as ex:
        return _fail(args.command, str(ex))
    except MemoryError:
        text = "out of memory listing every group (--json-content counts lists none)"
        return _fail(args.command, text)
    except BrokenPipeError:
        # The reader (e.g. head) stopped reading: not an error of ours; stay quiet at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as ex:
        return _fail(args.command, f"{ex.filename}: {ex.strerror}" if ex.filename else str(ex))
    except KeyboardInterrupt:
        return 130


def _spellings(args: argparse.Namespace) -> dict[str, str]:
    """How the names in an error message are spelled for the command that runs."""
    if args.command == "plan":
        return OPTIONS
    env = read_launch_environment()
    launched = args.init_method is None and env is not None and env.world_size > 1
    return LAUNCHED_CHECK_OPTIONS if launched else CHECK_OPTIONS


def _fail(command: str, text: str) -> int:
    first = " ".join(text.split())
    sys.stderr.write(f"gangmesh {command}: error: {first}\n")
    return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
