"""Data and tensor parallel gangs of the root gang, with tp_size=2.

torchrun --nproc-per-node 4 docs/examples/parallel_gangs.py
"""

from gangmesh import setup_parallel_gangs, setup_root_gang

root_gang = setup_root_gang()

gangs = setup_parallel_gangs(root_gang, tp_size=2)

print(f"Rank {root_gang.rank}: Data Parallel Rank: {gangs.dp.rank}")
print(f"Rank {root_gang.rank}: Tensor Parallel Rank: {gangs.tp.rank}")
