"""PUT then GET a generated clos3 fabric (4,096 dual-port hosts) through a real uvicorn server.

Run: `.venv/bin/python -m bench.topology [--database-url URL] [--repeat N]`.
Prints PUT, GET (cached in the serving process) and GET from a freshly started server
(loads the fabric from the database), against the targets PUT <= 5 s and GET <= 2 s.
Default database: a fresh SQLite file in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from controller.topology.document import to_document
from controller.topology.generate import Clos3Spec, clos3

SPEC = Clos3Spec(pods=8, leaves_per_pod=16, spines_per_pod=8, cores=16, hosts_per_leaf=32)
TOKEN = "bench-admin"
TARGET_PUT_S, TARGET_GET_S = 5.0, 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "C4_DATA_DIR": tmp, "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning"}
        if args.database_url:
            env["C4_DATABASE_URL"] = args.database_url
        fabric = clos3(SPEC)
        body = json.dumps(to_document(fabric)).encode()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        hosts = len(fabric.hosts)
        ports = sum(len(n.ports) for h in fabric.hosts for n in h.nics)
        print(f"fabric: clos3 {SPEC.pods} pods x {SPEC.leaves_per_pod} leaves, {len(fabric.switches)} switches, "
              f"{hosts} hosts, {ports} host ports, {len(fabric.links)} links incl. host links; "
              f"document {len(body) / 1e6:.1f} MB; database {'PostgreSQL' if args.database_url else 'SQLite'}")
        puts, gets, cold = [], [], []
        proc, url = _serve(env)
        try:
            with httpx.Client(timeout=120) as http:
                for _ in range(args.repeat):
                    t, r = _timed(lambda: http.put(f"{url}/v1/topology", content=body, headers=headers))
                    r.raise_for_status()
                    puts.append(t)
                    t, r = _timed(lambda: http.get(f"{url}/v1/topology", headers=headers))
                    r.raise_for_status()
                    assert len(r.json()["hosts"]) == hosts
                    gets.append(t)
        finally:
            proc.terminate()
            proc.wait()
        for _ in range(args.repeat):
            proc, fresh_url = _serve(env)
            try:
                t, r = _timed(lambda u=fresh_url: httpx.get(f"{u}/v1/topology", headers=headers, timeout=120))
                r.raise_for_status()
                cold.append(t)
            finally:
                proc.terminate()
                proc.wait()
    rows = [("PUT /v1/topology", puts, TARGET_PUT_S), ("GET (served from the process cache)", gets, TARGET_GET_S),
            ("GET (fresh server, loaded from the database)", cold, TARGET_GET_S)]
    print(f"{'operation':<48}{'median s':>10}{'max s':>10}{'target s':>10}  verdict")
    for name, times, target in rows:
        verdict = "ok" if max(times) <= target else "MISSED"
        print(f"{name:<48}{statistics.median(times):>10.3f}{max(times):>10.3f}{target:>10.1f}  {verdict}")


if __name__ == "__main__":
    main()
