"""docker-compose.yml cannot run here (no Docker engine); check what can be checked: the
services issue 18 names, their start-up order by healthchecks, that every command exists in
the image (a console script of pyproject.toml, or snmpsim's) and takes the flags given, that
every mounted file exists and the switch agent accepts its configuration, and that the
Dockerfile copies what exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _compose() -> dict:  # type: ignore[type-arg]
    doc: dict = yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[type-arg]  # merge keys (<<) resolved
    return doc


def _help(script: str, args: list[str], strict: bool = True) -> str:
    exe = BIN / script
    assert exe.exists(), f"{script} is not installed by pip install -e . (a console script of pyproject?)"
    out = subprocess.run([str(exe), *args, "--help"], capture_output=True, text=True, timeout=60)
    if strict:  # (snmpsim prints its help on stderr and exits 1)
        assert out.returncode == 0, out.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def test_compose_orders_start_up_by_health() -> None:
    services = _compose()["services"]
    assert {"postgres", "migrate", "controller-1", "controller-2", "snmpsim", "switch-agent", "hosts"} <= set(services)
    assert "healthcheck" in services["postgres"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("controller-1", "controller-2"):
        svc = services[name]
        assert "healthcheck" in svc and "/readyz" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert svc["environment"]["C4_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert svc["environment"]["C4_DATABASE_URL"] == services["migrate"]["environment"]["C4_DATABASE_URL"]
    assert services["controller-1"]["ports"] != services["controller-2"]["ports"]
    assert services["switch-agent"]["depends_on"]["controller-1"]["condition"] == "service_healthy"
    assert {"controller-1", "controller-2"} <= set(services["hosts"]["depends_on"])


def test_every_command_exists_and_takes_its_flags() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, svc in _compose()["services"].items():
        if "build" not in svc:
            continue  # postgres: an image of its own
        command = svc["command"]
        exe = command[0]
        if exe == "snmpsim-command-responder":
            if shutil.which(exe) is None and not (BIN / exe).exists():
                raise AssertionError("snmpsim is not installed (the Dockerfile and .[test] install it)")
            assert "snmpsim" in (ROOT / "Dockerfile").read_text()
            text = _help(exe, [], strict=False)
            for flag in (c.split("=")[0] for c in command[1:]):
                assert flag in text, f"{name}: {exe} has no {flag}"
            continue
        assert exe in scripts, f"{name}: {exe} is not a console script of pyproject.toml"
        sub = [c for c in command[1:] if not c.startswith("-")][:1]
        text = _help(exe, sub)
        for flag in (c for c in command[2:] if c.startswith("--")):
            assert flag in text, f"{name}: {exe} {sub[0]} has no {flag}"


def test_mounted_files_exist_and_the_switch_agent_accepts_its_configuration() -> None:
    services = _compose()["services"]
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source} is missing"
    assert list((ROOT / "deploy/compose/snmpsim").glob("*.snmprec")), "snmpsim serves no data file"
    agent = services["switch-agent"]
    mount = next(v for v in agent["volumes"] if v.endswith(agent["command"][-1] + ":ro"))
    env = {**os.environ, **{k: str(v) for k, v in agent["environment"].items() if "${" not in str(v)},
           "C4_ADMIN_TOKEN": "x"}
    out = subprocess.run([str(BIN / "c4-switch-agent"), "check-config", str(ROOT / mount.split(":")[0])],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    # the community is the snmprec file's base name (snmpsim's rule)
    community = agent["environment"]["C4_SNMP_COMMUNITY"]
    assert (ROOT / "deploy/compose/snmpsim" / f"{community}.snmprec").exists()


def test_dockerfile_copies_what_exists() -> None:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies a missing {source}"
