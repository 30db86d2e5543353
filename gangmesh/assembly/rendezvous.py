"""Where the processes of a job meet: the launcher's store, a namespace per attempt and setup,
and meetings that say who did not arrive and who asked for something else.

torchrun keeps its agent's store across restarts, so the keys an earlier attempt wrote
(addresses of processes that are gone) stay in it; a new attempt that read them would connect to
dead ports. gangmesh therefore meets under ``gangmesh/setup<E>/``, where E is a number every
process of one setup agrees on and no earlier setup used: rank 0 draws it from a counter in the
store and announces it until every process has taken it; each other process takes the first
announcement made after it asked, which only a live rank 0 can have made (every process of an
attempt has ended before torchrun starts the next). torchrun's TORCHELASTIC_RESTART_COUNT cannot
serve: each node's agent counts its own restarts, and a node whose processes were healthy
restarts them with its count unchanged. The TCP connection to the store is made once per process
and kept, so setting up again needs no new port.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import socket
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.assembly.listeners import listener, own_address
from gangmesh.assembly.store_calls import BoundedStore, given_up, margin
from gangmesh.runtime import _c10d, faults
from gangmesh.runtime.environment import LaunchEnvironment
from gangmesh.runtime.gang import GangError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")

_connections: dict[tuple[str, int, int, bool], Store] = {}
_job: tuple[Store, LaunchEnvironment, weakref.ref[ProcessGroup] | None] | None = None
"""The store of gangmesh's last setup, its environment, and the default group it started
(held weakly: the group's threads must end when its owner lets it go)."""
_meetings: tuple[object, Counter[str]] = (None, Counter())
"""The store of the meetings counted, and how many of each topic this process held on it."""


def job_store(
    env: LaunchEnvironment, timeout: timedelta, arrive: Callable[[Store], object]
) -> Store:
    """The store this setup of the job meets in (see the module docstring). ``arrive(store)``
    leaves this process's requests in it as soon as the setup is known: rank 0 then still
    announces the setup until every process took it, and is not late to their meeting.

    :raises GangError: the store does not answer within ``timeout``.
    """
    global _job
    deadline = time.monotonic() + timeout.total_seconds()
    key = (env.master_addr, env.master_port, env.rank, env.agent_store)
    base = _connections.get(key)
    if base is None or given_up(base):  # a connection held by a call given up on is replaced
        base = _connections[key] = _connect(env, timeout)
    where = f"the job's store at {env.master_addr}:{env.master_port}"
    try:
        first = env.rank == 0
        setup = base.add("gangmesh/setups", 1) if first else _take_setup(base, deadline, timeout)
    except (RuntimeError, ConnectionError) as ex:
        late = faults.late(0)
        error = GangError(
            f"rank {env.rank}: no setup number from rank 0 within the timeout through {where}"
            f" ({faults.summary(ex, timeout.total_seconds())}); rank 0"
            f"{f'{late} has not started' if late else ' is gone or did not start'} setup_root_gang"
        )
        error.culprits = (0,)
        failed_at = time.time()
        faults.write_for_unseen(0, "global rank 0 announced no setup number", failed_at)
        faults.record_named(error, failed_at)
        raise error from ex
    log.debug("Rank %d meets as setup %d of the job", env.rank, setup)
    store: Store = dist.PrefixStore(f"gangmesh/setup{setup}/", base)  # type: ignore[attr-defined]
    _job = (store, env, None)
    arrive(store)
    if first:
        try:
            _announce_setup(base, env, setup, deadline)
        except (RuntimeError, ConnectionError) as ex:
            raise GangError(f"rank 0: {where} does not answer ({ex})") from ex
    return store


def _announce_setup(base: Store, env: LaunchEnvironment, setup: int, deadline: float) -> None:
    """Rank 0: announce the new setup number until every process took it (or the deadline
    passed: the meeting names who did not come)."""
    taken = f"gangmesh/setup{setup}/taken"
    pause = 0.002
    while base.add(taken, 0) < env.world_size - 1 and time.monotonic() < deadline:
        announcement = base.add("gangmesh/announcements", 1)
        base.set(f"gangmesh/announcement{announcement}", json.dumps([setup, time.time()]))
        # a plain pause: after store waits time out, torch's client reads answers out of step
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.2)


