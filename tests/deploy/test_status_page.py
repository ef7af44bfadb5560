"""The router's status page (/ on its metrics port) in headless Chromium
(Debian's chromium): a live router with two cpu agents that serve calls; the
page, once its script has read /status.json, lists both agents as SERVING
with their calls; after one agent is killed, the page shows it unhealthy and
its last error. A screenshot of each state is kept as a test artifact
(artifacts/ under the test's working directory, or FARCALL_TEST_ARTIFACTS).

Run: .venv/bin/python -m pytest -q tests/deploy/test_status_page.py
Binaries: FARCALL_AGENT_BIN, FARCALL_ROUTER_BIN, FARCALL_CLI_BIN (else build/).
"""

from __future__ import annotations

import html.parser
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

HINT = "apt-get install chromium (scripts/install_deps.sh)"
DEADLINE_S = 30


class Rows(html.parser.HTMLParser):
    """The agent rows of the page's table: address -> (health, cell texts)."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, tuple[str, list[str]]] = {}
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-agent" in a:
            self._row = (a["data-agent"], a.get("data-health", ""), [])
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row[2].append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            address, health, cells = self._row
            self.rows[address] = (health, cells)
            self._row = None


def chromium(binary: str, *args: str) -> str:
    # Headless as root needs --no-sandbox; virtual time lets the page's
    # script fetch /status.json and render before the DOM is read.
    out = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", "--virtual-time-budget=3000", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def page_rows(binary: str, url: str) -> dict[str, tuple[str, list[str]]]:
    parser = Rows()
    parser.feed(chromium(binary, "--dump-dom", url))
    return parser.rows


def screenshot(binary: str, url: str, name: str) -> pathlib.Path:
    folder = pathlib.Path(os.environ.get("FARCALL_TEST_ARTIFACTS", "artifacts")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    chromium(binary, "--window-size=1400,400", f"--screenshot={path}", url)
    assert path.stat().st_size > 0
    print(f"screenshot: {path}")
    return path


@pytest.fixture
def stack():
    agents = [lib.Server([lib.agent_bin(), "--listen=127.0.0.1:0", "--drain_seconds=2"])
              for _ in range(2)]
    router = lib.Server([lib.router_bin(), "--listen=127.0.0.1:0",
                         "--metrics_listen=127.0.0.1:0", "--probe_interval_ms=100",
                         "--drain_seconds=2",
                         "--agents=" + ",".join(a.address for a in agents)])
    yield router, agents
    for s in [router, *agents]:
        s.stop()


def test_the_page_shows_every_agent_and_one_that_dies(stack):
    binary = lib.require_tool("chromium", HINT)
    router, agents = stack
    url = f"http://127.0.0.1:{router.metrics_port}/"
    for _ in range(4):
        subprocess.run([lib.cli_bin(), "call", "copy", "float32[4]:iota",
                        "--results=float32[4]", f"--target={router.address}",
                            "--via_router"],
                       check=True, capture_output=True, timeout=30)

    rows = lib.wait_for("both agents SERVING on the page", lambda: (
        r if len(r := page_rows(binary, url)) == 2 and
        all(h == "SERVING" for h, _ in r.values()) else None), DEADLINE_S)
    assert set(rows) == {a.address for a in agents}
    calls = sum(int(cells[7]) for _, cells in rows.values())  # the "calls" column
    assert calls == 4
    assert sum(float(cells[5]) for _, cells in rows.values()) > 0  # calls/s
    screenshot(binary, url, "status_page_serving.png")

    agents[0].proc.kill()
    agents[0].proc.wait()
    rows = lib.wait_for("the killed agent unhealthy on the page", lambda: (
        r if (r := page_rows(binary, url)).get(agents[0].address, ("SERVING",))[0]
        in ("DOWN", "NOT_SERVING") else None), DEADLINE_S)
    health, cells = rows[agents[0].address]
    assert "health check failed" in cells[3], cells
    assert rows[agents[1].address][0] == "SERVING"
    screenshot(binary, url, "status_page_agent_down.png")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-rs", "-s"]))
