"""The host test bed: hosts with their own names and addresses on a private link, and
nothing of it left afterwards, even when the process that made it is killed."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gangmesh.testing.hostbed import HostBed
from gangmesh.testing.netns import namespaces_unavailable, processes_in
from tests.dist.launch import REPO

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "-"),
]


def ended(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` has ended, waiting up to ``timeout`` seconds for it."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([handle], [], [], timeout)
        return bool(ready)
    finally:
        os.close(handle)


def boot_clock() -> float:
    """Now, on the clock of ``processes_in``'s ``started_before``: a check made after a bed
    is gone must leave out processes of newer namespaces that got its numbers."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def test_a_process_started_after_the_reading_is_left_out():
    with HostBed(1) as bed:
        before = boot_clock()
        stray = subprocess.Popen(
            bed.command(0, ["sh", "-c", "echo in && exec sleep 600"]),
            start_new_session=True,
            stdout=subprocess.PIPE,
        )
        try:
            assert stray.stdout is not None and stray.stdout.readline() == b"in\n"  # inside
            assert stray.pid in processes_in(bed.inodes)
            assert stray.pid not in processes_in(bed.inodes, before)
            assert bed.hosts[0].holder in processes_in(bed.inodes, before)
        finally:
            stray.kill()
            stray.wait(timeout=30)


def test_each_host_has_its_name_address_and_hosts_file_and_nothing_else_outside():
    with HostBed(2) as bed:
        for host in bed.hosts:
            shown = subprocess.run(
                bed.command(host.index, ["sh", "-c", "hostname; ip -4 -o addr; cat /etc/hosts"]),
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout  # fmt: skip
            lines = shown.splitlines()
            assert lines[0] == f"host{host.index}"
            addresses = [line.split()[3] for line in lines if " inet " in line]
            assert sorted(addresses) == sorted(["127.0.0.1/8", f"{host.address}/24"])
            assert "10.213.0.1\thost0" in lines and "10.213.0.2\thost1" in lines
        assert [h.address for h in bed.hosts] == ["10.213.0.1", "10.213.0.2"]
        # The machine's own namespace has none of the bed's links or addresses.
        outside = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        assert "10.213.0." not in outside and "port0" not in outside
        inodes = bed.inodes
    assert processes_in(inodes, boot_clock()) == []


def test_close_kills_what_runs_on_a_host_and_removes_the_namespaces():
    bed = HostBed(2)
    inodes = bed.inodes
    try:
        stray = subprocess.Popen(bed.command(1, ["sleep", "600"]), start_new_session=True)
        assert stray.pid in bed.left_behind()
    finally:
        bed.close()
    assert stray.wait(timeout=30) == -9
    assert processes_in(inodes, boot_clock()) == []


MAKER = textwrap.dedent(
    """
    import json, subprocess, sys
    from gangmesh.testing.hostbed import HostBed

    bed = HostBed(2)
    stray = subprocess.Popen(bed.command(1, ["sleep", "600"]), start_new_session=True)
    print(json.dumps({"inodes": bed.inodes, "holders": [bed.hosts[0].link] +
                      [h.holder for h in bed.hosts], "stray": stray.pid,
                      "files": str(bed._folder)}), flush=True)
    sys.stdin.read()
    """
)


def test_a_bed_whose_maker_is_killed_leaves_nothing():
    maker = subprocess.Popen(
        [sys.executable, "-c", MAKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    try:
        assert maker.stdout is not None
        made = json.loads(maker.stdout.readline())
        assert processes_in(made["inodes"]) != []
        maker.kill()  # no cleanup of its own: the holders see their input close
        maker.wait(timeout=30)
        for pid in [*made["holders"], made["stray"]]:
            assert ended(pid, 30), f"process {pid} of the bed still runs"
        assert processes_in(made["inodes"], boot_clock()) == []
        assert not Path(made["files"]).exists(), "the hosts' files outlived their maker"
    finally:
        maker.kill()
        maker.wait()