def _take_setup(base: Store, deadline: float, timeout: timedelta) -> int:
    """Another rank: the setup number of the first announcement after this call asked."""
    calls = BoundedStore(base, margin(timeout))  # a stopped rank 0 serving it holds no rank
    after: int = calls.add("gangmesh/announcements", 0)
    announcement = f"gangmesh/announcement{after + 1}"
    calls.wait([announcement], timedelta(seconds=max(0.001, deadline - time.monotonic())))
    setup = int(json.loads(calls.get(announcement))[0])
    taken = f"gangmesh/setup{setup}/taken"
    calls.add(taken, 1)
    return setup


def unannounced(env: LaunchEnvironment, timeout: timedelta, error: GangError) -> GangError:
    """``error``, of the setup meeting; or, where some ranks never took the setup number and
    rank 0 stopped announcing it long before the timeout (it was stopped, or ended, while
    they waited), an error that names rank 0."""
    base = _connections.get((env.master_addr, env.master_port, env.rank, env.agent_store))
    if env.rank == 0 or base is None:
        return error
    calls = BoundedStore(base, margin(timeout))  # the meeting may have given up on it
    try:
        last = calls.add("gangmesh/announcements", 0)
        setup, said = json.loads(calls.get(f"gangmesh/announcement{last}"))
        waiting = env.world_size - 1 - calls.add(f"gangmesh/setup{setup}/taken", 0)
    except (RuntimeError, ValueError, ConnectionError):
        return error
    quiet = time.time() - float(said)
    if waiting <= 0 or quiet < timeout.total_seconds() / 2:
        return error
    keeper = faults.fates([0]).get(0)
    named = GangError(
        f"{error}: {waiting} of them got no setup number from rank 0, which stopped announcing "
        f"it {quiet:.0f} s ago: " + (str(keeper) if keeper else "rank 0 is stopped or gone")
    )
    named.culprits = (0,)
    faults.record_named(named, time.time())
    return named


def started_with(store: Store) -> None:
    """Record that the current default group was started with ``store``."""
    global _job
    if _job is not None and _job[0] is store:
        world = dist.group.WORLD
        _job = (store, _job[1], None if world is None else weakref.ref(world))


def _current_job() -> tuple[Store, LaunchEnvironment] | None:
    """gangmesh's job store and environment, if the current default group was started with it."""
    if _job is None or _job[2] is None:
        return None
    world = _job[2]()
    if world is None or world is not dist.group.WORLD:
        return None
    return _job[0], _job[1]


def _connect(env: LaunchEnvironment, timeout: timedelta) -> Store:
    """A TCP store client, or the server on rank 0 when torchrun's agent hosts none."""
    serves = env.rank == 0 and not env.agent_store
    deadline = time.monotonic() + timeout.total_seconds()
    where = f"{env.master_addr}:{env.master_port}"
    if not serves:
        _wait_for_server(env, deadline)
    listening = _listener(env) if serves else None
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            env.master_addr,
            env.master_port,
            env.world_size,
            serves,
            timeout=timedelta(seconds=max(1.0, deadline - time.monotonic())),
            wait_for_workers=False,
            multi_tenant=True,
            master_listen_fd=None if listening is None else listening.detach(),
        )
    except (RuntimeError, ValueError, OSError) as ex:
        if serves:
            why = faults.summary(ex, timeout.total_seconds())
            raise GangError(f"rank 0 could not serve the job's store at {where}: {why}") from ex
        raise _unreachable(env, "did not answer within the timeout") from ex


def _listener(env: LaunchEnvironment) -> socket.socket | None:
    """The socket of the store's server: listening at MASTER_ADDR and MASTER_PORT where
    MASTER_ADDR is an address of this host (:func:`~gangmesh.assembly.listeners.own_address`);
    where it is another IPv4 address (this host reached through a forwarding), on every IPv4
    interface; None elsewhere (torch's own socket then listens on every interface). A socket
    of MASTER_ADDR's family, not torch's dual-stack one: torch's server looks up the name of
    each client's address as it connects; on a dual-stack socket a local client is
    ``::ffff:127.0.0.1``, which no hosts file names, and a query the name server drops holds
    the server (every rank's setup with it) for the resolver's retry time, 5 s with glibc."""
    own = own_address(env.master_addr)
    if own is not None:
        return listener(own, env.master_port)
    try:
        forwarded = ipaddress.ip_address(env.master_addr).version == 4
    except ValueError:  # a host name
        return None
    return listener("0.0.0.0", env.master_port) if forwarded else None


