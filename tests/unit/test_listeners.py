"""The stores gangmesh serves listen on one interface: MASTER_ADDR's where it is an address of
this host, read back from the socket itself."""

from __future__ import annotations

import socket

import pytest

from gangmesh.assembly.listeners import listener, own_address


def test_an_address_of_this_host_is_listened_at_as_it_is():
    assert own_address("127.0.0.1") == "127.0.0.1"
    assert own_address("localhost") == "127.0.0.1"
    sock = listener("127.0.0.1", 0)
    assert sock is not None
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1"


def test_an_address_of_another_host_or_no_host_is_not_listened_at():
    assert own_address("192.0.2.254") is None  # TEST-NET-1: no host's here
    assert own_address("no-such-host.invalid") is None


def test_a_name_this_host_maps_to_a_loopback_address_is_not_taken_for_it():
    name = socket.gethostname()
    found = socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    if not found.startswith("127."):
        pytest.skip(f"{name} resolves to {found} here, not to a loopback address")
    assert own_address(name) is None, "the other hosts resolve this name otherwise"


def test_a_port_in_use_gives_no_listener():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert listener("127.0.0.1", taken.getsockname()[1]) is None
