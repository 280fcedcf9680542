"""The whole loop on the testbed, every part as in production (issue 14).

`Loop(tb, workdir).start()` runs, beside a fabric that is already up:

- **`c4 serve`** in the root namespace on the management gateway (SQLite in the work
  directory, probed hashing from the testbed's document: TCP to the shim's port);
- a **`c4-node-agent` per host**, inside the host's namespace (so `c4-testbed down` stops it
  after a crash), owning the shim's listen port and probing what the controller asks;
- **`c4-switch-agent`** in the root namespace, polling every switch's snmpd (the `linux`
  profile: IF-MIB plus the pass_persist extension's ECN marks) and posting to the controller;
- a **webhook receiver** standing in for the scheduler: an HTTP server on the management
  gateway registered with `POST /v1/webhooks`; every delivery's `X-C4-Signature` is checked
  against the secret (HMAC-SHA256 of the body) and kept with the verdict.

Jobs are posted as a scheduler posts them (`POST /v1/jobs`, scheduler token), and the
workload (`testbed.workload`) runs through the shim with each rank's `C4_AGENT_SOCKET` the
socket of its host's node agent. Processes are stopped by pid in `stop()`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from testbed.fabric import Testbed, TestbedError

SHIM_PORT_ECMP_OFFSET = 1  # plain-ECMP runs listen on the shim port + 1: the agent owns the shim port


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for(pred: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TestbedError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


@dataclass
class Delivery:
    event: str
    at_us: int
    data: dict[str, Any]
    signature_ok: bool
    received_s: float  # time.monotonic() when it arrived


class WebhookReceiver:
    """The scheduler's side of `POST /v1/webhooks`: keeps every delivery and whether its
    `X-C4-Signature` (sha256=<hex HMAC of the body>) matched the secret."""

    def __init__(self, host: str, secret: str) -> None:
        self.host, self.secret = host, secret
        self.port = free_port(host)
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/c4"

    def start(self) -> WebhookReceiver:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                want = "sha256=" + hmac.new(rec.secret.encode(), body, hashlib.sha256).hexdigest()
                ok = hmac.compare_digest(want, self.headers.get("X-C4-Signature", ""))
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {}
                with rec._lock:
                    rec.deliveries.append(Delivery(str(doc.get("event")), int(doc.get("at_us") or 0),
                                                   doc.get("data") or {}, ok, time.monotonic()))
                self.send_response(204 if ok else 401)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def events(self, event: str | None = None) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if event is None or d.event == event]


@dataclass
class LoopSettings:
    """What the whole loop runs with; short detector and poll periods keep scenarios short."""

    switch_interval_s: float = 1.0
    # The switch agent polls a target again this soon after a sample showing a port that may
    # have lost capacity (`AgentConfig.repoll_after_s`), twice (`repolls_per_interval`): the
    # controller confirms it on those two windows (0.7 s, `C4_CONGESTION_FAST_CONFIRM_SPAN_S`)
    # instead of the next poll. Over the snmpd extension's 0.15 s cache (`testbed.snmp`), as
    # is the 0.2 s a second re-poll leaves before the next cycle.
    switch_repoll_after_s: float = 0.35
    # How many re-polls in a row while the port still shows it (`AgentConfig.repolls_per_interval`).
    switch_repolls_per_interval: int = 2
    probe_interval_s: float = 1.0
    detector_interval_s: float = 0.5
    controller_env: dict[str, str] = field(default_factory=dict)
    # Where `c4 serve` listens: by default the management gateway on a free port. The demo
    # listens on 0.0.0.0:<port> (still reachable from the namespaces through the gateway).
    listen_host: str | None = None
    listen_port: int | None = None


class Loop:
    def __init__(self, tb: Testbed, workdir: Path, settings: LoopSettings | None = None) -> None:
        if not tb.is_up():
            raise TestbedError(f"testbed {tb.prefix} is not up")
        self.tb, self.workdir = tb, workdir
        self.settings = settings or LoopSettings()
        workdir.mkdir(parents=True, exist_ok=True)
        for old in workdir.glob("c4.db*"):  # every loop starts on a fresh database
            old.unlink()
        plan = tb.plan
        self.host = plan.mgmt_gateway
        self.listen = self.settings.listen_host or self.host
        self.port = self.settings.listen_port or free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"
        self.shim_port = plan.spec.shim_port
        self.admin = secrets.token_hex(16)
        self.env = {**os.environ, "C4_DATABASE_URL": f"sqlite:///{workdir / 'c4.db'}",
                    "C4_DATA_DIR": str(workdir), "C4_ADMIN_TOKEN": self.admin, "C4_LOG_LEVEL": "warning",
                    "C4_WEBHOOK_ALLOW_NETWORKS": plan.mgmt_net,
                    "C4_DETECTOR_INTERVAL_S": str(self.settings.detector_interval_s),
                    "C4_WEBHOOK_BACKOFF_S": "0.2",
                    **self.settings.controller_env}
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.admin}"}, timeout=30)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.sockets: dict[str, str] = {}
        self.webhooks = WebhookReceiver(self.host, secrets.token_hex(16))
        self.scheduler: httpx.Client | None = None
        self.timings: dict[str, float] = {}

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> Loop:
        t0 = time.monotonic()
        try:
            self._start_controller()
            self.timings["controller_s"] = time.monotonic() - t0
            r = self.http.put("/v1/topology", json=self.tb.doc())
            if r.status_code != 200:
                raise TestbedError(f"PUT /v1/topology: {r.status_code} {r.text[:300]}")
            agent_token, sched_token = self.token("agent"), self.token("scheduler")
            self.scheduler = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {sched_token}"},
                                          timeout=30)
            self.webhooks.start()
            r = self.scheduler.post("/v1/webhooks", json={
                "url": self.webhooks.url, "secret": self.webhooks.secret,
                "events": ["alarm.opened", "host.isolated", "job.restart_requested", "job.replanned"]})
            if r.status_code not in (200, 201):
                raise TestbedError(f"POST /v1/webhooks: {r.status_code} {r.text[:300]}")
            self._start_switch_agent(agent_token)
            self._start_node_agents(agent_token)
            self.timings["start_s"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in self.procs.values():  # all at once, then wait for each
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        self.webhooks.stop()

    def __enter__(self) -> Loop:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _log(self, name: str) -> Any:
        return (self.workdir / f"{name}.log").open("ab")

    def _start_controller(self) -> None:
        self.procs["controller"] = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "serve", "--host", self.listen, "--port", str(self.port)],
            env=self.env, stdout=self._log("controller"), stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, "the controller's /readyz")

    def _ready(self) -> bool:
        proc = self.procs["controller"]
        if proc.poll() is not None:
            raise TestbedError(f"c4 serve exited {proc.returncode}; see {self.workdir / 'controller.log'}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def token(self, role: str) -> str:
        out = subprocess.run([sys.executable, "-m", "controller.cli", "token", "create", "--role", role],
                             env=self.env, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def _start_switch_agent(self, token: str) -> None:
        lines = [f"interval_s = {self.settings.switch_interval_s}",
                 f"repoll_after_s = {self.settings.switch_repoll_after_s}",
                 f"repolls_per_interval = {self.settings.switch_repolls_per_interval}", 'listen = ""',
                 "[controller]", f'url = "{self.url}"', 'token_env = "C4_LOOP_AGENT_TOKEN"',
                 "[credentials.tb]", 'version = "2c"', 'community_env = "C4_LOOP_COMMUNITY"']
        for sw in self.tb.plan.switches:
            lines += ["[[targets]]", f'switch = "{sw.name}"', f'address = "{sw.mgmt_address}"',
                      'profile = "linux"', 'credentials = "tb"']
        cfg = self.workdir / "switch-agent.toml"
        cfg.write_text("\n".join(lines) + "\n")
        self.procs["switch-agent"] = subprocess.Popen(
            [sys.executable, "-m", "switch_agents.cli", "run", str(cfg), "--log-level", "warning"],
            env={**os.environ, "C4_LOOP_AGENT_TOKEN": token, "C4_LOOP_COMMUNITY": "public"},
            stdout=self._log("switch-agent"), stderr=subprocess.STDOUT)

    def _start_node_agents(self, token: str) -> None:
        for h in self.tb.plan.hosts:
            d = self.workdir / f"agent-{h.name}"
            d.mkdir(exist_ok=True)
            sock = str(d / "shim.sock")
            env = {"C4_AGENT_CONTROLLER": self.url, "C4_AGENT_TOKEN": token, "C4_AGENT_HOST": h.name,
                   "C4_AGENT_SOCKET": sock, "C4_AGENT_SPOOL": str(d / "spool"),
                   "C4_AGENT_SHIM_PORT": str(self.shim_port), "C4_AGENT_LISTEN": f"{h.mgmt_address}:9792",
                   "C4_AGENT_JOBS_POLL_S": "0.5", "C4_AGENT_BATCH_INTERVAL_S": "0.2",
                   "C4_AGENT_PROBE_INTERVAL_S": str(self.settings.probe_interval_s),
                   # leaf, spine, leaf, host: a 2-tier testbed's paths are 4 hops; probing on to
                   # the default 8 costs 4 more unanswered rounds for live 5-tuples (te.probes)
                   "C4_AGENT_PROBE_MAX_TTL": "4",
                   "C4_AGENT_LONG_POLL_S": "20", "C4_AGENT_LOG_LEVEL": "warning"}
            self.procs[f"agent-{h.name}"] = self.tb.popen(h.name, [sys.executable, "-m", "node_agent.cli"], env=env,
                                                          stdout=self._log(f"agent-{h.name}"),
                                                          stderr=subprocess.STDOUT)
            self.sockets[h.name] = sock
        for h in self.tb.plan.hosts:
            wait_for(functools.partial(self._agent_ready, h.name, h.mgmt_address), 60, f"node agent of {h.name}")

    def _agent_ready(self, host: str, addr: str) -> bool:
        proc = self.procs[f"agent-{host}"]
        if proc.poll() is not None:
            raise TestbedError(f"node agent of {host} exited {proc.returncode}; see {self.workdir}/agent-{host}.log")
        try:
            return bool(httpx.get(f"http://{addr}:9792/healthz", timeout=1).json().get("ready"))
        except (httpx.HTTPError, ValueError):
            return False

    def agent_health(self, host: str) -> dict[str, Any]:
        addr = self.tb.plan.host(host).mgmt_address
        return dict(httpx.get(f"http://{addr}:9792/healthz", timeout=5).json())

    # ---- jobs -------------------------------------------------------------------------------

    def post_job(self, name: str, hosts: list[str], pattern: str = "ring", channels: int = 2, qps: int = 1,
                 diagnosis: dict[str, Any] | None = None, timeout_s: float = 90,
                 rebalance: bool | None = None) -> dict[str, Any]:
        """Post a job as a scheduler does; wait until it is planned (from the agents' probes)
        and every agent of its hosts holds the plan. Returns the job."""
        assert self.scheduler is not None
        n = len(hosts)
        traffic: dict[str, Any] = {"pattern": pattern, "ranks": list(range(n)), "channels": channels,
                                   "qps_per_connection": qps}
        doc: dict[str, Any] = {"name": name, "ranks": [{"rank": r, "host": h, "nic": "mlx5_0"}
                                                      for r, h in enumerate(hosts)], "traffic": [traffic]}
        if diagnosis:
            doc["diagnosis"] = diagnosis
        if rebalance is not None:
            doc["rebalance"] = rebalance
        r = self.scheduler.post("/v1/jobs", json=doc)
        if r.status_code != 202:
            raise TestbedError(f"POST /v1/jobs {name}: {r.status_code} {r.text[:300]}")

        def planned() -> dict[str, Any] | None:
            job = self.http.get(f"/v1/jobs/{name}").json()
            return job if job["status"] != "pending" else None

        job = wait_for(planned, timeout_s, f"job {name} planned from the agents' probes", 0.2)
        if job["status"] != "planned":
            raise TestbedError(f"job {name}: {job['status']} {job.get('error')}")
        for h in sorted(set(hosts)):
            self._wait_follows(h, name)
        return dict(job)

    def _wait_follows(self, host: str, job: str) -> None:
        wait_for(lambda: job in self.agent_health(host).get("jobs", []), 20, f"{host}'s agent follows {job}")

    def delete_job(self, name: str) -> None:
        assert self.scheduler is not None
        self.scheduler.delete(f"/v1/jobs/{name}")

    def assignments(self, name: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{name}/assignments").json())

    def alarms(self, job: str | None = None) -> list[dict[str, Any]]:
        params = {"job": job} if job else {}
        return list(self.http.get("/v1/alarms", params=params).json()["alarms"])

    def release_all_hosts(self) -> None:
        for h in self.http.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"]:
            self.http.post(f"/v1/hosts/{h['name']}/release")
