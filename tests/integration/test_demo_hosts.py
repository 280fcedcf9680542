"""`c4 simulate-hosts` (docker-compose's `hosts` service) against the real API: it sets the
demo up through REST and its telemetry batches are accepted as node agents' are."""

from __future__ import annotations

from fastapi.testclient import TestClient

from controller.diagnosis.simulator import SimConfig, simulate
from controller.services import demo_hosts


def test_sets_the_demo_up_once_and_posts_accepted_telemetry(client: TestClient) -> None:
    demo_hosts.set_up(client)
    demo_hosts.set_up(client)  # again: nothing duplicated, nothing refused
    assert {j["name"] for j in client.get("/v1/jobs").json()["jobs"]} == {"demo-a", "demo-b"}
    run = simulate(SimConfig(job="demo-a", nranks=16, hosts_per_leaf=4, duration_s=2.0, workload="ring",
                             world_bytes=64 << 20, drain=True, placement=tuple(range(16))))
    by_host: dict[str, list] = {}  # type: ignore[type-arg]
    for d in run.deliveries:
        by_host.setdefault(d.record.host, []).append(d.record)
    assert by_host
    sender = demo_hosts.HttpTelemetry([client])
    host, records = sorted(by_host.items())[0]
    assert sender.ingest(host, records) == len(records)
