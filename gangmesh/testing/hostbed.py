"""A bed of hosts on one machine: network namespaces with their own addresses and hostnames.

:class:`HostBed` makes ``H`` hosts. Each host is a network, hostname (UTS) and mount
namespace (:mod:`gangmesh.testing.netns`) with the hostname ``host<i>``, the address
``10.213.0.<i+1>`` on its interface ``eth0``, an ``/etc/hosts`` that names every host
of the bed, and an ``/etc/resolv.conf`` whose only name server is on loopback. The hosts
are joined on one private link: each ``eth0`` is one end of a virtual ethernet pair whose
other end, the host's *port*, sits on a bridge in a network namespace of its own (the
link's). Nothing is attached to the machine's own network: no
traffic leaves the bed's namespaces, and the addresses exist only inside them, so beds of
parallel test runs use the same addresses without meeting.

:meth:`HostBed.cut` takes a host's port down, as a pulled cable or a dead switch port
would: the host keeps its address and sees no error, but nothing it sends arrives and
nothing reaches it, until :meth:`HostBed.restore`. :meth:`HostBed.close` ends every
process left on a host and the holders; the kernel then removes the namespaces and every
link in them, so nothing of the bed outlives it (:meth:`HostBed.left_behind` says what
would). Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import select
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gangmesh.testing.netns import HOST_KINDS, Holder, NamespaceError, enter_command, processes_in

__all__ = ["HOSTS_VARIABLE", "SUBNET", "Host", "HostBed"]

log = logging.getLogger("gangmesh")

SUBNET = "10.213.0.0/24"
"""The private subnet of every bed's link; it exists only inside the bed's namespaces."""

HOSTS_VARIABLE = "GANGMESH_TEST_HOSTS"
"""Environment variable that tells a process on a host of a bed where it is (JSON)."""

_BRIDGE = "link0"
_SWEEP_BOUND = 30.0
"""Seconds :meth:`HostBed.close` goes on killing what it finds on the hosts."""
_counter = itertools.count()


@dataclass(frozen=True)
class Host:
    """One host of a bed, as a process on it (or the test that made it) sees it."""

    index: int
    """Its place in the bed, 0 to H-1."""
    name: str
    """Its hostname (``socket.gethostname()`` on it), also in every host's /etc/hosts."""
    address: str
    """Its address on the bed's link."""
    holder: int
    """Process id of the holder of its namespaces."""
    link: int
    """Process id of the holder of the link's namespace (where its port is)."""

    @property
    def port(self) -> str:
        """The name of its port on the link's bridge."""
        return f"port{self.index}"

    def namespaces(self) -> list[str]:
        """The files of its namespaces, as :func:`gangmesh.testing.netns.enter` takes them."""
        return [f"/proc/{self.holder}/ns/{kind}" for kind in HOST_KINDS]

    def to_env(self) -> str:
        """This host as the value of :data:`HOSTS_VARIABLE`."""
        return json.dumps(asdict(self))


