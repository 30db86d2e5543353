"""gangmesh_world(n, hosts=H) as a project uses it: a test file of its own whose test runs in
every process, each on its host, and nothing of the hosts is left after the session."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gangmesh.testing.netns import namespaces_unavailable, processes_in
from tests.unit.test_docs_examples_testing import EXAMPLES
from tests.unit.test_plugin import report_of, run_inline

pytestmark = pytest.mark.dist

needs_hosts = pytest.mark.skipif(
    bool(namespaces_unavailable()), reason=namespaces_unavailable() or "-"
)


@needs_hosts
def test_a_users_file_runs_each_process_on_its_host_and_leaves_nothing(
    pytester: pytest.Pytester, tmp_path: Path
):
    # A project of its own: the docs' example beside a file that records where it ran.
    shutil.copy(EXAMPLES / "test_multihost.py", pytester.path / "test_multihost.py")
    pytester.makepyfile(
        test_where=f"""
        import json, os, socket
        from pathlib import Path

        import pytest
        import gangmesh as gm

        OUT = Path({str(tmp_path)!r})

        @pytest.mark.gangmesh_world(4, hosts=2)
        def test_where(root_gang):
            name = socket.gethostname()
            gangs = gm.create_gangs(root_gang, dp_replicate=2, tp=2)
            tp_hosts = gm.all_gather_objects(gangs.tp, name)
            gangs.close()
            (OUT / f"rank{{root_gang.rank}}.json").write_text(json.dumps({{
                "host": name, "address": socket.gethostbyname(name), "tp_hosts": tp_hosts,
                "namespaces": [os.stat(f"/proc/self/ns/{{kind}}").st_ino
                               for kind in ("net", "uts", "mnt")],
            }}))
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "test_where.py", "test_multihost.py")
    ended = time.clock_gettime(time.CLOCK_BOOTTIME)
    result.assert_outcomes(passed=3)
    found = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert sorted(found) == [0, 1, 2, 3]
    assert [found[r]["host"] for r in range(4)] == ["host0", "host0", "host1", "host1"]
    assert [found[r]["address"] for r in range(4)] == ["10.213.0.1"] * 2 + ["10.213.0.2"] * 2
    assert all(found[r]["tp_hosts"] == [found[r]["host"]] * 2 for r in range(4))
    inodes = {inode for result in found.values() for inode in result["namespaces"]}
    assert len(inodes) == 6, "each host has network, hostname and mount namespaces of its own"
    assert processes_in(sorted(inodes), ended) == [], "the session left a process or namespace"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("3, hosts=2", "hosts: expected a number of hosts that divides the 3 processes"),
        ("4, hosts=0", "hosts: expected an int >= 1, got 0"),
        ("4, hosts=2, numbering='zigzag'", "numbering: expected one of ('consecutive', "
                                           "'round_robin'), got 'zigzag'"),
    ],
)  # fmt: skip
def test_a_bad_hosts_argument_fails_the_test_naming_it(pytester, arguments, message):
    recorder = run_inline(
        pytester,
        f"""
        import pytest

        @pytest.mark.gangmesh_world({arguments})
        def test_bad(root_gang):
            pass
        """,
    )
    assert message in str(report_of(recorder, "test_bad").longrepr)


def test_without_the_privilege_a_test_on_hosts_skips_with_one_reason(tmp_path: Path):
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop this session's capabilities")
    (tmp_path / "test_user.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.gangmesh_world(2, hosts=2)\n"
        "def test_on_hosts(root_gang):\n"
        "    pass\n"
    )
    # Root without capabilities, as in a container that may not make namespaces.
    done = subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m", "pytest",
         "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "test_user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert (
        "gangmesh_world(2, hosts=2): cannot make network namespaces here: unshare --net --uts "
        "--mount ...: could not make the namespaces (unshare: unshare failed: Operation not "
        "permitted)" in done.stdout
    ), done.stdout
