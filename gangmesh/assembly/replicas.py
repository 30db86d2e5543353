"""Replica groups that fail alone: this launch's place among the replica groups of a job whose
replicate dimension is managed by torchft (its lighthouse and Manager)."""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Any, final

import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer
from typing_extensions import override

from gangmesh.assembly.lighthouse_contact import Answer, ask_lighthouse, lighthouse_address
from gangmesh.assembly.listeners import listener
from gangmesh.assembly.replica_training import wire
from gangmesh.plan._checks import check_count, check_positive, check_timeout
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import faults
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.managed_gang import ManagedGang
from gangmesh.runtime.process_group_gang import ProcessGroupGang
from gangmesh.runtime.replica_group import Identity, checked_group, torchft, torchft_reason

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")

GROUP_VARIABLE = "GANGMESH_REPLICA_GROUP"
"""Environment variable with this launch's replica group number, where ``group`` is not given."""
_ASK_BOUND = 5.0
"""Seconds rank 0 gives the lighthouse to answer (connections refused are tried again: it may
be starting)."""


@final
class Replicas:
    """This replica group among the others: made by :func:`join_replicas`, given to
    :func:`~gangmesh.create_gangs` (``replicas=``), which makes its ``gang`` the job's rdp.

    A replica group is one launch (one torchrun job, its own world). The groups reduce
    their gradients together at each step through torchft; a group that fails is left out
    of the next step by the others, which go on without a restart, and when it comes back
    it copies the weights of a live group and takes part again.

    :param group: this group's number.
    :param lighthouse: the lighthouse's address.
    :param manager: this process's torchft Manager.
    :param gang: the gang over the step's replica groups.
    :param identity: what this group tells the others it meets.
    :param store: the store of torchft's Manager server (rank 0 keeps it), or None.
    """

    group: int
    """This replica group's number among the groups."""
    lighthouse: str
    """The lighthouse's address."""
    manager: Any
    """This process's torchft Manager, for what gangmesh does not wrap."""
    gang: ManagedGang
    """The gang over this step's replica groups, also ``gangs.rdp``."""

    def __init__(self, *, group: int, lighthouse: str, manager: Any, gang: ManagedGang,
                 identity: Identity, store: Store | None) -> None:  # fmt: skip
        self.group, self.lighthouse, self.manager, self.gang = group, lighthouse, manager, gang
        self._identity, self._store = identity, store
        self._wrapped = False
        faults.on_leaving(manager, _leave)  # an ending process stops holding others' quorums

    @property
    def step(self) -> int:
        """The steps committed so far (a group that healed counts those it copied)."""
        return int(self.manager.current_step())

    def wrap(self, model: nn.Module, optimizer: Optimizer) -> Optimizer:
        """Wire FSDP2 ``model`` and its ``optimizer`` for replica groups; returns the optimizer
        to train with.

        The gradients each FSDP2 module reduces inside the group are averaged over this
        step's replica groups (FSDP2's all-reduce hook); the returned optimizer's
        ``zero_grad`` starts the step (the quorum, and healing where this group is behind)
        and its ``step`` updates the weights only where every replica group of the step
        succeeded (else the step is tried again); the model's and the optimizer's state
        (DTensor state dicts) are what a healing group copies.

        :param model: a model sharded with ``fully_shard`` inside the group.
        :param optimizer: the optimizer of its parameters.
        :raises ValueError: ``model`` has no FSDP2 module, or it was wired already.
        """
        if self._wrapped:
            raise ValueError("wrap: this replica group's model is wired already")
        wrapped = wire(self.gang, self.manager, self, model, optimizer)
        self._wrapped = True
        return wrapped

    def start_step(self) -> None:
        """Join this step's quorum (healing first where this group is behind).

        :raises ValueError: the groups met are not distinct or not laid out alike.
        :raises GangError: no quorum within the timeout.
        """
        try:
            self.manager.start_quorum()
        except Exception as ex:  # torchft's quorum fails with RuntimeError and others
            raise GangError(
                f"replica group {self.group}: no quorum from the lighthouse at "
                f"{self.lighthouse}: {torchft_reason(ex)}"
            ) from ex
        if self._identity.refusal is not None:
            raise self._identity.refusal

    def commit(self) -> bool:
        """Whether this step's gradients may update the weights: True where every replica
        group of the step succeeded (and enough took part); the same on every process of
        this group.

        :raises GangError: the group's processes could not agree within the timeout.
        """
        try:
            return bool(self.manager.should_commit())
        except Exception as ex:
            raise GangError(
                f"replica group {self.group} (lighthouse {self.lighthouse}): no agreement to "
                f"commit: {torchft_reason(ex)}"
            ) from ex

    def adopt(self, plan: MeshTopology) -> None:
        """Take ``plan`` as this group's in-group layout, which every group must share."""
        split = " x ".join(f"{name} {size}" for name, size in plan.sizes().items() if size > 1)
        self._identity.layout = f"{plan.world_size} processes ({split or 'no split'})"

    def close(self) -> None:
        """Leave the replica groups: stop this process's part of torchft's Manager."""
        faults.forget_leaving(self.manager)
        _leave(self.manager)
        self._store = None

    @override
    def __repr__(self) -> str:
        return f"Replicas(group {self.group}, lighthouse {self.lighthouse})"


