"""A real Prometheus (Debian's prometheus package) on loopback scrapes a live
router and two cpu agents that serve calls, with deploy/prometheus's rules
loaded; then, through Prometheus' HTTP API:
  - the farcall series are there, from every target;
  - every recording and alerting rule evaluates without error;
  - every PromQL expression of the Grafana dashboard (deploy/grafana/farcall.json)
    parses and evaluates;
and every metric that the dashboard and the rules name is exported by the
live router or agents (a chart of a metric nobody exports is a bug).

Run: .venv/bin/python -m pytest -q tests/deploy/test_prometheus_live.py
  (or .venv/bin/python tests/deploy/test_prometheus_live.py)
Binaries: FARCALL_AGENT_BIN, FARCALL_ROUTER_BIN, FARCALL_CLI_BIN (else build/).
Nothing sleeps blindly: servers report their ports on --ready_fd, and the
test polls Prometheus' API, with a deadline, until a scrape or rule
evaluation has happened.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

HINT = "apt-get install prometheus (scripts/install_deps.sh)"
DEADLINE_S = 60


class Prometheus:
    def __init__(self, binary: str, config: dict, workdir: pathlib.Path, yaml):
        cfg = workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log = tempfile.TemporaryFile()
        # A free port: Prometheus cannot report one it picks itself. Should
        # another process take it first, Prometheus exits and we try another.
        for _ in range(3):
            self.port = lib.free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen(
                [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=lib.die_with_parent)
            try:
                lib.wait_for("Prometheus to be ready",
                             lambda: self._exited() or lib.http_get(self.url + "/-/ready", 2),
                             DEADLINE_S)
            except AssertionError:
                self.stop()
                raise AssertionError(f"Prometheus never became ready:\n{self.output()}")
            if self.proc.poll() is None:
                return
        raise AssertionError(f"Prometheus did not start:\n{self.output()}")

    def _exited(self):
        return self.proc.poll() is not None

    def api(self, path: str, **params):
        q = urllib.parse.urlencode(params)
        body = lib.http_json(f"{self.url}/api/v1/{path}" + (f"?{q}" if q else ""))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str):
        return self.api("query", query=expr)["result"]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([lib.cli_bin(), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def stack():
    yaml = lib.require_module("yaml", "pip install -r python/requirements-dev.txt")
    prometheus_bin = lib.require_tool("prometheus", HINT)
    agent_bin, router_bin = lib.agent_bin(), lib.router_bin()
    lib.cli_bin()
    started = []
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="farcall-prometheus-test-"))
    try:
        agents = []
        for _ in range(2):
            agents.append(lib.Server([agent_bin, "--listen=127.0.0.1:0",
                                      "--metrics_listen=127.0.0.1:0"]))
            started.append(agents[-1])
        router = lib.Server([router_bin, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                             "--agents=" + ",".join(a.address for a in agents)])
        started.append(router)

        def both_live():
            page = lib.http_get(f"http://127.0.0.1:{router.metrics_port}/metrics")
            return sum(1 for line in page.splitlines()
                       if line.startswith("farcall_router_agent_up{") and line.endswith(" 1")) == 2
        lib.wait_for("the router to see both agents SERVING", both_live, DEADLINE_S)

        # Calls of every kind: unary and streamed, results and errors, through
        # the router and straight to the agents it names.
        target = "--target=" + router.address
        calls = [
            ["call", "axpy", "float32[8]:iota", "float32[8]:ones", "--results=float32[8]",
             "--aliases=1:0", "--attr=alpha=2.0"],
            ["call", "axpy", "float32[8]:iota", "float32[8]:ones", "--results=float32[8]",
             "--aliases=1:0", "--attr=alpha=2.0", "--via_router"],
            ["call", "sum", "int32[16]:iota", "--results=int32[]", "--via_router"],
            ["call", "copy", "float32[1048576]:ones", "--results=float32[1048576]", "--print=2",
             "--via_router"],
            ["bench", "--handler=copy", "--calls=40", "--concurrency=4", "--bytes=65536",
             "--via_router"],
            ["bench", "--handler=crc32c", "--calls=20", "--bytes=4096"],
        ]
        for args in calls:
            r = cli(*args, target)
            assert r.returncode == 0, f"farcall {' '.join(args)}:\n{r.stdout}{r.stderr}"
        r = cli("call", "fail", "--attr=code=13,message=str:boom", target, "--via_router")
        assert r.returncode == 1 and "INTERNAL" in r.stderr, r.stdout + r.stderr
        r = cli("call", "nope", "float32[4]", "--results=float32[4]", target)
        assert r.returncode == 1 and "NOT_FOUND" in r.stderr, r.stdout + r.stderr

        config = yaml.safe_load((lib.PROMETHEUS_DIR / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        config["rule_files"] = [str(lib.PROMETHEUS_DIR / f) for f in config["rule_files"]]
        jobs = {sc["job_name"]: sc for sc in config["scrape_configs"]}
        assert set(jobs) == {"farcall-router", "farcall-agent"}, set(jobs)
        jobs["farcall-router"]["static_configs"] = [
            {"targets": [f"127.0.0.1:{router.metrics_port}"]}]
        jobs["farcall-agent"]["static_configs"] = [
            {"targets": [f"127.0.0.1:{a.metrics_port}" for a in agents]}]
        prom = Prometheus(prometheus_bin, config, workdir, yaml)
        started.append(prom)

        def all_up():
            ups = prom.query('up{job=~"farcall.*"}')
            return len(ups) == 3 and all(u["value"][1] == "1" for u in ups)
        lib.wait_for("Prometheus to scrape the router and both agents", all_up, DEADLINE_S)
        yield {"prom": prom, "router": router, "agents": agents, "yaml": yaml}
    finally:
        for s in reversed(started):
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# Metrics this plaintext stack cannot export, and the test that shows a
# process exports them when it can.
ONLY_WITH = {
    "farcall_tls_certificate_expiry_timestamp_seconds":
        "--tls_cert (tests/security_test.cc, TlsAgentRefusesPlaintextAndServesTls)",
}


def live_names(stack) -> set[str]:
    names = set()
    for s in [stack["router"], *stack["agents"]]:
        names |= lib.exposed_names(lib.http_get(f"http://127.0.0.1:{s.metrics_port}/metrics"))
    return names


def test_farcall_series_are_in_prometheus(stack):
    prom = stack["prom"]
    live = {n for n in live_names(stack) if n.startswith("farcall_")}

    def stored():
        have = {r["metric"]["__name__"] for r in
                prom.query('count by (__name__) ({__name__=~"farcall_.+"})')}
        # Families whose samples carry a suffix (histograms) count by it.
        missing = {n for n in live if not lib.name_is_exposed(n, have) and
                   not any(h.startswith(n + "_") for h in have)}
        return have if not missing else None
    have = lib.wait_for("every farcall metric to be stored", stored, DEADLINE_S)
    for job, count in (("farcall-router", 1), ("farcall-agent", 2)):
        series = prom.query(f'count by (instance) ({{job="{job}", __name__=~"farcall_.+"}})')
        assert len(series) == count, f"{job}: {series}"
    # The router answers an unknown handler itself; the agents saw the rest.
    for metric, want in (("farcall_agent_calls_total", {"OK", "INTERNAL"}),
                         ("farcall_router_calls_total", {"OK", "INTERNAL", "NOT_FOUND"})):
        codes = {c["metric"]["code"] for c in prom.query(f"sum by (code) ({metric})")}
        assert want <= codes, f"{metric}: codes {codes}"
    print(f"{len(have)} farcall series names stored")


def test_every_rule_evaluates_without_error(stack):
    prom = stack["prom"]

    def evaluated():
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if not rules or any(r.get("lastEvaluation", "").startswith("0001-") for r in rules):
            return None
        return rules
    rules = lib.wait_for("every rule to be evaluated once", evaluated, DEADLINE_S)
    yaml = stack["yaml"]
    want = sum(len(g["rules"]) for g in yaml.safe_load(lib.RULES_FILE.read_text())["groups"])
    assert len(rules) == want, f"Prometheus loaded {len(rules)} rules, the file has {want}"
    bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    assert not bad, "rules that fail to evaluate:\n" + "\n".join(bad)
    # Recording rules over the live series give answers.
    for record in ("platform_handler:farcall_agent_calls:rate5m",
                   "instance:farcall_agent_budget_used:ratio",
                   "platform:farcall_router_call_seconds:p99_rate5m",
                   "platform_handler:farcall_agent_call_seconds:p99_rate5m"):
        lib.wait_for(f"{record} to have a value", lambda r=record: prom.query(r), DEADLINE_S)
    firing = [a["labels"]["alertname"] for a in prom.api("alerts")["alerts"]
              if a["state"] == "firing"]
    print(f"{len(rules)} rules healthy; alerts firing now: {firing or 'none'}")


def test_dashboard_queries_parse_and_evaluate(stack):
    prom = stack["prom"]
    dashboard = json.loads(lib.DASHBOARD_FILE.read_text())
    exprs = lib.grafana_exprs(dashboard)
    assert len(exprs) > 20
    errors, empty = [], []
    for where, expr in exprs:
        selector = lib.label_values_query(expr)
        q = lib.concrete_promql(selector if selector else expr)
        try:
            result = prom.query(q)
        except Exception as e:  # noqa: BLE001 - collected and reported together
            errors.append(f"{where}: {q}\n    {e}")
            continue
        if not result:
            empty.append(where)
    assert not errors, "dashboard queries Prometheus rejects:\n" + "\n".join(errors)
    print(f"{len(exprs)} dashboard queries parse and evaluate; "
          f"{len(empty)} have no data on a cpu-only stack: {empty}")


def test_every_metric_named_by_dashboard_and_rules_is_exported(stack):
    yaml = stack["yaml"]
    rules = yaml.safe_load(lib.RULES_FILE.read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    named: dict[str, set[str]] = {}
    sources = [(f"rule {r.get('record') or r.get('alert')}", r["expr"])
               for g in rules["groups"] for r in g["rules"]]
    sources += [(f"dashboard {w}", e) for w, e in lib.grafana_exprs(
        json.loads(lib.DASHBOARD_FILE.read_text()))]
    unknown_records = []
    for where, expr in sources:
        metrics, records = lib.promql_names(expr)
        for m in metrics:
            named.setdefault(m, set()).add(where)
        unknown_records += [f"{where}: {r}" for r in records - recorded]
    assert not unknown_records, "recording rules that farcall.rules.yml lacks:\n" + \
        "\n".join(unknown_records)
    live = live_names(stack)
    missing = {m: sorted(w) for m, w in named.items()
               if not lib.name_is_exposed(m, live) and m not in ONLY_WITH}
    assert not missing, (
        "metrics the dashboard or the rules name that no live router or agent exports "
        "(a chart of a metric nobody exports is a bug):\n" +
        "\n".join(f"  {m}  (used by {', '.join(w[:3])}{', ...' if len(w) > 3 else ''})"
                  for m, w in sorted(missing.items())))
    print(f"{len(named)} metric names used, all exported")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
