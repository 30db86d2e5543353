"""Gangs on 4 gloo processes (pp=2, tp=2): what torch shows of each group, the layout
record each rank gets, and the record read back from the file rank 0 wrote; to JSON."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from common import write_results

import gangmesh as gm

root = gm.setup_root_gang(timeout=timedelta(seconds=47))
gangs = gm.create_gangs(root, pp=2, tp=2, timeout=timedelta(seconds=47))
shown = {}
for name in ("tp", "pp"):
    group = gangs[name].as_process_group()
    shown[name] = {"group_name": group.group_name, "group_desc": group.group_desc}
path = Path(sys.argv[1]) / "layout.json"
record = gangs.write_layout_record(path)
root.barrier()
write_results(
    root.rank,
    {"shown": shown, "record": record, "read_back": gm.read_layout_record(path)},
)
gangs.close()
root.close()
