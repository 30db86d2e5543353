"""The expert view of a dense layout, and the rules it keeps.

Expert parallelism borrows the ranks of dp_shard x cp (x tp when the experts have no
tensor parallelism of their own); efsdp is what it leaves. The expert view lays the same
ranks out as pp, dp_replicate (as in the dense view), efsdp, ep and etp. The strategies of
:mod:`gangmesh.testing.strategies` draw layouts by the same rules. This module uses numpy
only.
"""

from __future__ import annotations

import math

from gangmesh.plan.dims import DENSE_DIMS, EXPERT_DIMS, SHARED_DIMS, Dim
from gangmesh.plan.view import View


def borrowed_dims(etp: int) -> tuple[Dim, ...]:
    """The dense dimensions whose ranks expert parallelism borrows: dp_shard and cp, and
    tp too when the experts have no tensor parallelism of their own (etp = 1).

    :param etp: the experts' tensor parallel size.
    """
    return tuple(d for d in DENSE_DIMS if d not in SHARED_DIMS and (etp == 1 or d != Dim.TP))


def shared_outermost(order: tuple[str, ...]) -> bool:
    """Whether the dimensions the expert view shares are the outermost of ``order``
    (the rule for ep > 1: dense and expert layers share stages and replicas).

    :param order: dense dimension names, outermost first.
    """
    return set(order[: len(SHARED_DIMS)]) == set(SHARED_DIMS)


def tp_innermost(order: tuple[str, ...]) -> bool:
    """Whether tp is the innermost of ``order`` (the rule for ep > 1 with etp = tp:
    expert and dense layers share the tp groups).

    :param order: dense dimension names, outermost first.
    """
    return order[-1] == Dim.TP


def order_rule_broken(order: tuple[str, ...], ep: int, etp: int) -> str | None:
    """The expert view's order rule that ``order`` breaks at ``ep`` and ``etp``, or None.

    >>> order = (Dim.PP, Dim.DP_REPLICATE, Dim.DP_SHARD, Dim.TP, Dim.CP)
    >>> order_rule_broken(order, 1, 2) is None  # any order at ep = 1
    True
    >>> print(order_rule_broken(order, 2, 2).split(" (")[0])
    with ep=2 > 1 and etp = tp = 2, tp must be the innermost dimension

    :param order: dense dimension names, outermost first.
    :param ep: expert parallel size.
    :param etp: the experts' tensor parallel size.
    """
    if ep > 1 and not shared_outermost(order):
        return (
            f"with ep={ep} > 1, pp and dp_replicate must be the two outermost dimensions "
            f"(dense and expert layers share pipeline stages and replicas)"
        )
    if ep > 1 and etp > 1 and not tp_innermost(order):
        return (
            f"with ep={ep} > 1 and etp = tp = {etp}, tp must be the innermost dimension "
            f"(expert and dense layers share the tp groups)"
        )
    return None


def expert_view(dense: View, ep: int, etp: int) -> View:
    """The expert view of a dense layout, checked against the rules.

    ep borrows the ranks of dp_shard x cp (x tp when etp = 1); efsdp is what it leaves.
    With ep = 1 the view may take the dense dimensions in another order than the dense
    view; with ep > 1 the order rules keep it row-major over the ranks.

    :param dense: the dense view.
    :param ep: expert parallel size.
    :param etp: the experts' tensor parallel size: 1 or tp.
    :raises ValueError: ``etp`` is neither 1 nor tp, the order breaks a rule for
        ep > 1, or ``ep`` does not divide the ranks it borrows.
    """
    tp = dense.size(Dim.TP)
    if etp not in (1, tp):
        raise ValueError(
            f"etp: expected 1 (experts also borrow the tp ranks) or tp={tp} (experts keep "
            f"the dense tensor parallelism), got {etp}"
        )
    broken = order_rule_broken(dense.names, ep, etp)
    if broken is not None:
        raise ValueError(f"order: {broken}; got {','.join(dense.names)}")
    borrowed = borrowed_dims(etp)
    ranks = math.prod(dense.size(name) for name in borrowed)
    if ranks % ep:
        terms = " * ".join(f"{name}={dense.size(name)}" for name in borrowed)
        raise ValueError(
            f"ep: expected a factor of the ranks expert parallelism borrows, {terms} = "
            f"{ranks} (etp={etp}), got ep={ep}"
        )
    shared = tuple(name for name in dense.names if name in SHARED_DIMS)
    taken = (
        *shared,
        *(name for name in dense.names if name in borrowed),
        *(name for name in dense.names if name not in (*SHARED_DIMS, *borrowed)),
    )
    axes = tuple(dense.names.index(name) for name in taken)
    sizes = (*(dense.size(name) for name in shared), ranks // ep, ep, etp)
    if axes == tuple(range(len(axes))):
        return View((*shared, *EXPERT_DIMS), sizes)
    return View((*shared, *EXPERT_DIMS), sizes, dense.sizes, axes)
