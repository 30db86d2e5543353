"""Every Gang collective inside torch.compile(fullgraph=True), on 2 processes; results to JSON.

    compiled_collectives.py OUT

For each collective, one function calls it on one gang of each kind (the root; a gang of
create_gangs over a group of its own; the size-1 gang create_gangs makes; a sub-gang numbered
against its group, create_gang([1, 0]); a sub-gang of one process; a part's root; a bridge
between parts; a FakeGang), once eagerly, once under ``torch._dynamo.explain`` and once
compiled with ``fullgraph=True`` (backend "eager"), each on fresh tensors. Each rank writes,
per collective: explain's graph and graph-break counts, the tensors of the compiled run that
differ from the eager run's, and how many collectives each group ran in the eager and in the
compiled run (torch's count of the group's calls).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from common import write_results

import gangmesh as gm
from gangmesh.runtime import _c10d

REDUCTIONS = tuple(gm.ReduceOperation)  # torch 2.9.1's dynamo does not iterate an Enum class
OTHER_TIMEOUT = timedelta(seconds=97)
"""Groups with another timeout than the root's: their own communicators, named by gangmesh."""

Inputs = Callable[[gm.Gang], list[torch.Tensor]]
Call = Callable[[gm.Gang, list[torch.Tensor]], None]
Step = Callable[[dict[str, list[torch.Tensor]]], None]


def values(*shape: int) -> torch.Tensor:
    """Distinct values on each process and in each place (float32)."""
    start = 100.0 * dist.get_rank() + 1.0
    return torch.arange(start, start + torch.Size(shape).numel()).reshape(shape)


def all_reduce_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    tensors = [values(2, 3) / (index + 1) for index, _ in enumerate(REDUCTIONS)]
    return [torch.nn.Parameter(tensors[0]), *tensors[1:]]  # parameters are averaged, too


