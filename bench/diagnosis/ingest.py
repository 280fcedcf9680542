"""Telemetry ingest throughput over HTTP: one `c4 serve` worker on SQLite, batches of 500.

Run: `.venv/bin/python -m bench.diagnosis.ingest [--records N] [--clients K]`.
Records come from the C4D simulator (64 ranks, ring AllReduce with per-peer progress and
`net_us`; per-flow progress left out, as before), are
serialised once, and posted back to back over keep-alive connections by K client threads;
the figure is accepted records per second of wall time (target >= 20,000/s), with the
detector worker running in the server as in production.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import httpx

from controller.diagnosis.simulator import SimConfig, simulate
from controller.services.clock import now_us
from controller.store.db import make_engine, make_sessions, transaction
from controller.store.migrate import upgrade
from controller.store.tables import JobRow
from controller.topology.document import to_document
from controller.topology.generate import LeafSpineSpec, leaf_spine

TOKEN = "bench-admin"
BATCH = 500
TARGET_RECORDS_PER_S = 20_000


def _record_json(rec: Any) -> dict[str, Any]:
    return {"job": rec.job, "comm": rec.comm, "rank": rec.rank, "nranks": rec.nranks, "op": rec.op, "seq": rec.seq,
            "bytes": rec.bytes, "t_start_us": rec.t_start_us, "t_end_us": rec.t_end_us,
            "peers": [{"peer": p.peer, "dir": p.dir, "bytes": p.bytes, "t_first_us": p.t_first_us,
                       "t_last_us": p.t_last_us, "done": p.done, "net_us": p.net_us} for p in rec.peers]}


def _batches(total: int) -> list[bytes]:
    duration_s = 60.0
    records: list[Any] = []
    while len(records) < total:
        run = simulate(SimConfig(job="bench", nranks=64, duration_s=duration_s, start_us=now_us() - int(duration_s * 1e6),
                                 seed=len(records) + 1))
        records += [d.record for d in run.deliveries]
    records = records[:total]
    by_host: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_host.setdefault(rec.host, []).append(_record_json(rec))
    out = []
    for host, recs in sorted(by_host.items()):
        for i in range(0, len(recs), BATCH):
            out.append(json.dumps({"host": host, "records": recs[i:i + BATCH]}).encode())
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    batches = _batches(args.records)
    n_records = sum(len(json.loads(b)["records"]) for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        url_db = f"sqlite:///{tmp}/c4.db"
        upgrade(url_db)
        env = {**os.environ, "C4_DATABASE_URL": url_db, "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning",
               "C4_AUTO_ISOLATE": "false"}
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port), "--workers", "1"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=8, ports_per_nic=1))
            httpx.put(f"{base}/v1/topology", json=to_document(fabric), headers=headers, timeout=60).raise_for_status()
            engine = make_engine(url_db)
            spec = {"name": "bench", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(64)]}
            with transaction(make_sessions(engine)) as s:
                s.add(JobRow(name="bench", spec=spec, status="planned", version=1, created_at_us=now_us(),
                             updated_at_us=now_us()))
            engine.dispose()
            errors: list[str] = []
            chunks = [batches[i::args.clients] for i in range(args.clients)]

            def post_all(mine: list[bytes]) -> None:
                with httpx.Client(timeout=60) as http:
                    for body in mine:
                        r = http.post(f"{base}/v1/telemetry/collectives", content=body, headers=headers)
                        if r.status_code != 202:
                            errors.append(f"{r.status_code} {r.text[:200]}")

            start = time.perf_counter()
            threads = [threading.Thread(target=post_all, args=(c,)) for c in chunks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            time.sleep(2.5)  # let the detector worker drain the queue once more
            metrics = httpx.get(f"{base}/metrics", timeout=10).text
            ready = httpx.get(f"{base}/readyz", timeout=10).json()
        finally:
            proc.terminate()
            proc.wait()
    if errors:
        raise SystemExit(f"{len(errors)} batches refused, first: {errors[0]}")
    window = next((line.split()[-1] for line in metrics.splitlines() if line.startswith("c4_diagnosis_window_records ")), "?")
    rate = n_records / elapsed
    print(f"records {n_records} in {len(batches)} batches of <= {BATCH}, {args.clients} client threads, "
          f"1 uvicorn worker, SQLite")
    print(f"{'ingest records/s':<28}{rate:>12,.0f}   target >= {TARGET_RECORDS_PER_S:,}  "
          f"{'ok' if rate >= TARGET_RECORDS_PER_S else 'MISSED'}")
    print(f"{'elapsed s':<28}{elapsed:>12.2f}")
    print(f"{'records in detector windows':<28}{window:>12}   (bounded by window_collectives per comm)")
    print(f"{'detector worker':<28}{ready['checks'].get('worker:detectors', '?'):>12}")


if __name__ == "__main__":
    main()
