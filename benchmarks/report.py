"""Print benchmark rows as a table and optionally write them as JSON."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timed calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    """Rows of equal keys as an aligned table; floats with 4 significant digits."""
    print(title)
    if not rows:
        return
    keys = list(rows[0])
    cells = [[_cell(row[k]) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True)))
    for line in cells:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="also write the rows to this JSON file")


def write_json(path: str | None, title: str, rows: list[dict[str, Any]]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"benchmark": title, "rows": rows}, out, indent=1)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