def join_replicas(
    root_gang: Gang,
    *,
    lighthouse: str | None = None,
    group: int | None = None,
    min_replicas: int = 1,
    timeout: timedelta | None = None,
    quorum_timeout: timedelta | None = None,
) -> Replicas:
    """Join this launch, one replica group, to the others through torchft's lighthouse.

    Every process of the launch calls it after :func:`~gangmesh.setup_root_gang`. Rank 0
    asks the lighthouse for its status (within 5 s, or ``quorum_timeout`` where shorter),
    then starts torchft's Manager server with a store of its own (so a restarted launch never
    reads the keys of an earlier one), listening on the interface it asked the lighthouse
    from; the others connect to it.

    :param root_gang: this launch's root gang.
    :param lighthouse: the lighthouse's address (``host:port`` or ``http://host:port``);
        default: ``TORCHFT_LIGHTHOUSE``.
    :param group: this replica group's number, distinct among the groups; default:
        ``GANGMESH_REPLICA_GROUP``.
    :param min_replicas: the fewest replica groups a step commits with.
    :param timeout: bound of the collectives across groups; default: the root gang's. Set
        it near the lighthouse's heartbeat timeout: a group cut off mid-step holds the
        others that long.
    :param quorum_timeout: bound of the connection to the lighthouse (which may be
        starting), of a step's quorum (which waits for groups that are starting, up to the
        lighthouse's join timeout), of the group's agreement to commit (its processes leave
        a failed collective up to ``timeout`` apart) and of a heal's transfer; default: the
        root gang's timeout.
    :raises ImportError: torchft is not installed (``pip install 'gangmesh[ft]'``).
    :raises ValueError: no lighthouse or group given, or bad values (a timeout that is no
        timedelta is a TypeError too).
    :raises GangError: the lighthouse cannot be reached or does not answer as one within 5 s,
        or torchft's Manager cannot start (each naming the lighthouse's address and the group).
    """
    ft = torchft()
    if not isinstance(root_gang, ProcessGroupGang):
        raise ValueError(f"root_gang: expected the gang of setup_root_gang(), got {root_gang!r}")
    address = lighthouse_address(lighthouse)
    number = _group_number(group)
    min_replicas = check_positive("min_replicas", min_replicas)
    timeout = check_timeout(timeout) or root_gang.timeout
    quorum_timeout = check_timeout(quorum_timeout, "quorum_timeout") or root_gang.timeout
    if root_gang.device.type != "cuda":  # NCCL's flight recorder: nothing to reset without it
        logging.getLogger("torchft.manager").addFilter(_no_flight_recorder)
    identity = Identity(number)
    process_group = checked_group(root_gang.device, timeout, identity)
    common = dict(pg=process_group, load_state_dict=None, state_dict=None,
                  min_replica_size=min_replicas, use_async_quorum=False, timeout=quorum_timeout,
                  quorum_timeout=quorum_timeout, connect_timeout=quorum_timeout,
                  rank=root_gang.rank, world_size=root_gang.size, lighthouse_addr=address,
                  replica_id=f"replica_group_{number}")  # fmt: skip
    store, manager = None, None
    answer: list[Any] = ["", "", None, None]  # the lighthouse's trouble, torchft's, host, port
    if root_gang.rank == 0:
        asked = ask_lighthouse(address, min(_ASK_BOUND, quorum_timeout.total_seconds()))
        answer[0] = _trouble(asked, address, number)
        if not asked.trouble:
            store, answer[2], answer[3] = _manager_store(asked.via, timeout)
            try:
                manager = ft.Manager(store_addr=answer[2], store_port=answer[3], **common)
            except RuntimeError as ex:  # torchft's Manager server cannot reach the lighthouse
                answer[1] = torchft_reason(ex)
    root_gang.broadcast_objects(answer)
    trouble, failure, host, port = answer
    if trouble:
        raise GangError(trouble)
    if failure:
        seconds = f"{quorum_timeout.total_seconds():g}"
        raise GangError(
            f"join_replicas: replica group {number}: the lighthouse at {address} did not answer "
            f"torchft within {seconds} s; start one with torchft_lighthouse or "
            f"gangmesh.start_lighthouse (torchft: {failure})"
        )
    if manager is None:
        try:
            manager = ft.Manager(store_addr=host, store_port=port, **common)
        except (RuntimeError, OSError) as ex:  # rank 0's store or Manager server is gone
            raise GangError(
                f"join_replicas: replica group {number} (lighthouse {address}): rank "
                f"{root_gang.rank} could not reach torchft's Manager of rank 0 at {host}:{port}: "
                f"{torchft_reason(ex)}"
            ) from ex
    # Something to copy where a group heals before its model is wrapped (torchft has each
    # group but the first copy the others at step 0).
    manager.register_state_dict_fn("gangmesh", lambda state: None, lambda: {"group": number})
    log.info("Replica group %d joined the lighthouse at %s", number, address)
    gang = ManagedGang(manager, process_group, root_gang.device)
    return Replicas(group=number, lighthouse=address, manager=manager, gang=gang,
                    identity=identity, store=store)  # fmt: skip


