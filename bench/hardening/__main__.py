"""Issue 17's targets, measured on real `c4 serve` processes (uvicorn, SQLite, one worker):

1. memory: what an unauthenticated 500 MB upload costs the server (RSS sampled every 10 ms):
   declared with `Content-Length` and streamed to the end, and chunked without a length;
2. isolation: `/healthz` latency (p50/p99/max, a probe every 20 ms from a process of its own)
   while nothing runs, while a 100k-host fabric PUT is processed, and while maximal telemetry
   batches are (at every bound: 16 MiB, 10,000 records, 65,536 peers), with the server's RSS
   peak during each;
3. fuzz: schemathesis over every operation (tests/support/fuzz.py) with more cases than the
   test tier, the server's RSS peak over the whole run.

Run: `.venv/bin/python -m bench.hardening [--only memory,isolation,fuzz] [--max-examples N]`.
Targets: < 10 MB for (1); p99 <= 100 ms for (2); >= 2,000 cases, 0 server errors, 0
undocumented statuses, RSS under the documented bound for (3).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from controller.topology.document import to_document
from controller.topology.generate import LeafSpineSpec, leaf_spine
from tests.support import fuzz
from tests.support.serve import RssSampler, rss_bytes, served

MB = 1_000_000
UPLOAD = 500 * MB
FUZZ_RSS_BOUND = 768 << 20


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


# --- 1. memory of an unauthenticated upload --------------------------------------------------


def _upload(port: int, head: bytes, chunked: bool) -> tuple[int, str]:
    """Send `head` and then up to 500 MB of body as fast as the server takes it; returns the
    bytes the server took before it closed and its status line."""
    sent = 0
    block = b"x" * 65536
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        s.settimeout(5)
        try:
            while sent < UPLOAD:
                if chunked:
                    s.sendall(b"10000\r\n" + block + b"\r\n")
                else:
                    s.sendall(block)
                sent += len(block)
        except OSError:
            pass  # the server answered and closed: the rest is never read
        try:
            answer = s.recv(4096).split(b"\r\n", 1)[0].decode()
        except OSError:
            answer = "(connection reset after the answer)"
    return sent, answer


def memory(tmp: Path) -> None:
    print("\n## memory: an unauthenticated 500 MB upload (target: < 10 MB of server RSS)")
    print(f"{'request':58} {'client sent':>12} {'answer':>34} {'RSS before':>11} {'peak':>11} {'growth':>9}")
    with served(tmp / "memory") as server:
        port = int(server.url.rsplit(":", 1)[1])
        for _ in range(20):  # warm: the first requests allocate what every request reuses
            httpx.get(f"{server.url}/healthz")
            httpx.put(f"{server.url}/v1/topology", content=b"{}", headers={"Content-Type": "application/json"})
        cases = [
            ("PUT /v1/topology, Content-Length: 500000000, streamed",
             b"PUT /v1/topology HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n" % UPLOAD, False),
            ("PUT /v1/topology, Content-Length: 60000000 (under the cap)",
             b"PUT /v1/topology HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 60000000\r\n\r\n", False),
            ("POST /v1/telemetry/collectives, chunked, bad token",
             b"POST /v1/telemetry/collectives HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Authorization: Bearer forged\r\nTransfer-Encoding: chunked\r\n\r\n", True),
        ]
        for label, head, chunked in cases:
            time.sleep(0.5)
            before = rss_bytes(server.proc.pid)
            with RssSampler(server.proc.pid, period_s=0.01) as rss:
                sent, answer = _upload(port, head, chunked)
                time.sleep(0.3)
            print(f"{label:58} {sent / MB:>9.1f} MB {answer[:34]:>34} {_mib(before):>11} {_mib(rss.peak):>11} "
                  f"{_mib(rss.peak - before):>9}")


# --- 2. /healthz while heavy work runs ---------------------------------------------------------


class Prober:
    """`bench.hardening.probe` in a process of its own; `latencies` in seconds once exited."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies: list[float] = []

    def __enter__(self) -> Prober:
        self._proc = subprocess.Popen([sys.executable, "-m", "bench.hardening.probe", self.url],
                                      stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *_: object) -> None:
        self._proc.send_signal(signal.SIGTERM)
        out, _ = self._proc.communicate(timeout=120)
        self.latencies = json.loads(out.strip().splitlines()[-1])

    def row(self, label: str, took_s: float, peak: int, status: str) -> str:
        lat = sorted(self.latencies) or [0.0]
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        return (f"{label:52} {status:>6} {took_s:>7.1f} s {len(lat):>6} {p(0.5):>7.1f} {p(0.99):>7.1f} "
                f"{lat[-1] * 1000:>7.1f} {_mib(peak):>10}")


def _fabric_100k() -> bytes:
    spec = LeafSpineSpec(leaves=1000, spines=16, hosts_per_leaf=100, nics_per_host=1, ports_per_nic=2,
                         name="hundred-k")
    return json.dumps(to_document(leaf_spine(spec)), separators=(",", ":")).encode()


