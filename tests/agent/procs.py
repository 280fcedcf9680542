"""Real processes for the node agent's tests: `c4 serve` on SQLite, `c4-node-agent`, and the
shim's C driver (`fake_nccl job`), each started as users start them and stopped by pid.

Nothing here is a fake of the controller or the agent: the tests talk HTTP to the real
controller and the shim talks to the real agent over its Unix socket.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from controller.domain import coll_packed
from node_agent import packed
from testbed import loop

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "nccl_shim"
LIB = SHIM / "build" / "libnccl-net-c4.so"
FAKE_NCCL = SHIM / "build" / "fake_nccl"
ADMIN = "t11-admin-token"


def free_port() -> int:
    return loop.free_port("127.0.0.1")


def wait_for(pred: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.05) -> Any:
    return loop.wait_for(pred, timeout_s, what, every_s)


def build_shim() -> None:
    out = subprocess.run(["make", "-C", str(SHIM), "build/libnccl-net-c4.so", "build/fake_nccl"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def _batch(body: bytes) -> dict[str, Any]:
    """A posted batch in the JSON form (a packed one decoded as the controller decodes it)."""
    if not packed.is_packed(body):
        return dict(json.loads(body))
    header, start = coll_packed.decode_header(body)
    shapes = [coll_packed.shape(s) for s in header["shapes"]]
    return {"host": header["host"], "records": [packed.as_dict(r, True)
                                                for r in coll_packed.records(body, start, shapes)]}


class Recorder:
    """A transparent HTTP proxy in front of the controller that keeps every telemetry batch
    the controller accepted (2xx), so tests can see exactly which records arrived. It adds no
    behaviour: requests and answers pass through unchanged, and while the controller is
    stopped the recorder is stopped too (the agent then sees a refused connection)."""

    def __init__(self, upstream: str, host: str, port: int) -> None:
        self.upstream, self.host, self.port = upstream, host, port
        self.accepted: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.packed = 0  # accepted batches posted in the packed form
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                try:
                    r = httpx.request(self.command, rec.upstream + self.path, content=body,
                                      headers=headers, timeout=90)
                    status, data, ctype = r.status_code, r.content, r.headers.get("content-type", "")
                except httpx.HTTPError:
                    status, data, ctype = 502, b"{}", "application/json"
                if self.command == "POST" and self.path.startswith("/v1/telemetry/collectives"):
                    with rec._lock:
                        rec.statuses.append(status)
                        if 200 <= status < 300:
                            rec.accepted.append(_batch(body))
                            rec.packed += packed.is_packed(body)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype or "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the agent went away (a long-poll it cancelled)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *_: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for batch in self.accepted for r in batch.get("records", [])]


class Controller:
    """`c4 serve` with its own SQLite file and an admin token, on a free loopback port, behind
    a `Recorder` at `url` (the address agents are given)."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", netns: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir, self.host = workdir, host
        self.port = free_port()
        self.front = free_port()
        self.url = f"http://{host}:{self.front}"
        self.recorder = Recorder(f"http://{host}:{self.port}", host, self.front)
        self.db = workdir / "c4.db"
        self.env = {**os.environ, "C4_DATABASE_URL": f"sqlite:///{self.db}",
                    "C4_DATA_DIR": str(workdir), "C4_ADMIN_TOKEN": ADMIN, "C4_LOG_LEVEL": "warning",
                    **(env or {})}
        self.netns = netns or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=f"http://{host}:{self.port}",
                                 headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    def start(self) -> Controller:
        log = (self.workdir / "controller.log").open("ab")
        self.proc = subprocess.Popen(
            [*self.netns, sys.executable, "-m", "controller.cli", "serve", "--host", self.host,
             "--port", str(self.port)], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, "the controller's /readyz")
        self.recorder.start()
        return self

    def _ready(self) -> bool:
        try:
            return httpx.get(f"http://{self.host}:{self.port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: a graceful stop (uvicorn waits for open requests); SIGKILL: a crash."""
        self.recorder.stop()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def token(self, role: str = "agent") -> str:
        out = subprocess.run([sys.executable, "-m", "controller.cli", "token", "create", "--role",
                              role], env=self.env, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def records(self) -> list[dict[str, Any]]:
        """Every collective record the controller accepted so far."""
        return self.recorder.records()

    def set_weights(self, job: str, weights: dict[tuple[int, int, int, int], float]
                    ) -> tuple[int, int]:
        """Change flows' weights and bump the job's version in the controller's own database,
        as the controller's load balancing does (API.md: `weight`, `version`); returns the new
        version and the time of the commit (µs). The controller serves the new version to
        long-polls like any other change."""
        from sqlalchemy import select
        from sqlalchemy.orm import sessionmaker

        from controller.store.db import make_engine, transaction
        from controller.store.tables import FlowRow, JobRow

        engine = make_engine(f"sqlite:///{self.db}")
        try:
            with transaction(sessionmaker(engine)) as session:
                row = session.scalar(select(JobRow).where(JobRow.name == job))
                assert row is not None
                for f in session.scalars(select(FlowRow).where(FlowRow.job_id == row.id)):
                    key = (f.src_rank, f.dst_rank, f.channel, f.qp)
                    if key in weights:
                        f.weight = weights[key]
                row.version += 1
                version = int(row.version)
            return version, time.time_ns() // 1000
        finally:
            engine.dispose()


class Agent:
    """One `c4-node-agent` process for one host; in that host's network namespace when
    `netns` is given (`ip netns exec <ns>`), its /healthz and /metrics then on `http_host`."""

    def __init__(self, workdir: Path, controller_url: str, token: str, host: str,
                 shim_port: int = 0, netns: list[str] | None = None, http_host: str = "127.0.0.1",
                 http_port: int = 0, **settings: Any) -> None:
        self.workdir = workdir / f"agent-{host}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.workdir / "shim.sock")
        self.http_host = http_host
        self.metrics_port = http_port or free_port()
        self.netns = netns or []
        self.env = {**os.environ, "C4_AGENT_CONTROLLER": controller_url, "C4_AGENT_TOKEN": token,
                    "C4_AGENT_HOST": host, "C4_AGENT_SOCKET": self.socket,
                    "C4_AGENT_SPOOL": str(self.workdir / "spool"),
                    "C4_AGENT_SHIM_PORT": str(shim_port),
                    "C4_AGENT_LISTEN": f"{http_host}:{self.metrics_port}",
                    "C4_AGENT_JOBS_POLL_S": "0.5", "C4_AGENT_BATCH_INTERVAL_S": "0.2",
                    "C4_AGENT_PROBE_INTERVAL_S": "0", "C4_AGENT_LOG_LEVEL": "info"}
        self.env.update({f"C4_AGENT_{k.upper()}": str(v) for k, v in settings.items()})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Agent:
        self.log = self.workdir / "agent.log"
        self.proc = subprocess.Popen([*self.netns, sys.executable, "-m", "node_agent.cli"],
                                     env=self.env, stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(self.socket), 30, f"agent socket {self.socket}")
        return self

    def terminate(self) -> None:
        """SIGTERM without waiting (stop several agents at once, then `stop` each)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def health(self) -> dict[str, Any]:
        return httpx.get(f"http://{self.http_host}:{self.metrics_port}/healthz", timeout=5).json()

    def metrics(self) -> str:
        return httpx.get(f"http://{self.http_host}:{self.metrics_port}/metrics", timeout=5).text

    def metric(self, name: str, labels: str = "") -> float:
        want = f"{name}{{{labels}}}" if labels else name
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(want + " ") or (not labels and line.startswith(name + "{")):
                total += float(line.rsplit(" ", 1)[1])
        return total


def run_job(env: dict[str, str], collectives: int = 3, timeout_s: float = 60
            ) -> dict[int, list[tuple[int, int]]]:
    """`fake_nccl job`: two ranks through the shim; each job rank's data sockets as
    (local port, remote port)."""
    out = subprocess.run([str(FAKE_NCCL), str(LIB), "job", str(collectives)],
                         env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=timeout_s, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {d["rank"]: [tuple(p) for p in d["sockets"]] for d in lines}


def start_live(env: dict[str, str], seconds: float, size: int, period_ms: int
               ) -> tuple[subprocess.Popen[str], list[dict[str, Any]]]:
    """`fake_nccl live` in the background; its per-message lines collect in the list."""
    proc = subprocess.Popen([str(FAKE_NCCL), str(LIB), "live", str(seconds), str(size),
                             str(period_ms)], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                lines.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def split_changed_at(lines: list[dict[str, Any]], ports: list[int], want: list[float],
                     after_us: int, tol: float = 0.05, runs: int = 2,
                     key: str = "written") -> int | None:
    """Time (µs) of the first message after `after_us` whose bytes over `ports` split as
    `want`, and so do the `runs` - 1 messages after it. `key` "written": the bytes the shim
    wrote into each socket for the message (the weights it applied); "socks": the bytes the
    peer acknowledged meanwhile (the wire, lagging by whatever the sockets had queued). Both
    are the kernel's per-socket counts (TCP_INFO), not the shim's word."""
    streak: list[int] = []
    for line in lines:
        if line["t_us"] < after_us:
            continue
        by_port = dict((p, b) for p, b in line[key])
        total = sum(by_port.get(p, 0) for p in ports)
        if total and all(abs(by_port.get(p, 0) / total - w) <= tol
                         for p, w in zip(ports, want, strict=True)):
            streak.append(int(line["t_us"]))
            if len(streak) == runs:
                return streak[0]
        else:
            streak = []
    return None
