"""Cold start of ``gangmesh plan`` against ``python -c "import numpy"``, in the same run.

    python -m benchmarks.startup_bench [--repeats 15] [--json F]

Every sample starts a fresh interpreter; the commands take turns, and each keeps its
median. Baseline: an interpreter that imports numpy and exits, which is the least any
command built on the numpy planner can cost. Target: at most 1.5x. A second table gives
the size of ``--format json`` at 2**20 ranks, all groups against ``--json-content counts``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.report import json_argument, median, print_table, write_json
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.render import plan_json

TITLE = "Cold start: gangmesh plan vs python -c 'import numpy' (median of fresh processes)"
SIZE_TITLE = "gangmesh plan --format json at 2**20 ranks (pp=8, tp=8, 8 ranks per node)"
PLAN = ["plan", "--world-size", "1024", "--pp", "4", "--tp", "8", "--ranks-per-node", "8"]


def commands() -> dict[str, list[str]]:
    """Name -> command line; the first is the baseline."""
    python = sys.executable
    runs = {
        "python -c 'import numpy'": [python, "-c", "import numpy"],
        "python -m gangmesh.tools.cli plan": [python, "-m", "gangmesh.tools.cli", *PLAN],
        "python -m gangmesh.tools.cli plan --format svg": [
            python, "-m", "gangmesh.tools.cli", *PLAN, "--format", "svg", "--rank", "9",
        ],
    }  # fmt: skip
    script = Path(python).parent / "gangmesh"
    if script.exists():
        runs["gangmesh plan (console script)"] = [str(script), *PLAN]
    return runs


def sample(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def json_sizes() -> list[dict[str, Any]]:
    plan = MeshTopology(2**20, pp=8, tp=8)
    rows = []
    for content in ("all", "counts"):
        start = time.perf_counter()
        text = plan_json(plan, ranks_per_node=8, content=content)
        rows.append(
            {
                "json_content": content,
                "bytes": len(text.encode()),
                "seconds": time.perf_counter() - start,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    json_argument(parser)
    args = parser.parse_args()
    runs = commands()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for command in runs.values():
        sample(command)  # warm the file cache once per command
    for _ in range(args.repeats):
        for name, command in runs.items():
            times[name].append(sample(command))
    baseline = median(times["python -c 'import numpy'"])
    rows = [
        {
            "command": name,
            "median_s": median(values),
            "min_s": min(values),
            "ratio": median(values) / baseline,
        }
        for name, values in times.items()
    ]
    print_table(TITLE, rows)
    print()
    sizes = json_sizes()
    print_table(SIZE_TITLE, sizes)
    write_json(args.json, TITLE, rows + sizes)


if __name__ == "__main__":
    main()
