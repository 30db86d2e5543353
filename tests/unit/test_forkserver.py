"""The fork server behind test worlds: each forked process is a new one, with its own
arguments, environment, folder, output and session, and ends as a script would."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from gangmesh.testing.forkserver import ForkServer, Job
from gangmesh.testing.world import rank_server

SCRIPT = """
import atexit, json, os, signal, subprocess, sys, threading, time
from pathlib import Path

class Finalised:
    def __del__(self, write=os.write):  # runs when the interpreter finalises its modules
        write(1, b"finalised\\n")

kept = Finalised()
mode = sys.argv[1]
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("ONLY"),
                  "home": "HOME" in os.environ, "session": os.getsid(0) == os.getpid(),
                  "path0": sys.path[0], "name": __name__, "preloaded": "json" in sys.modules}))
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "raise":
    raise RuntimeError("deliberate")
if mode == "thread":
    def late():
        time.sleep(0.2)
        print("thread finished", flush=True)
    threading.Thread(target=late).start()
if mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
    Path(sys.argv[2]).write_text(str(child.pid))
    threading.Event().wait()
"""


@pytest.fixture(scope="module")
def server():
    with ForkServer(["json"], cwd="/") as server:
        yield server


def run(
    server: ForkServer, tmp_path: Path, *argv: str, finalize: bool = False, text: str = SCRIPT
) -> tuple[int | None, str, int]:
    """Run the script ``text`` in a forked process: its exit code, its output, its id."""
    script = tmp_path / "script.py"
    script.write_text(text)
    output = tmp_path / "output.txt"
    output.unlink(missing_ok=True)  # the process appends to it
    job = Job(target=str(script), argv=list(argv), env={"ONLY": "this"}, cwd=str(tmp_path),
              output=str(output), finalize=finalize)  # fmt: skip
    pid = server.spawn(job)
    code = server.wait(pid, timeout=60)
    server.kill_session(pid)
    server.reap(pid)
    return code, output.read_text(), pid


def test_a_forked_process_runs_the_script_as_main_in_its_own_world(server, tmp_path):
    code, output, pid = run(server, tmp_path, "pass", "x")
    assert code == 0, output
    first = output.splitlines()[0]
    assert first == (
        f'{{"argv": ["{tmp_path}/script.py", "pass", "x"], "cwd": "{tmp_path}", "env": "this", '
        f'"home": false, "session": true, "path0": "{tmp_path}", "name": "__main__", '
        '"preloaded": true}'
    )
    assert output.splitlines()[1:] == ["atexit ran"]
    assert pid != os.getpid()


def test_exit_codes_and_tracebacks_are_a_scripts(server, tmp_path):
    code, output, _ = run(server, tmp_path, "exit", "3")
    assert (code, output.splitlines()[-1]) == (3, "atexit ran")
    code, output, _ = run(server, tmp_path, "raise")
    assert code == 1
    assert 'File "' + str(tmp_path / "script.py") + '", line' in output
    assert "RuntimeError: deliberate" in output and output.rstrip().endswith("atexit ran")


def test_a_job_that_asks_ends_with_the_interpreters_finalisation(server, tmp_path):
    """Without ``finalize`` the process skips the interpreter's finalisation (module objects
    are never finalised); with it, the process ends as ``python script.py`` does."""
    code, output, _ = run(server, tmp_path, "exit", "3", finalize=True)
    assert (code, output.splitlines()[1:]) == (3, ["atexit ran", "finalised"])
    code, output, _ = run(server, tmp_path, "raise", finalize=True)
    assert code == 1 and "RuntimeError: deliberate" in output
    assert output.rstrip().endswith("atexit ran\nfinalised")


def test_what_the_server_imported_is_left_out_of_collections_until_finalisation(server, tmp_path):
    """A forked process's collections skip the server's objects (they would copy every
    page they visit); a job that ends as ``python script.py`` collects them again."""
    frozen = (
        "import atexit, gc\n"
        "print('start', gc.get_freeze_count() > 0, flush=True)\n"
        "atexit.register(lambda: print('exit', gc.get_freeze_count() > 0, flush=True))\n"
    )
    for finalize, at_exit in [(False, "exit True"), (True, "exit False")]:
        code, output, _ = run(server, tmp_path, finalize=finalize, text=frozen)
        assert code == 0, output
        assert output.splitlines() == ["start True", at_exit]


def test_the_process_waits_for_its_threads_before_it_ends(server, tmp_path):
    code, output, _ = run(server, tmp_path, "thread")
    assert code == 0
    assert output.splitlines()[1:] == ["thread finished", "atexit ran"]


def test_a_hanging_process_is_killed_with_what_it_started(server, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    started = tmp_path / "child"
    job = Job(target=str(script), argv=["hang", str(started)], env={}, cwd=str(tmp_path),
              output=str(tmp_path / "output.txt"))  # fmt: skip
    pid = server.spawn(job)
    assert server.wait(pid, timeout=0.5) is None
    while not started.exists() or not started.read_text():
        assert server.wait(pid, timeout=0.05) is None
    child = int(started.read_text())
    server.kill_session(pid)
    assert server.wait(pid, timeout=60) == -signal.SIGKILL
    server.reap(pid)
    handle = os.pidfd_open(child) if Path(f"/proc/{child}").exists() else None
    if handle is not None:  # killed: it ends as soon as the kill lands
        import select

        assert select.select([handle], [], [], 60)[0]
        os.close(handle)


def test_a_killed_process_is_gone_once_reaped_even_before_its_exit_was_seen(server, tmp_path):
    """``reap`` right after ``kill_session`` waits for the process to end and collects it:
    no zombie is left in its session for a check of leftovers to find."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    for _ in range(5):
        job = Job(target=str(script), argv=["hang", str(tmp_path / "child")], env={},
                  cwd=str(tmp_path), output=str(tmp_path / "output.txt"))  # fmt: skip
        pid = server.spawn(job)
        server.kill_session(pid)
        server.reap(pid)
        assert not Path(f"/proc/{pid}").exists()