def _telemetry_batch(hosts: list[str]) -> tuple[bytes, dict[str, Any]]:
    """A batch as heavy as POST /v1/telemetry/collectives takes: records of 4 peers with a flow
    each, added while the batch stays within 16,384 peer entries and the route's 4 MiB."""
    from controller.api.schemas.telemetry import MAX_BATCH_PEERS

    def record(i: int) -> dict[str, Any]:
        rank = i % 64
        return {"job": "bench-ring", "comm": "0x7f3a9c01", "rank": rank, "nranks": 64, "op": "AllReduce",
                "seq": i // 64, "bytes": 268435456, "t_start_us": 1_764_430_000_000_000,
                "t_end_us": 1_764_430_000_180_000,
                "peers": [{"peer": (rank + k) % 64, "dir": "send", "bytes": 1 << 20,
                           "t_first_us": 1_764_430_000_001_000, "t_last_us": 1_764_430_000_179_000,
                           "done": True, "flows": [{"sport": 49152 + k, "bytes": 1 << 20, "t_last_us": None}]}
                          for k in range(1, 5)]}

    records: list[dict[str, Any]] = []
    size = 64
    while (len(records) + 1) * 4 <= MAX_BATCH_PEERS:
        item = record(len(records))
        grown = size + len(json.dumps(item, separators=(",", ":"))) + 1
        if grown > 4 << 20:
            break
        records.append(item)
        size = grown
    body = json.dumps({"host": hosts[0], "records": records}, separators=(",", ":")).encode()
    return body, {"records": len(records), "peers": 4 * len(records)}


def isolation(tmp: Path) -> None:
    print("\n## isolation: /healthz while heavy work runs (target: p99 <= 100 ms)")
    print(f"{'while':52} {'answer':>6} {'took':>9} {'probes':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'RSS peak':>10}")
    body = _fabric_100k()
    with served(tmp / "isolation") as server:
        headers = {**server.headers, "Content-Type": "application/json"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=900) as http:
            with Prober(server.url) as idle, RssSampler(server.proc.pid) as rss:
                time.sleep(5)
            print(idle.row("nothing (5 s)", 5.0, rss.peak, "-"))
            with Prober(server.url) as probe, RssSampler(server.proc.pid) as rss:
                start = time.perf_counter()
                r = http.put("/v1/topology", content=body)
                took = time.perf_counter() - start
            print(probe.row(f"PUT of 100,000 hosts ({len(body) / MB:.0f} MB)", took, rss.peak, str(r.status_code)))
            assert r.status_code == 200, r.text[:300]
            time.sleep(2)
            # Telemetry needs a job: a 64-rank ring on the first hosts of the fabric.
            hosts = [f"host{i}" for i in range(64)]
            job = {"name": "bench-ring", "ranks": [{"rank": i, "host": h, "nic": "mlx5_0"} for i, h in enumerate(hosts)],
                   "traffic": [{"pattern": "ring", "ranks": list(range(64))}]}
            http.post("/v1/jobs", content=json.dumps(job)).raise_for_status()
            batch, shape = _telemetry_batch(hosts)
            for round_ in range(3):
                with Prober(server.url) as probe, RssSampler(server.proc.pid) as rss:
                    start = time.perf_counter()
                    r = http.post("/v1/telemetry/collectives", content=batch)
                    took = time.perf_counter() - start
                label = (f"telemetry batch {round_ + 1}/3 ({len(batch) / 2**20:.1f} MiB, "
                         f"{shape['records']} rec, {shape['peers']} peers)")
                print(probe.row(label, took, rss.peak, str(r.status_code)))


# --- 3. fuzz ---------------------------------------------------------------------------------


def fuzz_run(tmp: Path, max_examples: int) -> None:
    print("\n## fuzz: schemathesis over every operation (targets: >= 2,000 cases, 0 failures, RSS bound)")
    workdir = tmp / "fuzz"
    workdir.mkdir()
    with served(workdir, **fuzz.FUZZ_SETTINGS) as server, RssSampler(server.proc.pid) as rss:
        run = fuzz.run(server, workdir, max_examples)
    ops = run.report["operations"]
    print(f"cases {run.cases}, operations {ops['tested']}/{ops['total']}, failures {len(run.failures)}, "
          f"errors {len(run.errors)}, seed {fuzz.SEED}, max-examples {max_examples}, {run.wall_s:.0f} s; "
          f"server RSS peak {_mib(rss.peak)} (bound {_mib(FUZZ_RSS_BOUND)}); settings {fuzz.FUZZ_SETTINGS}")
    for failure in run.failures:
        print("  failure:", failure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="memory,isolation,fuzz")
    parser.add_argument("--max-examples", type=int, default=15)
    args = parser.parse_args()
    parts = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="c4-bench-hardening-") as tmp:
        root = Path(tmp)
        for name in ("memory", "isolation"):
            (root / name).mkdir()
        if "memory" in parts:
            memory(root)
        if "isolation" in parts:
            isolation(root)
        if "fuzz" in parts:
            fuzz_run(root, args.max_examples)


if __name__ == "__main__":
    main()
