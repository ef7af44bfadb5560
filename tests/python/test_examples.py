"""The examples the main job runs, run here too, so that they keep working."""

import os
import subprocess
import sys

from conftest import start_agent, start_router

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _run(*argv: str) -> str:
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_training_step_example_learns_through_a_router():
    agent = start_agent()
    router = start_router(agent)
    try:
        out = _run(os.path.join(EXAMPLES, "jax_training_step.py"), f"--target={router.address}")
        assert "learned w" in out
    finally:
        assert router.stop() == 0
        assert agent.stop() == 0


def test_the_mlp_example_survives_its_agent_killed_mid_run():
    out = _run(os.path.join(EXAMPLES, "jax_mlp.py"), "--steps=60")
    assert "agent killed; a new one starts" in out
    assert "median step:" in out


def test_the_resident_example_recovers_its_residual_from_a_snapshot():
    out = _run(os.path.join(EXAMPLES, "jax_resident.py"), "--steps=40", "--kill_at=15")
    assert "resident lost with its agent; restored the snapshot of step 10" in out
    assert "every output equals the in-process computation" in out
