"""The migration guides' examples run as the page says: fairseq2's column against the published
fairseq2 0.8.1 gang module, gangmesh's against gangmesh, and the DeviceMesh pair."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.dist.launch import REPO, torchrun_like
from tests.shown import assert_output_shown

pytestmark = pytest.mark.dist

MIGRATION = REPO / "docs/examples/migration"
FAIRSEQ2 = "0.8.1"


def printed(script: str, nproc: int, packages: Path | None = None) -> list[str]:
    """What the ranks of ``script`` print, sorted; ``packages``: a folder searched first for imports."""
    run = torchrun_like(
        MIGRATION / script, nproc, path0=None if packages is None else str(packages)
    )
    assert run.returncode == 0, run.output
    # Ranks share one stdout, so a line may be interleaved with another rank's: find records.
    return sorted(re.findall(r"(rank \d+: .*?)(?=rank \d+: |\n|$)", run.output))


def expected(name: str) -> list[str]:
    return (MIGRATION / name).read_text().splitlines()


@pytest.fixture(scope="module")
def fairseq2_site(tmp_path_factory) -> Path:
    """fairseq2's published wheel, unpacked, with a package __init__ that does not load its
    native extension (the gang module does not need it)."""
    where = tmp_path_factory.mktemp("fairseq2")
    fetch = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
         f"fairseq2=={FAIRSEQ2}", "--dest", str(where)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    wheels = sorted(where.glob("fairseq2-*.whl"))
    if fetch.returncode or not wheels:
        pytest.skip(f"the fairseq2 {FAIRSEQ2} wheel cannot be fetched here: {fetch.stderr[-300:]}")
    site = where / "site"
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(site)
    (site / "fairseq2" / "__init__.py").write_text('"""fairseq2, without fairseq2n."""\n')
    return site


def test_the_fairseq2_column_prints_what_fairseq2_0_8_1_prints(fairseq2_site):
    assert printed("fairseq2_side.py", 8, fairseq2_site) == expected("fairseq2_output.txt")


def test_the_same_code_on_gangmesh_prints_what_the_page_shows():
    assert printed("gangmesh_side.py", 8) == expected("gangmesh_output.txt")
    fairseq2_code = (MIGRATION / "fairseq2_side.py").read_text().splitlines()
    gangmesh_code = (MIGRATION / "gangmesh_side.py").read_text().splitlines()
    differences = [line for line in gangmesh_code if line not in fairseq2_code]
    assert differences == [
        "# gangmesh: the same code, importing from gangmesh.compat.fairseq2",
        "from gangmesh.compat.fairseq2 import (",
    ], "only the import differs"


def test_gangs_replace_hand_made_mesh_groups():
    by_hand = printed("devicemesh_side.py", 4)
    # shard groups {0,1} and {2,3} sum to 1 and 5; the replicate broadcast takes rank 2 or 3's 5.
    assert by_hand == [f"rank {r}: 5.0" for r in range(4)]
    assert printed("gangs_side.py", 4) == by_hand


def test_fairseq2_s_layers_train_on_gangmesh_s_gangs_as_the_page_shows():
    pytest.importorskip("fairseq2", reason="fairseq2 0.8.1 is not installed")
    run = torchrun_like(MIGRATION / "fairseq2_library.py", 4, timeout=180)
    assert run.returncode == 0, run.output
    assert "largest difference from one process" in run.output
    assert_output_shown(
        "migration.rst",
        "$ torchrun --nproc-per-node 4 docs/examples/migration/fairseq2_library.py",
        run.output,
    )
