"""What gangmesh hands torch when it splits a group, and how it reads a default group's
backend and device."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

from gangmesh.runtime import _c10d, backends, default_group
from gangmesh.runtime.communicators import CommunicatorKey, Parent, Registry


@pytest.fixture
def fake_world():
    """Rank 0 of a fake default group of four processes, torn down after the test."""
    _c10d.ensure_fake_backend()
    dist.init_process_group("fake", store=dist.HashStore(), rank=0, world_size=4)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_nccl_available(), reason="this torch has no NCCL (a CPU build)")
def test_a_split_that_makes_no_group_here_hands_torch_new_nccl_options_with_the_parents_timeout(
    fake_world, monkeypatch
):
    # torch 2.9.1's split_group, given no options, takes the parent's own options object
    # and writes the split's timeout into it (NCCL's default where none is given): the
    # parent's collectives then run with that timeout.
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(_c10d, "splits_new_groups", lambda backend: True)
    monkeypatch.setattr(dist, "split_group", lambda parent, groups, **kw: asked.append(kw))
    registry = Registry(fake_world)
    held = CommunicatorKey((0, 1), "nccl", timedelta(seconds=20), False)
    registry.lend(fake_world, held)  # this process holds its group of the split already
    parent = Parent(fake_world, timedelta(seconds=1800), True)
    lease = registry.split(parent, [[0, 1], [2, 3]], held)
    assert lease.key == held
    (call,) = asked
    options = call["pg_options"]
    assert isinstance(options, dist.ProcessGroupNCCL.Options)
    assert call["timeout"] == options._timeout == timedelta(seconds=1800)
    assert options.is_high_priority_stream is True


@pytest.mark.parametrize(
    ("backend", "legs", "leading"),
    [
        ("nccl", {"cuda": "nccl"}, "nccl"),
        ("gloo", {"cpu": "gloo"}, "gloo"),
        ("fake", {"cpu": "fake"}, "fake"),
        ("cpu:gloo,cuda:nccl", {"cpu": "gloo", "cuda": "nccl"}, "nccl"),
        ("cuda:nccl, cpu:gloo", {"cpu": "gloo", "cuda": "nccl"}, "nccl"),
    ],
)
def test_a_backend_string_is_read_per_device_type(backend, legs, leading):
    assert backends.device_backends(backend) == legs
    assert backends.leading_backend(backend) == leading


def test_a_gloo_default_group_runs_on_the_cpu():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert default_group.device_of(dist.group.WORLD) == torch.device("cpu")
    finally:
        dist.destroy_process_group()


def test_a_mixed_default_group_runs_on_the_cuda_device_torch_bound_it_to():
    # "cuda:fake" stands in for "cuda:nccl" on a machine without CUDA: the gang's device is
    # the one torch bound the group to (torch 2.15's "nccl" binds LOCAL_RANK's by itself)
    _c10d.ensure_fake_backend()
    dist.init_process_group("cpu:gloo,cuda:fake", store=dist.HashStore(), rank=0, world_size=1)
    try:
        world = dist.group.WORLD
        world.bound_device_id = torch.device("cuda", 3)
        assert default_group.device_of(world) == torch.device("cuda", 3)
    finally:
        dist.destroy_process_group()
