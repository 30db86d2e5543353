"""Careless input to every public entry point: the planner, create_gangs, create_parts,
setup_root_gang and the command line. Each call either answers correctly or refuses with a
TypeError or ValueError whose message starts with the argument it names; never another
exception (AttributeError, numpy's MemoryError, OverflowError), never a traceback on the
command line, never a hang.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangmesh as gm
from gangmesh.plan.dims import DENSE_DIMS
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing.strategies import layouts
from gangmesh.tools.cli import main

CPU = torch.device("cpu")
NAMED = re.compile(r"^[A-Za-z_][\w\[\]\.'-]*(, [A-Za-z_]\w*)*( and [A-Za-z_]\w*)?: \S")
"""An error message that starts with the argument(s) it is about: ``tp: ...``,
``sites[0]: ...``, ``dp_shard and tp: ...``."""

SIZE_KEYWORDS = ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "etp")

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=70),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.sampled_from(["tp", "dp", "dp_shard", "ep", "efsdp", "x", "", "-1", "tp,dp_shard"]),
    st.lists(st.integers(min_value=-2, max_value=9), max_size=4),
    st.frozensets(st.sampled_from(DENSE_DIMS)),
    st.tuples(st.sampled_from(DENSE_DIMS)),
    st.binary(max_size=3),
    st.just(CPU),
    st.just(timedelta(seconds=-1)),
    st.just(object()),
)
"""Values a careless caller passes: wrong types, out-of-range and absurd numbers, names."""

SIZES = st.one_of(st.integers(min_value=-1, max_value=8), JUNK)
"""A size: often a plausible one, so that some calls succeed and their answers are checked."""

CAREFUL = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def answer_or_named_error(call: Callable[[], Any]) -> Any:
    """What ``call`` returns, or the TypeError/ValueError it raised, checked to name its
    argument; any other exception escapes and fails the test."""
    try:
        return call()
    except (TypeError, ValueError) as ex:
        assert NAMED.match(str(ex)), f"the error names no argument: {type(ex).__name__}: {ex}"
        return ex


@CAREFUL
@given(world=st.one_of(st.integers(min_value=1, max_value=64), JUNK), data=st.data())
def test_a_plan_of_careless_sizes_is_laid_out_or_refused_by_name(world: Any, data: Any):
    sizes = {
        k: data.draw(SIZES, label=k) for k in data.draw(st.sets(st.sampled_from(SIZE_KEYWORDS)))
    }
    order = data.draw(st.one_of(st.none(), JUNK, st.permutations(DENSE_DIMS)), label="order")
    plan = answer_or_named_error(lambda: MeshTopology(world, **sizes, order=order))
    if isinstance(plan, MeshTopology):
        assert plan.world_size == world
        dense = [plan.size_of(name) for name in DENSE_DIMS]
        assert dense[0] * dense[1] * dense[2] * dense[3] * dense[4] == world


@CAREFUL
@given(
    plan=layouts(max_world_size=64, orders=True, experts=True),
    args=st.lists(JUNK, min_size=3, max_size=3),
)
def test_a_plans_questions_with_careless_arguments_are_answered_or_refused_by_name(
    plan: MeshTopology, args: list[Any]
):
    a, b, c = args
    group = answer_or_named_error(lambda: plan.group_of(a, b))
    if isinstance(group, list):
        assert a in group and len(group) == plan.size_of(b)
        assert answer_or_named_error(lambda: plan.rank_in(a, b)) == group.index(a)
    groups = answer_or_named_error(lambda: plan.groups(a))
    if not isinstance(groups, Exception):
        assert groups.shape == (plan.world_size // plan.size_of(a), plan.size_of(a))
    first = answer_or_named_error(lambda: plan.first_groups(a, b))
    if isinstance(first, list):
        assert first == plan.groups(a)[:b].tolist()
    coordinate = answer_or_named_error(lambda: plan.coordinate(a))
    if isinstance(coordinate, dict):
        assert plan.rank_of(**{k: coordinate[k] for k in DENSE_DIMS}) == a
    found = answer_or_named_error(
        lambda: plan.check_locality(a, hosts_per_domain=b, domains_per_rack=c)
    )
    assert isinstance(found, (list, Exception))
    answer_or_named_error(lambda: plan.size_of(a))


@CAREFUL
@given(args=st.lists(JUNK, min_size=4, max_size=4))
def test_sites_and_clusters_of_careless_arguments_are_made_or_refused_by_name(args: list[Any]):
    host, domain, rack, sites = args
    site = answer_or_named_error(lambda: gm.Site(host, domain, rack))
    if isinstance(site, gm.Site):
        assert (site.host, site.domain, site.rack) == (host, domain, rack)
    cluster = answer_or_named_error(lambda: gm.Cluster.of_sites(sites))
    assert isinstance(cluster, (gm.Cluster, Exception))
    uniform = answer_or_named_error(lambda: gm.Cluster.uniform(host, domain, rack, sites))
    assert isinstance(uniform, (gm.Cluster, Exception))


@CAREFUL
@given(
    world=st.integers(min_value=1, max_value=8),
    data=st.data(),
    extra=st.lists(JUNK, min_size=2, max_size=2),
)
def test_gangs_and_parts_of_careless_arguments_are_built_or_refused_by_name(
    world: int, data: Any, extra: list[Any]
):
    root = gm.FakeGang(CPU, rank=data.draw(st.integers(0, world - 1)), size=world)
    timeout, placement = extra
    sizes = {
        k: data.draw(SIZES, label=k) for k in data.draw(st.sets(st.sampled_from(SIZE_KEYWORDS)))
    }
    gangs = answer_or_named_error(lambda: gm.create_gangs(root, timeout=timeout, **sizes))
    if isinstance(gangs, gm.Gangs):
        assert gangs.plan.world_size == world
        gangs.close()
    placed = answer_or_named_error(lambda: gm.create_gangs(root, placement=placement))
    if isinstance(placed, gm.Gangs):
        placed.close()
    names = data.draw(
        st.lists(st.sampled_from(["a", "b", "tp", "1x", ""]), max_size=3, unique=True)
    )
    parts = answer_or_named_error(
        lambda: gm.create_parts(root, timeout=timeout, **{n: data.draw(SIZES) for n in names})
    )
    if isinstance(parts, gm.Parts):
        assert parts.root.size == len(parts.ranks(parts.name))
        parts.close()
    answer_or_named_error(lambda: gm.create_gangs(timeout, tp=2))  # no root gang at all
    answer_or_named_error(lambda: gm.create_fsdp_gangs(timeout))
    answer_or_named_error(lambda: gm.all_gather_objects(placement, 1))


@settings(max_examples=40, deadline=None)
@given(args=st.lists(JUNK, min_size=4, max_size=4))
def test_setup_root_gang_of_careless_arguments_starts_or_refuses_by_name(args: list[Any]):
    device, timeout, monitored, high_priority = args
    gang = answer_or_named_error(
        lambda: gm.setup_root_gang(
            device, timeout=timeout, monitored=monitored, high_priority=high_priority
        )
    )
    if isinstance(gang, gm.Gang):  # a world of one process on this machine
        assert gang.size == 1 and not isinstance(monitored, str)
        gang.close()
    assert not dist.is_initialized()


OPTIONS = [
    "--world-size", "--ranks-per-node", "--hosts-per-domain", "--domains-per-rack", "--pp",
    "--dp-replicate", "--dp-shard", "--cp", "--tp", "--ep", "--etp", "--order", "--rank",
    "--format", "--json-content", "--part", "--expert", "--strict", "--tensor-parallel",
]  # fmt: skip
VALUES = st.one_of(
    st.integers(min_value=-2, max_value=80).map(str),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.sampled_from(["x", "", "1.5", "tp", "json", "svg", "a=2", "a=4:tp=2", "nan", "--"]),
)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as ex:  # argparse's exit
            code = ex.code if isinstance(ex.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@CAREFUL
@given(tokens=st.lists(st.one_of(st.sampled_from(OPTIONS), VALUES), max_size=8))
def test_the_plan_command_of_careless_arguments_answers_or_errs_in_one_line(tokens: list[str]):
    code, out, err = run_cli(["plan", *tokens])
    assert code in (0, 1, 2), (tokens, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and re.match(r"gangmesh( plan)?: error: ", lines[0]), (tokens, err)
    if code == 0:
        assert out, tokens


CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("groups of 2**40 ranks", lambda: MeshTopology(2**40, tp=2).groups("tp"), "world_size: "),
    ("locality of 2**40 ranks", lambda: MeshTopology(2**40, tp=2).check_locality(8),
     "world_size: "),
    ("order=123", lambda: MeshTopology(8, tp=2, order=123), "order: "),
    ("order=5.0", lambda: MeshTopology(8, tp=2, order=5.0), "order: "),
    ("order a set", lambda: MeshTopology(8, tp=2, order=set(DENSE_DIMS)), "order: "),
    ("groups(None)", lambda: MeshTopology(8, tp=2).groups(None), "dim: "),
    ("first_groups count -1", lambda: MeshTopology(8, tp=2).first_groups("tp", -1), "count: "),
    ("check_locality(None)", lambda: MeshTopology(8, tp=2).check_locality(None),
     "ranks_per_node: "),
    ("Site(None)", lambda: gm.Site(None), "host: "),  # type: ignore[arg-type]
    ("Cluster.of_sites of names", lambda: gm.Cluster.of_sites(["a", "b"]), "sites[0]: "),
    ("create_fsdp_gangs('x')", lambda: gm.create_fsdp_gangs("x"), "gangs: "),  # type: ignore[arg-type]
    ("all_gather_objects('x', 1)", lambda: gm.all_gather_objects("x", 1), "gang: "),  # type: ignore[arg-type]
    ("setup_root_gang(monitored='x')", lambda: gm.setup_root_gang(monitored="x"), "monitored: "),  # type: ignore[arg-type]
]  # fmt: skip


@pytest.mark.parametrize(("case", "call", "starts"), CASES, ids=[c[0] for c in CASES])
def test_each_careless_input_found_before_is_refused_by_name(case, call, starts):
    with pytest.raises((TypeError, ValueError)) as raised:
        call()
    assert str(raised.value).startswith(starts), raised.value


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_cuda_device_on_a_machine_without_one_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^device: expected a device this machine has"):
        gm.setup_root_gang(torch.device("cuda", 0))
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--world-size", "99999999999999999999999"], "argument --world-size: expected an int"),
        (["--world-size", str(2**40), "--tp", "2"], "--world-size: gangmesh plan lists groups"),
        (["--tensor-parallel", "2"], "unknown option --tensor-parallel; did you mean --tp?"),
    ],
)
def test_absurd_command_lines_get_one_line_and_exit_2(argv, error):
    code, _, err = run_cli(["plan", *argv])
    assert code == 2
    assert err.count("\n") == 1 and error in err, err


def test_more_ranks_per_node_than_the_world_is_one_node_holding_it():
    code, out, _ = run_cli(["plan", "--world-size", "8", "--ranks-per-node", "16"])
    assert code == 0 and "one node holds all 8 ranks" in out
