"""Fixtures: real farcall processes on loopback ports the OS picks.

Every server is started with --listen=127.0.0.1:0 --ready_fd=N and reports
its port on a pipe once it serves, so nothing sleeps or polls. The binaries
come from FARCALL_AGENT_BIN / FARCALL_ROUTER_BIN (set by ctest), or build/.
"""

from __future__ import annotations

import os
import pathlib
import socket
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from ready_process import ReadyProcess  # noqa: E402


def _bin(env: str, rel: str) -> str:
    return os.environ.get(env) or str(ROOT / "build" / rel)


AGENT_BIN = _bin("FARCALL_AGENT_BIN", "device_agents/farcall-agent")
ROUTER_BIN = _bin("FARCALL_ROUTER_BIN", "server/farcall-router")
HANDLERS = str(HERE / "handlers_for_test.py")


# Where py_gate (handlers_for_test.py) connects; a Gate listens there.
GATE_PATH = os.path.join(tempfile.mkdtemp(prefix="farcall-test-"), "gate")


class Server(ReadyProcess):
    """A child process serving on 127.0.0.1:<port>; stopped by stop()."""

    def __init__(self, cmd: list[str]):
        # PYTHONFAULTHANDLER: a Python agent that does not stop prints its
        # threads' stacks (ReadyProcess.stop).
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1",
                   FARCALL_TEST_GATE=GATE_PATH)
        # Tests leave calls in flight at teardown: drain for 2 s, not 30,
        # unless the test's own flag (later, so it wins) says otherwise.
        first_flag = next(i for i, a in enumerate(cmd) if a.startswith("--"))
        super().__init__(cmd[:first_flag] + ["--drain_seconds=2"] + cmd[first_flag:], env=env)


def start_agent(*flags: str) -> Server:
    return Server([AGENT_BIN, "--listen=127.0.0.1:0", *flags])


def start_python_agent(*flags: str, handlers: str = HANDLERS) -> Server:
    return Server([sys.executable, "-m", "farcall.agent", f"--handlers={handlers}",
                   "--listen=127.0.0.1:0", *flags])


def start_router(*agents: Server) -> Server:
    return Server([ROUTER_BIN, "--listen=127.0.0.1:0",
                   "--agents=" + ",".join(a.address for a in agents)])


class Gate:
    """Holds py_gate calls: each connects here on entry and returns once
    released. Lets a test know a call is in flight, without sleeping."""

    def __init__(self):
        if os.path.exists(GATE_PATH):
            os.unlink(GATE_PATH)
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(GATE_PATH)
        self.server.listen(8)
        self.server.settimeout(60)
        self.held = []

    def wait_entered(self):
        """Blocks until a py_gate call is inside its handler."""
        conn, _ = self.server.accept()
        self.held.append(conn)

    def release_all(self):
        for conn in self.held:
            conn.sendall(b"x")
            conn.close()
        self.held = []

    def close(self):
        self.release_all()
        self.server.close()


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.close()


@pytest.fixture(scope="session")
def agent():
    s = start_agent()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def py_agent():
    s = start_python_agent("--python_threads=2")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="session")
def router(agent):
    s = start_router(agent)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def py_router(py_agent):
    s = start_router(py_agent)
    yield s
    s.stop()