class HostBed:
    """``hosts`` hosts joined on one private link, removed by :meth:`close`.

    :param hosts: how many hosts (1 to 250).
    :raises ValueError: ``hosts`` is out of range.
    :raises NamespaceError: the namespaces or the link could not be made (what was made
        is removed again).
    """

    def __init__(self, hosts: int) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 250:
            raise ValueError(f"hosts: expected an int in [1, 250], got {hosts!r}")
        self.name = f"gm{os.getpid()}-{next(_counter)}"
        """A name of this bed unique to this run (process id and counter), for logs."""
        self._folder = Path(tempfile.mkdtemp(prefix=f"gangmesh-{self.name}-"))
        self._holders: list[Holder] = []
        self._closed_at: float | None = None
        self.hosts: list[Host] = []
        try:
            self._make(hosts)
        except BaseException:
            self.close()
            raise
        self._remove_files()  # the hosts' mounts keep them: nothing on disk outlives a kill
        self.inodes = [inode for holder in self._holders for inode in holder.inodes.values()]
        log.debug("host bed %s: %s", self.name, [(h.name, h.address) for h in self.hosts])

    def _make(self, count: int) -> None:
        names = [f"host{i}" for i in range(count)]
        addresses = [f"10.213.0.{i + 1}" for i in range(count)]
        hosts_file = self._folder / "hosts"
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{a}\t{n}" for a, n in zip(addresses, names, strict=True)]
        # The same as IPv4-mapped IPv6 addresses, as a dual-stack server sees its clients.
        lines += [f"::ffff:{a}\t{n}" for a, n in zip(addresses, names, strict=True)]
        hosts_file.write_text("\n".join(lines) + "\n")
        # Names are looked up in the hosts file only: a name server, if asked, is on loopback.
        resolv = self._folder / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        binds = {str(hosts_file): "/etc/hosts", str(resolv): "/etc/resolv.conf"}
        for path in binds:
            Path(path).chmod(0o644)
        link = Holder(("net",))
        self._holders.append(link)
        link.run(["ip", "link", "add", _BRIDGE, "type", "bridge"])
        link.run(["ip", "link", "set", _BRIDGE, "up"])
        for index, (name, address) in enumerate(zip(names, addresses, strict=True)):
            holder = Holder(HOST_KINDS, hostname=name, binds=binds)
            self._holders.append(holder)
            host = Host(index, name, address, holder.pid, link.pid)
            # Made inside the host, its other end moved straight into the link's namespace.
            holder.run(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", host.port,
                        "netns", str(link.pid)])  # fmt: skip
            holder.run(["ip", "addr", "add", f"{address}/24", "dev", "eth0"])
            holder.run(["ip", "link", "set", "eth0", "up"])
            link.run(["ip", "link", "set", host.port, "master", _BRIDGE])
            link.run(["ip", "link", "set", host.port, "up"])
            self.hosts.append(host)

    def command(self, host: int, command: Sequence[str]) -> list[str]:
        """``command`` as a new process on host ``host`` runs it (``nsenter``), in this
        process's working directory.

        :param host: the host's index.
        :param command: the program and its arguments.
        """
        return enter_command(self.hosts[host].holder, HOST_KINDS, command)

    def cut(self, host: int) -> None:
        """Take host ``host``'s port down: it is cut off the link until :meth:`restore`.

        :param host: the host's index.
        :raises NamespaceError: ``ip`` failed.
        """
        _set_port(self.hosts[host], "down")

    def restore(self, host: int) -> None:
        """Bring host ``host``'s port up again.

        :param host: the host's index.
        :raises NamespaceError: ``ip`` failed.
        """
        _set_port(self.hosts[host], "up")

    def heal(self) -> None:
        """Bring every port up (after a test that cut a host).

        :raises NamespaceError: ``ip`` failed.
        """
        for host in self.hosts:
            _set_port(host, "up")

    def kill(self, host: int) -> list[int]:
        """SIGKILL every process on host ``host`` but its holder; the processes killed.

        :param host: the host's index.
        """
        holder = self.hosts[host].holder
        inodes = [os.stat(f"/proc/{holder}/ns/{kind}").st_ino for kind in HOST_KINDS]
        killed = [pid for pid in processes_in(inodes) if pid not in (holder, os.getpid())]
        for pid in killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return killed

    def close(self) -> None:
        """Kill every process on every host, end the holders, remove the files; idempotent.

        The hosts are swept until nothing but the holders is left in them (a launcher may
        start a process as the sweep kills it), for 30 s at most.
        """
        holders = {holder.pid for holder in self._holders} | {os.getpid()}
        deadline = time.monotonic() + _SWEEP_BOUND
        while self._holders and hasattr(self, "inodes") and time.monotonic() < deadline:
            leftover = [pid for pid in processes_in(self.inodes) if pid not in holders]
            if not leftover:
                break
            for pid in leftover:
                _kill_and_wait(pid, deadline)
        for holder in reversed(self._holders):
            holder.close()
        if self._holders:
            self._closed_at = time.clock_gettime(time.CLOCK_BOOTTIME)
        self._holders = []
        self._remove_files()

    def _remove_files(self) -> None:
        """Remove the hosts file and resolv.conf the hosts mount, and their folder."""
        with contextlib.suppress(OSError):
            for path in self._folder.iterdir():
                path.unlink()
            self._folder.rmdir()

    def left_behind(self) -> list[int]:
        """Processes still in (or holding) one of this bed's namespaces: [] once it is gone.

        After :meth:`close`, processes started later are left out: they are in newer
        namespaces that were given the numbers of this bed's.
        """
        return processes_in(self.inodes, self._closed_at)

    def __enter__(self) -> HostBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_and_wait(pid: int, deadline: float) -> None:
    """SIGKILL process ``pid`` and wait until it has ended (until ``deadline`` at most)."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        select.select([handle], [], [], max(0.0, deadline - time.monotonic()))
    except OSError:
        pass
    finally:
        os.close(handle)


def _set_port(host: Host, state: str) -> None:
    command = enter_command(host.link, ("net",), ["ip", "link", "set", host.port, state])
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NamespaceError(f"ip link set {host.port} {state}: {done.stderr.strip()}")
