"""Planning time vs world size: every group of every dimension, up to 2**20 ranks.

    python -m benchmarks.plan_bench [--max-exp 20] [--json F]

Baseline (same run): the bare numpy work of one transposed copy of the rank array per
dimension, which any planner has to do to list every group. The last column plans the same
world with ep=8 as well: every group of the dense view and of the expert view (ep, efsdp,
etp, edp).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.report import best_of, json_argument, print_table, write_json
from gangmesh.plan.topology import DIM_NAMES, MeshTopology
from gangmesh.tools.render import shown_dims

TITLE = "MeshTopology: full plan (every group of every dimension, dp and dp_shard_cp; ep=8 too)"


def full_plan(world_size: int, ep: int = 1) -> int:
    plan = MeshTopology(world_size, pp=4, dp_replicate=2, cp=2, tp=8, ep=ep)
    return sum(plan.groups(dim).size for dim in shown_dims(plan))


def numpy_baseline(world_size: int) -> int:
    shape = (4, 2, world_size // 128, 2, 8)
    mesh = np.arange(world_size, dtype=np.int64).reshape(shape)
    total = 0
    for inner in ([0], [1], [2], [3], [4], [1, 2], [2, 3]):
        outer = [i for i in range(len(DIM_NAMES)) if i not in inner]
        total += mesh.transpose(outer + inner).reshape(-1, 1).size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-exp", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    json_argument(parser)
    args = parser.parse_args()
    rows = []
    for exp in range(10, args.max_exp + 1, 2):
        world = 2**exp
        planner = best_of(lambda w=world: full_plan(w), args.repeats)
        baseline = best_of(lambda w=world: numpy_baseline(w), args.repeats)
        expert = best_of(lambda w=world: full_plan(w, ep=8), args.repeats)
        rows.append(
            {
                "world_size": world,
                "plan_s": planner,
                "numpy_baseline_s": baseline,
                "ratio": planner / baseline,
                "plan_ep8_s": expert,
            }
        )
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