def _wait_for_server(env: LaunchEnvironment, deadline: float) -> None:
    """Return once the store's server accepts connections; GangError at the deadline (short
    attempts: a host that drops packets can hold a plain connect for minutes)."""
    who = "torchrun's agent" if env.agent_store else "rank 0"
    try:
        socket.getaddrinfo(env.master_addr, env.master_port)
    except OSError as ex:
        raise GangError(
            f"rank {env.rank}: the address of {who}, {env.master_addr!r} (MASTER_ADDR or the "
            f"first SLURM host), cannot be resolved: {ex}"
        ) from ex
    pause = 0.05
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _unreachable(env, "did not answer within the timeout")
        try:
            with socket.create_connection((env.master_addr, env.master_port), min(1.0, left)):
                return
        except OSError:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))  # retry back-off
            pause = min(pause * 2, 1.0)


def _unreachable(env: LaunchEnvironment, what: str) -> GangError:
    """The error of rank ``env.rank``, to which the job's store ``what``: where rank 0
    serves it, rank 0 is named (gone, or not started)."""
    who = "torchrun's agent" if env.agent_store else "rank 0"
    error = GangError(
        f"rank {env.rank}: the job's store at {env.master_addr}:{env.master_port}, served by "
        f"{who}, {what}; check MASTER_ADDR/MASTER_PORT, and that {who} is running"
    )
    if not env.agent_store:
        error.culprits = (0,)
        faults.record_named(error, time.time())
    return error


def meet(
    store: Store,
    topic: str,
    rank: int,
    world_size: int,
    request: dict[str, Any],
    timeout: timedelta,
    *,
    wait: bool = True,
    arrived: bool = False,
    left: timedelta | None = None,
    members: Sequence[int] | None = None,
) -> dict[int, dict[str, Any]] | None:
    """Every process of the job (of a gang: ``rank`` and ``world_size`` are its) calls it
    with what it asks for: None if they all asked the same, else rank -> request. With
    ``wait=False`` this process only leaves its request (a process about to fail still shows
    the others what it asked for), and with ``arrived=True`` it only waits, having left the
    same request before; ``left`` is what remains of ``timeout`` (default: all of it);
    ``members`` are the global ranks of a gang's processes, by gang rank, which messages
    name (default: the job's, ``rank`` itself).

    :raises GangError: some ranks did not arrive within ``timeout`` (they are named, with
        their hosts where known; by rank 0 for the ranks still waiting), or the store is gone.
    """
    prefix = f"meet/{topic}/"
    text = json.dumps(request)
    canonical = json.dumps(request, sort_keys=True).encode()
    digest = hashlib.sha1(canonical, usedforsecurity=False).hexdigest()[:16]
    named = list(range(world_size)) if members is None else list(members)
    calls = BoundedStore(store, margin(timeout))  # a stopped rank 0 serving it holds no rank
    try:
        if not arrived:
            calls.set(f"{prefix}{rank}", text)
            calls.set(f"host/{named[rank]}", socket.gethostname())
            calls.add(f"{prefix}same/{digest}", 1)
            if calls.add(f"{prefix}arrived", 1) == world_size:  # unless rank 0 gave up first:
                calls.compare_set(f"{prefix}all", "", "1")
        if not wait:
            return None
        try:
            calls.wait([f"{prefix}all"], timeout if left is None else left)
        except RuntimeError as ex:
            missing = [m for r, m in enumerate(named) if not calls.check([f"{prefix}{r}"])]
            if not missing:  # each left its request; one stopped or ended before it counted
                missing = sorted(faults.fates(named))
            error = _absentees(calls, _label(topic), missing, timeout)
            if rank != 0 or _tell_the_others(calls, prefix, error):
                faults.record_named(error, time.time())
                raise error from ex
        if (ended := calls.get(f"{prefix}all")) != b"1":
            raise _told(ended)
        if calls.add(f"{prefix}same/{digest}", 0) == world_size:
            return None
        texts = calls.multi_get([f"{prefix}{r}" for r in range(world_size)])
    except (RuntimeError, ConnectionError) as ex:
        if isinstance(ex, GangError):
            raise
        raise _store_gone(store, _label(topic)) from ex
    return {r: json.loads(t.decode() if isinstance(t, bytes) else t) for r, t in enumerate(texts)}


