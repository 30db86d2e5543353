"""How a job's rank 0 meets the other job at the join: the other job that came and left before
it met this one is named, not waited for."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.assembly.join_meeting import first_epoch
from gangmesh.assembly.join_sides import Epoch, Member, Side, arrive
from gangmesh.assembly.store_calls import BoundedStore, release
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import GangError

ADDRESS = "127.0.0.1:29600"


@pytest.fixture
def kept() -> Iterator[dist.HashStore]:
    """A store of this process."""
    kept = dist.HashStore()
    yield kept
    release(kept)


@pytest.fixture
def store(kept: dist.HashStore) -> BoundedStore:
    """Its calls, bounded as the join's are (one at a time)."""
    return BoundedStore(kept, 2.0)


def side(job: str) -> Side:
    return Side(job, 0, MeshTopology(1), {}, (Member.this_process(0),))


def test_a_job_that_closes_its_join_before_it_met_this_one_is_named_at_once(kept, store):
    generator = arrive(store, side("generator"))  # it arrives, and says it is in no epoch yet
    trainer = arrive(store, side("trainer"))
    with ThreadPoolExecutor(1) as pool:
        meeting = pool.submit(
            first_epoch, store, trainer, "generator", timedelta(seconds=40), ADDRESS
        )
        # the trainer saw the generator: it says it is in their epoch
        kept.wait([f"ready/{Epoch(1, 1).key}/trainer"], timedelta(seconds=30))
        kept.delete_key("latest/generator")  # the generator closes its join, as close() does
        with pytest.raises(GangError) as caught:
            meeting.result(timeout=20)  # not the 40 s it would wait for a job to come
    leader = generator.members[0]
    assert str(caught.value) == (
        f"job generator came to the join at {ADDRESS} (its rank 0 on host {leader.host}, pid "
        f"{leader.pid}) and closed it before it met this job"
    )
    assert caught.value.job == "generator" and caught.value.culprits == (0,)


def test_a_job_that_is_in_the_epoch_is_met_with_its_arrival(store):
    generator = arrive(store, side("generator"))
    trainer = arrive(store, side("trainer"))
    store.set(f"ready/{Epoch(1, 1).key}/generator", "1")
    epoch, found = first_epoch(store, trainer, "generator", timedelta(seconds=30), ADDRESS)
    assert epoch == Epoch(1, 1) and found == generator
