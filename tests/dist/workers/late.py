"""4 processes under torchrun; rank LATE starts its setup 30 s late (still importing, loading).

    late.py OUT LATE

Every other rank sets up with a timeout of 4 s and writes the GangError it gets: rank LATE is
alive beside it, so it is named as late, not as gone.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
from common import write_results

import gangmesh as gm


def main() -> None:
    late, me = int(sys.argv[2]), int(os.environ["RANK"])
    if me == late:
        time.sleep(30)  # ended by torchrun once the others have failed
    try:
        gm.setup_root_gang(torch.device("cpu"), timeout=timedelta(seconds=4))
    except gm.GangError as ex:
        write_results(me, {"error": str(ex), "culprits": list(ex.culprits)})
        raise


if __name__ == "__main__":
    main()
