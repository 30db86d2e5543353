"""Shared by worker scripts: write this rank's results as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def write_results(rank: int, results: dict[str, Any]) -> None:
    """Write ``results`` to ``<out_dir>/rank<rank>.json``; out_dir is argv[1]."""
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{rank}.json").write_text(json.dumps(results))
