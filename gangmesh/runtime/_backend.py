"""Collectives handed straight to a process group's backend, for plain tensors.

``torch.distributed.all_reduce`` and its siblings spend several microseconds in Python
(tensor-subclass dispatch, argument checks gangmesh has already made, option objects,
logging wrappers) before they call the ProcessGroup method that does the work. Gangs
call that method themselves when the tensors are plain: exact ``torch.Tensor`` (no
subclass to dispatch) of a real dtype that needs no reinterpretation. Anything else
(DTensor and other subclasses, complex, float8) takes torch's public function. Both
paths tell the backend the call is waited for (``asyncOp`` off, as ``async_op=False``
does) and wait for the work as the public functions do, so the effect on streams and the
errors raised are the same. The methods and option classes used here are the ones
c10d backends implement; the test suite runs both paths on every supported torch. The
private parts (older torch's method names, one option class) come from
:mod:`gangmesh.runtime._c10d`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup, ReduceOp

from gangmesh.runtime import _c10d
from gangmesh.runtime.gang import ReduceOperation

_PLAIN = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    }
)
_all_gather_single = _c10d.process_group_method("all_gather_single", "_allgather_base")
_reduce_scatter_single = _c10d.process_group_method("reduce_scatter_single", "_reduce_scatter_base")
_all_to_all_single: Any = (
    getattr(ProcessGroup, "all_to_all_single", None) or ProcessGroup.alltoall_base
)

_public_all_reduce = _c10d.undecorated(dist.all_reduce)
_public_broadcast = _c10d.undecorated(dist.broadcast)
_public_all_gather = _c10d.undecorated(dist.all_gather)
_public_all_gather_single = _c10d.undecorated(
    getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
)
_public_reduce_scatter_single = _c10d.undecorated(
    getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
)
_public_all_to_all_single = _c10d.undecorated(dist.all_to_all_single)


TORCH_OPS = {
    ReduceOperation.SUM: ReduceOp.SUM,
    ReduceOperation.MEAN: ReduceOp.AVG,
    ReduceOperation.PRODUCT: ReduceOp.PRODUCT,
    ReduceOperation.MIN: ReduceOp.MIN,
    ReduceOperation.MAX: ReduceOp.MAX,
}


def _waited(options: Any) -> Any:
    """``options`` for a call whose work is waited for at once, as the public functions
    say it (``async_op=False``): NCCL then runs it on the current stream, with no event
    between that stream and its own."""
    options.asyncOp = False
    return options


def _wait(work: Any) -> None:
    """Wait for a waited call's work; a backend that finished it in the call (NCCL, told the
    call is waited for) hands back none."""
    if work is not None:
        work.wait()


def _with_op(options: Any, op: ReduceOperation) -> Any:
    options.reduceOp = TORCH_OPS[op]
    return _waited(options)


# Option objects are read, never changed, by the calls: one of each serves every call.
_ALL_REDUCE = {op: _with_op(dist.AllreduceOptions(), op) for op in ReduceOperation}
_REDUCE_SCATTER = {op: _with_op(dist.ReduceScatterOptions(), op) for op in ReduceOperation}
_ALL_GATHER = _waited(_c10d.allgather_options())
_ALL_TO_ALL = _waited(dist.AllToAllOptions())
_BROADCAST: dict[int, Any] = {}


def plain(tensor: Tensor) -> bool:
    """Whether ``tensor`` may skip torch's public function."""
    return type(tensor) is Tensor and tensor.dtype in _PLAIN


def all_reduce(pg: ProcessGroup, tensor: Tensor, op: ReduceOperation) -> None:
    if plain(tensor):
        _wait(pg.allreduce([tensor], _ALL_REDUCE[op]))
    else:
        _public_all_reduce(tensor, TORCH_OPS[op], pg)


def broadcast(pg: ProcessGroup, tensor: Tensor, source_rank: int) -> None:
    if plain(tensor):
        opts = _BROADCAST.get(source_rank)
        if opts is None:
            opts = _BROADCAST[source_rank] = _waited(dist.BroadcastOptions())
            opts.rootRank = source_rank
            opts.rootTensor = 0
        _wait(pg.broadcast([tensor], opts))
    else:
        _public_broadcast(tensor, group=pg, group_src=source_rank)


def all_gather_single(pg: ProcessGroup, output: Tensor, input_: Tensor) -> None:
    """Gather into ``output``, concatenated along dim 0 (the one form every backend takes);
    both of one dtype, as the gang checked."""
    if type(input_) is Tensor is type(output) and input_.dtype in _PLAIN:
        _wait(_all_gather_single(pg, output, input_, _ALL_GATHER))
    else:
        _public_all_gather_single(output, input_, pg)


def all_gather(pg: ProcessGroup, outputs: list[Tensor], input_: Tensor) -> None:
    if plain(input_) and all(plain(output) for output in outputs):
        _wait(pg.allgather([outputs], [input_], _ALL_GATHER))
    else:
        _public_all_gather(outputs, input_, pg)


def reduce_scatter_single(
    pg: ProcessGroup, output: Tensor, input_: Tensor, op: ReduceOperation
) -> None:
    """Reduce-scatter ``input_``, concatenated along dim 0, into ``output``; both of one
    dtype, as the gang checked."""
    if type(input_) is Tensor is type(output) and input_.dtype in _PLAIN:
        _wait(_reduce_scatter_single(pg, output, input_, _REDUCE_SCATTER[op]))
    else:
        _public_reduce_scatter_single(output, input_, TORCH_OPS[op], pg)


def all_to_all_single(
    pg: ProcessGroup,
    output: Tensor,
    input_: Tensor,
    output_split_sizes: list[int] | None,
    input_split_sizes: list[int] | None,
) -> None:
    if plain(input_) and plain(output):
        _wait(
            _all_to_all_single(
                pg,
                output,
                input_,
                output_split_sizes or [],
                input_split_sizes or [],
                _ALL_TO_ALL,
            )
        )
    else:
        _public_all_to_all_single(output, input_, output_split_sizes, input_split_sizes, pg)