def _tell_the_others(store: Store | BoundedStore, prefix: str, error: GangError) -> bool:
    """Rank 0 of a meeting that did not end: the others get its finding at once, not at their
    own timeouts (by then a store that rank 0 serves is gone, and rank 0 taken for the
    culprit). False where the last rank came just now: the meeting ended after all."""
    finding = json.dumps({"error": str(error), "culprits": list(error.culprits)})
    try:
        return bytes(store.compare_set(f"{prefix}all", "", finding)) != b"1"
    except (RuntimeError, ConnectionError):  # the others find out for themselves
        return True


def _told(finding: bytes) -> GangError:
    """Rank 0's finding (:func:`_tell_the_others`); culprits here get their error files."""
    said = json.loads(finding)
    error = GangError(said["error"])
    error.culprits = tuple(said["culprits"])
    faults.fates(list(error.culprits))
    faults.record_named(error, time.time())
    return error


def _label(topic: str) -> str:
    """The name of a meeting in messages: its topic without the gang's key and the count."""
    return topic.partition("#")[0].partition("@")[0]


def _absentees(
    store: Store | BoundedStore, topic: str, missing: list[int], timeout: timedelta
) -> GangError:
    """The error of a meeting that ``missing`` (global ranks) did not come to, saying how
    they broke where the job's failure reports tell, else their hosts where known. Its
    culprits are those that broke, where some did (the others may be waiting for them)."""
    known = faults.fates(missing)
    unknown = [r for r in missing if r not in known]
    named = []
    for r in unknown[:16]:
        host = store.get(f"host/{r}").decode() if store.check([f"host/{r}"]) else None
        named.append(f"rank {r}" + (f" on {host}" if host else "") + faults.late(r))
    more = f" and {len(unknown) - 16} more" if len(unknown) > 16 else ""
    said = [str(known[r]) for r in sorted(known)]
    seconds = timeout.total_seconds()
    if named:
        gone = "; rank 0 is among them" if 0 in unknown else ""
        said.append(f"{', '.join(named)}{more} did not arrive within {seconds:g} s{gone}")
    if not said:
        said.append(f"every rank came, yet the meeting did not end within {seconds:g} s")
    error = GangError(f"{topic}: {'; '.join(said)}")
    error.culprits = tuple(sorted(known)) or tuple(missing)
    return error


def _store_gone(store: Store, what: str) -> GangError:
    """The error of ``what``, a meeting in ``store`` that no longer answers: where rank 0
    serves the store (no launcher's agent does), rank 0 is gone, and is named (with how it
    ended, where this host saw it)."""
    env = _job[1] if _job is not None and _job[0] is store else None
    if env is None or env.agent_store:
        return GangError(f"{what}: the job's store does not answer; its server is gone")
    where = f"{env.master_addr}:{env.master_port}"
    keeper = faults.store_keeper()
    fate = f": {keeper}" if keeper is not None else " (it is gone)"
    error = GangError(f"{what}: the job's store at {where} does not answer; rank 0 serves it{fate}")
    error.culprits = (0,)
    faults.record_named(error, time.time())
    return error


def default_group_store() -> Store:
    """The store of the current default group: the job store of gangmesh's setup, or torch's."""
    job = _current_job()
    if job is not None:
        return job[0]
    store: Store = _c10d.default_store()
    return store


def next_topic(name: str) -> str:
    """``name`` with the number of earlier meetings of that name on this default group's
    store: the processes that meet under a name hold its meetings in the same order."""
    global _meetings
    store = default_group_store()
    owner, counts = _meetings
    if owner is not store:
        counts = Counter()
        _meetings = (store, counts)
    count = counts[name]
    counts[name] += 1
    return f"{name}#{count}"
