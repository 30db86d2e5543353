"""The lighthouse of replica groups: its address, and a first question to it. Imports no
torch (``gangmesh check`` refuses a bad address at once)."""

from __future__ import annotations

import http.client
import os
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass

LIGHTHOUSE_VARIABLE = "TORCHFT_LIGHTHOUSE"
"""torchft's environment variable with the lighthouse's address."""
_STATUS = "/status"
"""The lighthouse's status page: a question it answers without changing its state (a
heartbeat or a quorum request would make the asker a replica group it waits for)."""
_RECONNECT = 0.1
"""Seconds between two connections to a lighthouse that refuses them (it may be starting)."""


@dataclass(frozen=True)
class Answer:
    """What asking the lighthouse found."""

    trouble: str
    """Why it cannot serve the replica groups; "" where it answered as a lighthouse."""
    via: str
    """This host's address on the connection that asked ("" where none was made): where the
    other replica groups, which reach the lighthouse too, are likely to reach this host."""


def lighthouse_address(given: str | None) -> str:
    """``given`` or torchft's variable, as ``http://host:port``.

    >>> lighthouse_address("localhost:0")
    Traceback (most recent call last):
    ...
    ValueError: lighthouse: expected a port in 1..65535, got 0 in 'localhost:0'

    :raises ValueError: neither is given, the address is not ``host:port`` or
        ``http(s)://host:port``, or its port is out of range.
    """
    name = "lighthouse" if given is not None else LIGHTHOUSE_VARIABLE
    address = given if given is not None else os.environ.get(LIGHTHOUSE_VARIABLE)
    if not isinstance(address, str) or not address.strip():
        raise ValueError(
            f"lighthouse: expected the lighthouse's address (host:port) or {LIGHTHOUSE_VARIABLE} "
            f"set, got {address!r}"
        )
    address = address.strip()
    full = address if "://" in address else f"http://{address}"
    parts = urllib.parse.urlsplit(full)
    extra = parts.path.strip("/") or parts.query or any(c.isspace() for c in address)
    written = re.fullmatch(r"\[?[^\[\]]*\]?:(\d+)", parts.netloc)
    if parts.scheme not in ("http", "https") or not parts.hostname or not written or extra:
        raise ValueError(
            f"{name}: expected the lighthouse's address as host:port or http://host:port "
            f"(such as 127.0.0.1:29510), got {address!r}"
        )
    if not 1 <= int(written[1]) <= 65535:
        raise ValueError(f"{name}: expected a port in 1..65535, got {written[1]} in {address!r}")
    return full


def ask_lighthouse(address: str, bound: float) -> Answer:
    """Ask the lighthouse at ``address`` for its status, within ``bound`` seconds: connections
    it refuses are tried again until then (a lighthouse that is starting binds its port
    soon), and one it takes must be answered by then."""
    parts = urllib.parse.urlsplit(address)
    host, port = parts.hostname or "", parts.port or 0
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as ex:
        return Answer(f"its host {host!r} has no address ({ex.strerror or ex})", "")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = time.monotonic() + bound
    while True:
        connection = kind(host, port, timeout=max(0.1, deadline - time.monotonic()))
        try:
            connection.connect()
        except OSError as ex:
            connection.close()
            if time.monotonic() >= deadline:
                return Answer(f"nothing answers at {host}:{port} ({ex.strerror or ex})", "")
            time.sleep(_RECONNECT)  # a lighthouse that is starting binds its port soon
            continue
        via = str(connection.sock.getsockname()[0])
        try:
            connection.request("GET", _STATUS)
            response = connection.getresponse()
            said = response.read(4096)
        except (OSError, http.client.HTTPException) as ex:
            return Answer(_silence(ex, bound), via)
        finally:
            connection.close()
        if response.status != 200 or b"quorum" not in said:
            return Answer(
                f"something answers there, but not as torchft's lighthouse (HTTP "
                f"{response.status} {response.reason} to GET {_STATUS})",
                via,
            )
        return Answer("", via)


def _silence(error: Exception, bound: float) -> str:
    """What a server that took the connection did instead of answering."""
    if isinstance(error, TimeoutError):
        return f"it took the connection but did not answer within {bound:g} s"
    return f"it took the connection but closed it without an answer ({error or type(error)})"
