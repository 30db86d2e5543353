"""Slice a global batch per data-parallel rank, and prove it for every layout.

In a training script: ``local_samples(gangs.plan, gangs.root.rank, 1024)``. Run the
property with ``pytest docs/examples/batch_slicing.py``; ``broken_...`` is the same
property for a broken variant, which hypothesis refutes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

import gangmesh as gm
from gangmesh.testing.strategies import layouts_and_ranks

Slicer = Callable[[gm.MeshTopology, int, int], range]


def local_samples(plan: gm.MeshTopology, rank: int, global_batch_size: int) -> range:
    """The samples of the global batch that process ``rank`` reads.

    Each data-parallel rank reads one contiguous share; the first
    ``global_batch_size % dp`` shares hold one sample more. Processes that differ
    only in pp, cp or tp read the same share.
    """
    dp_rank, dp_size = plan.rank_in(rank, "dp"), plan.size_of("dp")
    share, extra = divmod(global_batch_size, dp_size)
    start = dp_rank * share + min(dp_rank, extra)
    return range(start, start + share + (dp_rank < extra))


def local_samples_broken(plan: gm.MeshTopology, rank: int, global_batch_size: int) -> range:
    """The same with the dp_shard coordinate alone: right until a layout replicates."""
    dp_rank, dp_size = plan.coordinate(rank)["dp_shard"], plan.dims["dp_shard"]
    share, extra = divmod(global_batch_size, dp_size)
    start = dp_rank * share + min(dp_rank, extra)
    return range(start, start + share + (dp_rank < extra))


def check_each_sample_read_once(
    slicer: Slicer, plan: gm.MeshTopology, rank: int, global_batch_size: int
) -> None:
    """Across the data-parallel group of ``rank``, every sample is read exactly once."""
    readers: Counter[int] = Counter()
    for peer in plan.group_of(rank, "dp"):
        readers.update(slicer(plan, peer, global_batch_size))
    twice = sorted(sample for sample, count in readers.items() if count > 1)
    never = sorted(set(range(global_batch_size)) - set(readers))
    assert not twice and not never, f"read twice: {twice[:5]}, never read: {never[:5]}"


@settings(deadline=None)  # checking a data-parallel group of 65,536 ranks takes a while
@given(layouts_and_ranks(), st.integers(0, 4096))
def test_every_sample_lands_on_exactly_one_dp_rank(case, global_batch_size):
    plan, rank = case
    check_each_sample_read_once(local_samples, plan, rank, global_batch_size)


@settings(deadline=None)
@given(layouts_and_ranks(), st.integers(0, 4096))
def broken_every_sample_lands_on_exactly_one_dp_rank(case, global_batch_size):
    plan, rank = case
    check_each_sample_read_once(local_samples_broken, plan, rank, global_batch_size)