def test_closing_the_server_kills_what_runs(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    server = ForkServer([], cwd="/")
    job = Job(target=str(script), argv=["hang", str(tmp_path / "child")], env={},
              cwd=str(tmp_path), output=str(tmp_path / "output.txt"))  # fmt: skip
    pid = server.spawn(job)
    server.close()
    assert not server.alive
    assert not Path(f"/proc/{pid}").exists()


def test_modules_run_with_m(server, tmp_path):
    job = Job(target="json.tool", module=True, argv=[str(tmp_path / "in.json")], env={},
              cwd=str(tmp_path), output=str(tmp_path / "output.txt"))  # fmt: skip
    (tmp_path / "in.json").write_text('{"a":1}')
    pid = server.spawn(job)
    assert server.wait(pid, timeout=60) == 0
    server.reap(pid)
    assert (tmp_path / "output.txt").read_text() == '{\n    "a": 1\n}\n'


RANK_SESSION = """
import sys
import pytest

print("hypothesis imported before the session:", "hypothesis" in sys.modules)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-W", "error::pytest.PytestAssertRewriteWarning",
                      sys.argv[1]]))
"""


def test_a_rank_session_finds_pytests_plugins_imported_as_pytest_imports_them(
    pytestconfig, tmp_path
):
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (tmp_path / "rank.py").write_text(RANK_SESSION)
    output = tmp_path / "output.txt"
    job = Job(target=str(tmp_path / "rank.py"), argv=[str(tmp_path / "test_one.py")],
              env={"PATH": os.environ.get("PATH", "")}, cwd=str(tmp_path),
              output=str(output))  # fmt: skip
    with rank_server(pytestconfig) as server:
        pid = server.spawn(job)
        code = server.wait(pid, timeout=120)
        server.kill_session(pid)
        server.reap(pid)
    text = output.read_text()
    assert "hypothesis imported before the session: True" in text
    # A plugin imported behind pytest's back would be a warning, an error here.
    assert code == 0, text
    assert "1 passed" in text


pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")),
    reason="forks, and looks for processes in /proc (Linux)",
)
