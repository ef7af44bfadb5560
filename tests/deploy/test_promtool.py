"""promtool on deploy/prometheus/: check config, check rules and test rules,
and every alert has a unit test where it fires and one where it does not.

Run: .venv/bin/python -m pytest -q tests/deploy/test_promtool.py
  (or .venv/bin/python tests/deploy/test_promtool.py)
promtool comes from Debian's prometheus package (scripts/install_deps.sh).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

HINT = "apt-get install prometheus (scripts/install_deps.sh)"
TESTS_FILE = lib.PROMETHEUS_DIR / "farcall.rules.test.yml"


def promtool(*args: str) -> str:
    tool = lib.require_tool("promtool", HINT)
    r = subprocess.run([tool, *args], cwd=lib.PROMETHEUS_DIR, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    print(out)
    return out


def test_check_config():
    out = promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in out


def test_check_rules():
    out = promtool("check", "rules", "farcall.rules.yml")
    assert "SUCCESS" in out


def test_rules_unit_tests():
    out = promtool("test", "rules", TESTS_FILE.name)
    assert "SUCCESS" in out


def test_every_alert_has_a_firing_and_a_quiet_case():
    yaml = lib.require_module("yaml", "pip install -r python/requirements-dev.txt")
    rules = yaml.safe_load(lib.RULES_FILE.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(TESTS_FILE.read_text())
    assert tests["rule_files"] == [lib.RULES_FILE.name]
    fires, quiet = set(), set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
    assert alerts - fires == set(), f"alerts with no test where they fire: {sorted(alerts - fires)}"
    assert alerts - quiet == set(), f"alerts with no test where they stay quiet: {sorted(alerts - quiet)}"
    assert (fires | quiet) <= alerts, f"tests of unknown alerts: {sorted((fires | quiet) - alerts)}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
