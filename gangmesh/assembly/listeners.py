"""Server sockets for the stores gangmesh serves, each listening on one interface of this host
(torch's TCPStore server listens on every interface, whatever host it is given)."""

from __future__ import annotations

import ipaddress
import socket


def own_address(host: str) -> str | None:
    """``host`` as an IP address of this host, to listen on: an IP address of this host as it
    is, ``localhost`` as 127.0.0.1, a name that resolves to an address of this host other
    than a loopback one (where a host maps its own name to 127.0.1.1, the other hosts do not);
    None for anything else (no address of this host, or a name that does not resolve)."""
    try:
        ipaddress.ip_address(host)
        literal = True
    except ValueError:
        literal = False
    if literal:
        found = host
    else:
        try:
            found = str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
        except (OSError, IndexError):
            return None
        if ipaddress.ip_address(found).is_loopback and host != "localhost":
            return None
    return found if _is_own(found) else None


def _is_own(address: str) -> bool:
    """Whether ``address`` is an address of this host (a socket can be bound to it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def listener(address: str, port: int) -> socket.socket | None:
    """A TCP socket listening at ``address`` (an IP address of this host) and ``port`` (0: a
    free one), for a store's server (TCPStore's ``master_listen_fd``); None where it cannot
    be made (the port is taken: torch's own socket then says so)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        return None
    return sock
