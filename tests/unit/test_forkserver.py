"""The fork server (`kubus.runtime.forkserver`) and its client (`kubus.cli.embedded.forks`): real
processes, with small modules of the test's own on the server's path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kubus.cli.embedded.forks import LOST_EXIT, ForkedProcess, ForkServer, ForkServerError
from kubus.cli.processes import ServiceProcess, ServiceSpec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux")

# A service stand-in: counts its imports in a file (the server imports it once, however many
# children run it), and as __main__ says what it was given, then does what its first argument says.
SERVICE = """
import os, sys, time
with open(os.environ["IMPORTS_FILE"], "a") as f:
    f.write(f"{os.getpid()}\\n")
"""
SERVICE_MAIN = """
import os, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("ONLY_FOR_CHILD"), flush=True)
what = sys.argv[1]
if what == "sleep":
    time.sleep(60)
elif what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "message":
    sys.exit("this went wrong")
"""


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    package = tmp_path / "lib" / "fake_service"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(SERVICE)
    (package / "__main__.py").write_text(SERVICE_MAIN)
    (tmp_path / "lib" / "threaded.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )
    return tmp_path / "lib"


@pytest.fixture
def env(tmp_path: Path, modules: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(modules), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "IMPORTS_FILE": str(tmp_path / "imports")}


@pytest.fixture
def server(tmp_path: Path, env: dict[str, str]) -> Iterator[ForkServer]:
    forks = ForkServer(["fake_service"], tmp_path / "forkserver.log", env=env)
    yield forks
    forks.close()


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def exited(child: ForkedProcess, timeout: float = 20.0) -> int:
    wait_for(lambda: child.poll() is not None, timeout)
    assert child.returncode is not None
    return child.returncode


def spawn(server: ForkServer, tmp_path: Path, env: dict[str, str], *args: str, name: str = "child") -> ForkedProcess:
    title = f"python -m fake_service {' '.join(args)}"
    child_env = {**env, "ONLY_FOR_CHILD": name}
    log = tmp_path / f"{name}.log"
    return server.spawn("fake_service", args, env=child_env, cwd=tmp_path, log_path=log, title=title)


def test_children_run_the_module_as_main_with_their_own_args_env_cwd_log_and_title(
    server: ForkServer, tmp_path: Path, env: dict[str, str]
) -> None:
    sleeper = spawn(server, tmp_path, env, "sleep", name="sleeper")
    done = spawn(server, tmp_path, env, "exit", "3", name="done")
    assert exited(done) == 3
    log = (tmp_path / "done.log").read_text()
    assert f"argv ['exit', '3'] cwd {tmp_path} env done" in log, log
    wait_for(lambda: "argv" in (tmp_path / "sleeper.log").read_text())
    cmdline = Path(f"/proc/{sleeper.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert cmdline == "python -m fake_service sleep", cmdline
    assert os.getsid(sleeper.pid) == sleeper.pid  # its own session, as spawn_child's children
    assert sleeper.poll() is None
    # Imported once, by the server, however many children ran it.
    assert (tmp_path / "imports").read_text().split() == [str(server.pid)]
    sleeper.send_signal(signal.SIGTERM)
    assert exited(sleeper) == -signal.SIGTERM


def test_exit_statuses_are_those_of_python_dash_m(server: ForkServer, tmp_path: Path, env: dict[str, str]) -> None:
    assert exited(spawn(server, tmp_path, env, "exit", "0", name="zero")) == 0
    message = spawn(server, tmp_path, env, "message", name="message")
    assert exited(message) == 1
    assert "this went wrong" in (tmp_path / "message.log").read_text()
    killed = spawn(server, tmp_path, env, "sleep", name="killed")
    killed.kill()
    assert exited(killed) == -signal.SIGKILL
    killed.kill()  # a second kill of an ended process signals nothing (its pid may be reused)


def test_a_module_that_does_not_import_fails_in_its_own_log(tmp_path: Path, env: dict[str, str]) -> None:
    forks = ForkServer(["fake_service", "no_such_module"], tmp_path / "forkserver.log", env=env)
    try:
        child = forks.spawn("no_such_module", [], env=env, cwd=None, log_path=tmp_path / "bad.log", title="bad")
        assert exited(child) == 1
        assert "No module named no_such_module" in (tmp_path / "bad.log").read_text()
    finally:
        forks.close()


def test_children_of_a_dead_server_get_sigterm_and_a_new_server_starts(
    server: ForkServer, tmp_path: Path, env: dict[str, str]
) -> None:
    child = spawn(server, tmp_path, env, "sleep", name="orphan")
    first = server.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert exited(child) == LOST_EXIT  # PR_SET_PDEATHSIG: the kernel told it
    again = spawn(server, tmp_path, env, "exit", "0", name="again")
    assert server.pid not in (None, first)
    assert exited(again) == 0


def test_close_is_idempotent_and_the_server_exits(server: ForkServer, tmp_path: Path, env: dict[str, str]) -> None:
    assert exited(spawn(server, tmp_path, env, "exit", "0")) == 0
    pid = server.pid
    assert pid is not None
    server.close()
    server.close()
    assert server.pid is None
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_a_server_whose_imports_start_threads_refuses_and_the_service_starts_fresh(
    tmp_path: Path, env: dict[str, str]
) -> None:
    forks = ForkServer(["threaded"], tmp_path / "forkserver.log", env=env)
    with pytest.raises(ForkServerError, match="started threads"):
        forks.spawn("threaded", [], env=env, cwd=None, log_path=tmp_path / "t.log", title="t")
    # A service of a group falls back to a fresh interpreter, and says so in its log.
    spec = ServiceSpec("fake", "queue", "fake_service", ("exit", "4"))
    service = ServiceProcess(spec, tmp_path / "fake.log", env, None, forks)
    service.start()
    wait_for(lambda: service.returncode() is not None)
    assert service.returncode() == 4
    log = (tmp_path / "fake.log").read_text()
    assert "not forked" in log and "started threads" in log, log
    assert "argv ['exit', '4']" in log, log
    forks.close()


def test_the_answer_to_a_request_given_up_is_not_the_next_ones_and_its_fork_is_killed(tmp_path: Path) -> None:
    """A spawn that timed out (its service was started another way) leaves an answer owed: when
    it comes, the fork it names is killed, and the next spawn reads its own answer."""
    forks = ForkServer(["fake_service"], tmp_path / "forkserver.log")
    late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        forks._abandoned = 1  # as after a ForkServerError from spawn's wait
        forks._take(f'{{"pid": {late.pid}}}\n{{"pid": 4242}}\n'.encode())
        assert late.wait(timeout=10) == -signal.SIGKILL
        assert forks._next_reply(("pid",), timeout=0.1) == {"pid": 4242}
    finally:
        late.kill()
        late.wait()