def all_reduce(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    for tensor, op in zip(tensors, REDUCTIONS, strict=True):
        gang.all_reduce(tensor, op)


def all_gather_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    n = gang.size
    return [values(2, 3), torch.zeros(n, 2, 3), torch.zeros(2 * n, 3),
            torch.zeros(6 * n), values().reshape(()), torch.zeros(n)]  # fmt: skip


def all_gather(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    matrix, stacked, concatenated, flat, scalar, gathered_scalars = tensors
    gang.all_gather(stacked, matrix)
    gang.all_gather(concatenated, matrix)
    gang.all_gather(flat, matrix)
    gang.all_gather(gathered_scalars, scalar)


def all_gather_to_list_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    return [values(2, 3)] + [torch.zeros(2, 3) for _ in range(gang.size)]


def all_gather_to_list(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    gang.all_gather_to_list(tensors[1:], tensors[0])


def reduce_scatter_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    n = gang.size
    concatenated = [values(2 * n, 3) / (index + 1) for index, _ in enumerate(REDUCTIONS)]
    outputs = [torch.zeros(2, 3) for _ in REDUCTIONS]
    return [*concatenated, *outputs, values(n, 3), torch.zeros(3)]


def reduce_scatter(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    count = len(REDUCTIONS)
    for index, op in enumerate(REDUCTIONS):
        gang.reduce_scatter(tensors[count + index], tensors[index], op)
    stacked, stacked_out = tensors[2 * count :]
    gang.reduce_scatter(stacked_out, stacked, gm.ReduceOperation.SUM)


def uneven_splits(gang: gm.Gang) -> tuple[list[int], list[int]]:
    """Rows received from and sent to each rank, where rank s sends s + d + 1 rows to rank d
    (a FakeGang's identical peers send it what it sends itself)."""
    n, me = gang.size, gang.rank
    sent = [me + d + 1 for d in range(n)]
    received = [sent[me]] * n if isinstance(gang, gm.FakeGang) else [s + me + 1 for s in range(n)]
    return received, sent


def all_to_all_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    received, sent = uneven_splits(gang)
    n = gang.size
    return [values(2 * n, 3), torch.zeros(2 * n, 3),
            values(sum(sent), 2), torch.zeros(sum(received), 2)]  # fmt: skip


def all_to_all(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    even_in, even_out, uneven_in, uneven_out = tensors
    gang.all_to_all(even_out, even_in)
    gang.all_to_all(uneven_out, uneven_in, *uneven_splits(gang))


def broadcast_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    tensors = [values(2, 3) for _ in range(gang.size)]
    return [torch.nn.Parameter(tensors[0]), *tensors[1:]]  # parameters are broadcast, too


def broadcast(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    for source, tensor in enumerate(tensors):
        gang.broadcast(tensor, source_rank=source)


def barrier_inputs(gang: gm.Gang) -> list[torch.Tensor]:
    return [values(2)]


def barrier(gang: gm.Gang, tensors: list[torch.Tensor]) -> None:
    tensors[0].mul_(2)
    gang.barrier()
    tensors[0].add_(1)


OPS: dict[str, tuple[Inputs, Call]] = {
    "all_reduce": (all_reduce_inputs, all_reduce),
    "all_gather": (all_gather_inputs, all_gather),
    "all_gather_to_list": (all_gather_to_list_inputs, all_gather_to_list),
    "reduce_scatter": (reduce_scatter_inputs, reduce_scatter),
    "all_to_all": (all_to_all_inputs, all_to_all),
    "broadcast": (broadcast_inputs, broadcast),
    "barrier": (barrier_inputs, barrier),
}


def collectives_run(gangs: dict[str, gm.Gang]) -> dict[str, int]:
    """torch's count of the collectives entered on each gang's group so far (FakeGangs have
    none)."""
    return {
        name: _c10d.sequence_number(gang.as_process_group())
        for name, gang in gangs.items()
        if gang.supports_process_group
    }


def check(gangs: dict[str, gm.Gang], make_inputs: Inputs, call: Call) -> dict[str, object]:
    """The collective ``call`` on every gang: eagerly, explained, compiled; what differs."""

    def step(inputs: dict[str, list[torch.Tensor]]) -> None:
        for name, gang in gangs.items():
            call(gang, inputs[name])

    def run(function: Step) -> tuple[dict[str, list[torch.Tensor]], dict[str, int]]:
        inputs = {name: make_inputs(gang) for name, gang in gangs.items()}
        before = collectives_run(gangs)
        function(inputs)
        after = collectives_run(gangs)
        return inputs, {name: after[name] - before[name] for name in before}

    eager, eager_collectives = run(step)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)({n: make_inputs(g) for n, g in gangs.items()})
    torch._dynamo.reset()
    compiled, compiled_collectives = run(torch.compile(step, backend="eager", fullgraph=True))
    differ = [
        f"{name}, tensor {index}: {got.tolist()} != {want.tolist()}"
        for name in gangs
        for index, (got, want) in enumerate(zip(compiled[name], eager[name], strict=True))
        if not torch.equal(got, want)
    ]
    return {
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "break_reasons": [str(reason) for reason in explained.break_reasons],
        "differ": differ,
        "eager_collectives": eager_collectives,
        "compiled_collectives": compiled_collectives,
    }


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    mesh_gangs = gm.create_gangs(root, tp=2, timeout=OTHER_TIMEOUT)
    reordered = root.create_gang([1, 0])
    alone = [root.create_gang([0]), root.create_gang([1])][root.rank]
    parts = gm.create_parts(root, trainer=1, generator=1, timeout=OTHER_TIMEOUT)
    bridge = parts.bridge(trainer=[0], generator=[1])
    assert reordered is not None and alone is not None and bridge is not None
    gangs = {
        "root": root,
        "tp (create_gangs)": mesh_gangs.tp,
        "dp (create_gangs, size 1)": mesh_gangs.dp,
        "create_gang([1, 0])": reordered,
        "create_gang of one": alone,
        "part root": parts.root,
        "bridge": bridge,
        "FakeGang": gm.FakeGang(root.device, rank=1, size=3),
    }
    results: dict[str, object] = {}
    for op, (make_inputs, call) in OPS.items():
        try:
            results[op] = check(gangs, make_inputs, call)
        except Exception as ex:  # the test names what failed, op by op
            results[op] = {"error": f"{type(ex).__name__}: {ex}"}
    write_results(root.rank, results)
    parts.close()
    mesh_gangs.close()
    root.close()


if __name__ == "__main__":
    main()
