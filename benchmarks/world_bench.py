"""Per-test cost of the pytest plugin's ``gangmesh_world(4)``: a pooled world of ranks
forked from a warm interpreter (the default) against ranks started as new interpreters
for every test, in the same run.

    python -m benchmarks.world_bench [--tests 8] [--repeats 1] [--json F]

Each sample is a pytest session, in a temporary directory, of a file of N tests marked
``gangmesh_world(4)`` that all-reduce over ``root_gang``; the modes take turns. The
per-test cost is (session with N tests - session with 1 test) / (N - 1), which leaves
out what a session pays once (pytest's start, the fork server's ``import torch``, the
pooled world's start); the first-test column is the session with 1 test. Baseline:
``--gangmesh-fresh-ranks``, where every rank of every test is a new ``python -m pytest``
process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import json_argument, median, print_table, write_json

TITLE = "gangmesh_world(4): seconds per test, a pooled world vs new interpreters"
TEST = """
@pytest.mark.gangmesh_world(4)
def test_sum_{index}(root_gang):
    total = torch.tensor(float(root_gang.rank))
    root_gang.all_reduce(total, gm.ReduceOperation.SUM)
    assert total.item() == 6.0
"""
MODES = {"new interpreters (baseline)": ["--gangmesh-fresh-ranks"], "pooled world": []}


def write_tests(folder: Path, count: int) -> Path:
    path = folder / f"test_world_{count}.py"
    body = "".join(TEST.format(index=index) for index in range(count))
    path.write_text(f"import pytest\nimport torch\nimport gangmesh as gm\n{body}")
    return path


def session(path: Path, flags: list[str], count: int) -> float:
    """Seconds of one pytest session over ``path``, which must pass ``count`` tests."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path), *flags]
    start = time.perf_counter()
    run = subprocess.run(command, cwd=path.parent, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if run.returncode != 0 or f"{count} passed" not in run.stdout:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stdout}\n{run.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=8, help="tests in the long session (>= 2)")
    parser.add_argument("--repeats", type=int, default=1)
    json_argument(parser)
    args = parser.parse_args()
    if args.tests < 2:
        parser.error(f"--tests: expected at least 2, got {args.tests}")
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gangmesh-world-bench-") as folder:
        files = {count: write_tests(Path(folder), count) for count in (1, args.tests)}
        for _ in range(args.repeats):
            for name, flags in MODES.items():
                for count, path in files.items():
                    times.setdefault((name, count), []).append(session(path, flags, count))
    rows = []
    baseline = None
    for name in MODES:
        one, many = median(times[name, 1]), median(times[name, args.tests])
        per_test = (many - one) / (args.tests - 1)
        baseline = per_test if baseline is None else baseline
        rows.append(
            {
                "ranks": name,
                "session_1_test_s": one,
                f"session_{args.tests}_tests_s": many,
                "per_test_s": per_test,
                "ratio": per_test / baseline,
            }
        )
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
