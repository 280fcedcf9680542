"""docker-compose.yml cannot run here (no Docker engine); check what can be checked:
the services, their start-up order by healthchecks, and that every command exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_orders_start_up_by_health_and_runs_real_commands() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "migrate", "controller"} <= set(services)
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["controller"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["controller"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for name in ("migrate", "controller"):
        command = services[name]["command"]
        assert command[0] == "c4"
        assert services[name]["environment"]["C4_DATABASE_URL"].startswith("postgresql+psycopg://")
        out = subprocess.run([sys.executable, "-m", "controller.cli", command[1], "--help"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        for flag in (c for c in command[2:] if c.startswith("--")):
            assert flag in out.stdout, f"{name}: c4 {command[1]} has no {flag}"
    assert (ROOT / "Dockerfile").exists()
