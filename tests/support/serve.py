"""A real `c4 serve` process (uvicorn as users run it) on a free loopback port, SQLite in a
temporary folder, and its memory as the kernel counts it: for the fuzz tier, the shutdown
test and bench.hardening."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

TOKEN = "serve-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` now (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class RssSampler:
    """Samples a process's RSS every `period_s` in a thread; `peak` is the largest seen."""

    pid: int
    period_s: float = 0.05
    peak: int = 0
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = rss_bytes(self.pid)
            self.samples.append(rss)
            self.peak = max(self.peak, rss)
            self._stop.wait(self.period_s)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self, timeout_s: float = 30.0) -> float:
        """SIGTERM, then wait; returns how long the process took to exit (kills it past the timeout)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return time.monotonic() - start


@contextmanager
def served(tmp: Path, **settings: str) -> Iterator[Served]:
    """`c4 serve` with `C4_*` settings (`max_fabric_links="20000"` -> `C4_MAX_FABRIC_LINKS`);
    SQLite in `tmp` unless `database_url=` names another database."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "C4_DATABASE_URL"}
    env.update({"C4_DATA_DIR": str(tmp), "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning",
                **{f"C4_{k.upper()}": v for k, v in settings.items()}})
    log = tmp / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    server = Served(proc, url, TOKEN, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"c4 serve exited: {log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "c4 serve did not become ready in 90 s"
            time.sleep(0.2)
        yield server
    finally:
        server.stop()
