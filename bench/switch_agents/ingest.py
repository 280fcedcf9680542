"""Controller side of switch telemetry: what one poll cycle of a whole fabric costs to ingest.

    .venv/bin/python -m bench.switch_agents.ingest [--database-url URL] [--cycles 8]

A generated leaf-spine fabric of 96 switches x 64 linked ports (64 leaves with 32 uplinks and
32 hosts each, 32 spines; 6,144 switch ports) gets one `POST /v1/telemetry/switches` per
10-second cycle with every switch's counters (the agent's batch), through the real app
(validation, rates, link directions, the congestion detector, the database writes). Prints
the wall time per cycle (median and max over the cycles after the first, which only stores
counters) and the rows it writes; against a 10 s poll interval, the share of one core it
takes. Counters are synthetic (a fixed rate per port): this measures the controller's work,
not the physics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.services.clock import now_us
from controller.settings import Settings
from controller.store import link_telemetry_repo
from controller.store.migrate import upgrade


def ports_of(client: TestClient) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for link in client.get("/v1/links").json()["links"]:
        for end, port in ((link["a"], link["a_port"]), (link["b"], link["b_port"])):
            if port:  # a host link's host end has no port
                out.setdefault(end, []).append(port)
    return out


def batch(ports: dict[str, list[str]], t_us: int, k: int) -> dict[str, Any]:
    return {"samples": [{"switch": sw, "t_us": t_us, "counter_epoch": "bench.0", "ports": [
        {"port": p, "tx_bytes": k * 10_000_000_000, "rx_bytes": k * 9_000_000_000, "tx_pkts": k * 10_000_000,
         "rx_pkts": k * 9_000_000, "ecn_marked_pkts": k * 1000, "pfc_rx_pause": {"3": k * 10},
         "pfc_tx_pause": {"3": k * 5}} for p in sorted(names)]} for sw, names in sorted(ports.items())]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--cycles", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="c4-bench-ingest-") as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'c4.db'}"
        upgrade(url)
        app = create_app(Settings(database_url=url, admin_token="b", data_dir=Path(tmp)), start_workers=False)
        with TestClient(app, headers={"Authorization": "Bearer b"}) as c:
            r = c.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 64, "spines": 32,
                                                      "hosts_per_leaf": 32, "nics_per_host": 1, "ports_per_nic": 1},
                       params={"force": "true"})
            assert r.status_code == 201, r.text
            ports = ports_of(c)
            n_ports = sum(len(v) for v in ports.values())
            t0 = now_us() - args.cycles * 10_000_000
            times = []
            for k in range(args.cycles + 1):
                body = json.dumps(batch(ports, t0 + k * 10_000_000, k + 1))
                start = time.perf_counter()
                r = c.post("/v1/telemetry/switches", content=body, headers={"Content-Type": "application/json"})
                times.append(time.perf_counter() - start)
                assert r.status_code == 202, r.text
            with app.state.runtime.sessions() as s:
                rows = link_telemetry_repo.sample_count(s)
            measured = times[1:]
            print(json.dumps({"database": url.split(":")[0], "switches": len(ports), "ports": n_ports,
                              "cycles": args.cycles, "post_s_median": round(statistics.median(measured), 3),
                              "post_s_max": round(max(measured), 3), "first_post_s": round(times[0], 3),
                              "link_samples_per_cycle": rows // args.cycles,
                              "share_of_one_core_at_10s": round(statistics.median(measured) / 10, 3)}))


if __name__ == "__main__":
    main()