def _leave(manager: Any) -> None:
    """Stop torchft's ``manager`` (on rank 0, its server and heartbeat to the lighthouse)."""
    manager.shutdown(wait=False)
    log.info("Replica group left: torchft's Manager of this process stopped")


def _no_flight_recorder(record: logging.LogRecord) -> bool:
    """Leave out torchft's warning that it cannot reset NCCL's flight recorder."""
    return "flight recorder" not in record.getMessage()


def _trouble(asked: Answer, address: str, number: int) -> str:
    """The error of replica group ``number`` whose lighthouse at ``address`` answered as
    ``asked`` says ("" where it answered as a lighthouse)."""
    if not asked.trouble:
        return ""
    start = "start one with torchft_lighthouse or gangmesh.start_lighthouse"
    if not asked.via:
        return (
            f"join_replicas: replica group {number}: the lighthouse at {address} cannot be "
            f"reached: {asked.trouble}; {start}"
        )
    return (
        f"join_replicas: replica group {number}: the lighthouse at {address} does not answer "
        f"as one: {asked.trouble}; {start} there"
    )


def _manager_store(via: str, timeout: timedelta) -> tuple[Store, str, int]:
    """The store of torchft's Manager, which rank 0 serves, and the host and port it is
    reached at.

    It listens at ``via``, the address this host asked the lighthouse from, where the other
    replica groups (whose process groups across the groups meet in it) reach this host too;
    for an IPv6 address, which torchft cannot write beside a port, on every interface, at
    this host's name."""
    listening = None if ":" in via else listener(via, 0)
    if listening is None:
        every = dist.TCPStore(  # type: ignore[attr-defined]
            "0.0.0.0", 0, is_master=True, wait_for_workers=False, timeout=timeout
        )
        return every, socket.gethostname(), every.port
    port = listening.getsockname()[1]
    store = dist.TCPStore(  # type: ignore[attr-defined]
        via, port, is_master=True, wait_for_workers=False, timeout=timeout,
        master_listen_fd=listening.detach(),
    )  # fmt: skip
    return store, via, port


def _group_number(given: int | None) -> int:
    """``given`` or the number in GANGMESH_REPLICA_GROUP."""
    if given is not None:
        return check_count("group", given)
    value = os.environ.get(GROUP_VARIABLE, "")
    if not value.strip().isdigit():
        got = repr(value) if value else "neither"
        raise ValueError(
            f"group: expected this replica group's number (0, 1, ...) or {GROUP_VARIABLE} set, "
            f"got {got}"
        )
    return int(value)
