"""The switch agent's tier against real SNMP agents: a controller served by uvicorn on
loopback, the agent as its own process (`python -m switch_agents.cli run`), and helpers to
write its configuration. snmpsim and Debian's snmpd are started by the tests themselves."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from controller.api.app import create_app
from controller.services.clock import now_us
from controller.settings import Settings
from controller.store import tokens_repo
from controller.store.db import transaction
from controller.store.migrate import upgrade
from tests.support.snmpsim import responder

ADMIN = "switch-agent-tier-admin"


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snmpsim_missing() -> str | None:
    if responder() is None:
        return "snmpsim is not installed (pip install -e '.[test]')"
    if shutil.which("snmpget") is None:
        return "net-snmp's snmpget is not installed (Debian package snmp)"
    return None


@pytest.fixture
def need_snmpsim() -> None:
    reason = snmpsim_missing()
    if reason:
        print(f"SKIP switch agent tier: {reason}")
        pytest.skip(reason)


@dataclass
class Controller:
    url: str
    agent_token: str
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    app: Any = None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

    def start(self, port: int) -> None:
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "controller did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)
        self.server = self.thread = None


def make_controller(tmp_path: Path, port: int | None = None, start: bool = True, **settings: Any) -> Controller:
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, admin_token=ADMIN, data_dir=tmp_path, **settings))
    rt = app.state.runtime
    with transaction(rt.sessions) as session:
        _, token = tokens_repo.create(session, "switch-agent", "agent", now_us())
    port = port or free_tcp_port()
    c = Controller(f"http://127.0.0.1:{port}", token, app=app)
    if start:
        c.start(port)
    return c


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = make_controller(tmp_path)
    yield c
    c.stop()


def agent_config(path: Path, targets: list[dict[str, Any]], controller: Controller | None, interval_s: float = 1.0,
                 listen_port: int | None = None, credentials: str = "", snmp_timeout_s: float = 0.5) -> Path:
    """Write a TOML configuration; `credentials` is extra TOML (the tier's v2c credentials
    `sim` read their community from $C4T_COMMUNITY_<SWITCH> via per-target entries)."""
    lines = [f"interval_s = {interval_s}", "concurrency = 8",
             f'listen = "127.0.0.1:{listen_port}"' if listen_port else 'listen = ""']
    if controller is not None:
        token = path.parent / "agent.token"
        token.write_text(controller.agent_token + "\n")
        lines += ["[controller]", f'url = "{controller.url}"', f'token_file = "{token}"', "timeout_s = 2",
                  "spool_max_age_s = 60"]
    lines += ["[snmp]", f"timeout_s = {snmp_timeout_s}", "retries = 1"]
    lines.append(credentials)
    for t in targets:
        lines.append("[[targets]]")
        for k, v in t.items():
            lines.append(f"{k} = {v!r}".replace("'", '"') if not isinstance(v, list) else f"{k} = {v}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class AgentProcess:
    proc: subprocess.Popen[str]
    log: Path

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def start_agent(config: Path, env: dict[str, str], *extra: str) -> AgentProcess:
    log = config.with_suffix(".log")
    handle = log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "switch_agents.cli", "run", str(config), "--log-level", "warning",
                             *extra], stdout=handle, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env})
    handle.close()
    return AgentProcess(proc, log)


def wait_for(condition: Any, timeout_s: float, what: str, step_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(step_s)
