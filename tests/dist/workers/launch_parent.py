"""Runs two local workers with gangmesh's launcher, as ``gangmesh check`` does, from a
process that has imported torch and runs one thread; each worker writes its parent."""

import json
import os
import sys
from pathlib import Path

import torch  # noqa: F401  (imported, as it is where gangmesh check launches its workers)

from gangmesh.tools.launch import run_local_workers

OUT = Path(sys.argv[1])


def main(argv: list[str]) -> int:
    record = {"parent": os.getppid(), "launcher": int(argv[0])}
    (OUT / f"rank{os.environ['RANK']}.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    exits = run_local_workers(2, main, [str(os.getpid())], timeout=60)
    sys.exit(max((e.returncode for e in exits), key=abs))
