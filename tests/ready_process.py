"""A farcall server started by a Python test, shared by tests/python,
tests/deploy and tests/hosts.

The server gets --ready_fd=N and writes "PORT [METRICS_PORT]" there once it
serves; EOF alone means it died. Its stdout and stderr go to a temporary
file (output()).

    p = ReadyProcess([AGENT_BIN, "--listen=127.0.0.1:0"])
    ... p.address, p.port, p.metrics_port ...
    assert p.stop() == 0
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile

START_TIMEOUT = 120  # seconds for a server to report its port


class ReadyProcess:
    def __init__(self, cmd: list[str], *, host: str = "127.0.0.1", env: dict | None = None,
                 preexec_fn=None):
        r, w = os.pipe()
        self.cmd = cmd
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd + [f"--ready_fd={w}"], pass_fds=(w,), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, preexec_fn=preexec_fn)
        os.close(w)
        with os.fdopen(r) as f:
            if not select.select([f], [], [], START_TIMEOUT)[0]:
                self.proc.kill()
                raise RuntimeError(f"{cmd[0]} did not report its port within "
                                   f"{START_TIMEOUT} s:\n{self.output()}")
            line = f.read()
        if not line.strip():
            self.proc.wait()
            raise RuntimeError(f"{cmd[0]} failed to start:\n{self.output()}")
        ports = [int(p) for p in line.split()]
        self.port = ports[0]
        self.metrics_port = ports[1] if len(ports) > 1 else 0
        self.address = f"{host}:{self.port}"

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout: float = 40) -> int:
        """SIGTERM, and its exit status (killed, and -9, if it takes longer
        than `timeout`: then what it was doing goes to stderr first, for the
        test's report)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{self.cmd[0]} did not exit within {timeout} s of SIGTERM; its threads:\n"
                  f"{self._stacks()}\nits output:\n{self.output()}", file=sys.stderr)
            self.proc.kill()
            return self.proc.wait()

    def _stacks(self) -> str:
        """Every thread's stack of the running process, native (gdb, where
        installed) and Python (a Python process started with
        PYTHONFAULTHANDLER=1 prints them to its output at SIGABRT, which
        then kills it)."""
        stacks = "(gdb is not installed: no native stacks)"
        if shutil.which("gdb"):
            try:
                stacks = subprocess.run(
                    ["gdb", "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt"],
                    capture_output=True, text=True, timeout=120).stdout
            except subprocess.TimeoutExpired:
                stacks = "(gdb took over 120 s)"
        self.proc.send_signal(signal.SIGABRT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return stacks
