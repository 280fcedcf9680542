"""Link-down recovery for live TCP connections, through the API (`services.failover`): a PATCH
marks the re-hashed pairs' probes stale, the agents are asked for them again, and once fresh
probes arrive the job is re-weighted with every flow's live (first) source port kept, its path
the fresh probe's, and the weights inside each connection balanced."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from fastapi.testclient import TestClient

from controller.domain.fabric import ROCE_SPORT_MIN, LinkState
from controller.store import jobs_repo
from controller.topology.build import with_link_state
from controller.topology.document import to_document
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

FABRIC = leaf_spine(LeafSpineSpec(leaves=2, spines=3, hosts_per_leaf=2, ports_per_nic=1))


def probe(view: FabricView, src: str, dst: str, count: int = 64) -> dict[str, Any]:
    """A node agent's report, from the hash of `view` (the fabric as it forwards now)."""
    s, d = view.ports_by_address[src].node, view.ports_by_address[dst].node
    results = []
    for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + count):
        path = ref_v1_path(view, s, d, sport)
        assert path is not None
        results.append({"sport": sport, "hops": [view.switches[x].mgmt_address for x in path[1:-1]] + [dst]})
    return {"src_address": src, "dst_address": dst, "protocol": "tcp", "dst_port": 4792, "results": results}


def wait(pred: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_link_down_re_probes_and_re_weights_live_connections(client: TestClient) -> None:
    doc = to_document(FABRIC)
    doc["hashing"] = {"mode": "probed", "protocol": "tcp", "dst_port": 4792}
    assert client.put("/v1/topology", json=doc).status_code == 200
    hosts = ["host0", "host2", "host1", "host3"]  # every ring neighbour on the other leaf
    job = {"name": "r", "ranks": [{"rank": i, "host": h, "nic": "mlx5_0"} for i, h in enumerate(hosts)],
           "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3], "channels": 2, "qps_per_connection": 2}]}
    assert client.post("/v1/jobs", json=job).status_code == 202
    view = FabricView(FABRIC)
    for r in wait(lambda: client.get("/v1/probes/requests").json()["requests"]):
        assert client.post("/v1/probes", json=probe(view, r["src_address"], r["dst_address"])).status_code == 202
    wait(lambda: client.get("/v1/jobs/r").json()["status"] == "planned")
    first = {(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]): a
             for a in client.get("/v1/jobs/r/assignments").json()["assignments"]}
    # a spine uplink of leaf0 that the plan uses
    link = next(name for a in first.values() for name in a["links"] if name.startswith("leaf0:"))
    assert client.get("/v1/probes/requests").json()["requests"] == []

    assert client.patch(f"/v1/links/{link}", json={"state": "down"}).status_code == 200
    v_patch = client.get("/v1/jobs/r").json()["version"]
    stale = client.get("/v1/probes/requests").json()["requests"]
    cross = {(view.ports[a["src_host"] + ":mlx5_0:p0"].address, view.ports[a["dst_host"] + ":mlx5_0:p0"].address)
             for a in first.values()}
    assert {(r["src_address"], r["dst_address"]) for r in stale} == cross  # every ring pair crosses leaf0's spines
    down = FabricView(with_link_state(FABRIC, link, LinkState.DOWN))
    rt = client.app.state.runtime  # type: ignore[attr-defined]
    with rt.sessions() as session:
        drops = jobs_repo.bound_epoch(session).drops
    for r in stale:
        assert client.post("/v1/probes", json=probe(down, r["src_address"], r["dst_address"])).status_code == 202
    assert client.get("/v1/probes/requests").json()["requests"] == []
    wait(lambda: client.get("/v1/jobs/r").json()["version"] > v_patch)
    with rt.sessions() as session:  # loads moved: every bound proven before shows its floor until refreshed
        assert jobs_repo.bound_epoch(session).drops == drops + 1
    after = {(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]): a
             for a in client.get("/v1/jobs/r/assignments").json()["assignments"]}
    weights: dict[tuple[int, int, int], float] = defaultdict(float)
    for k, a in after.items():
        assert a["udp_sport"] == first[k]["udp_sport"], "a live socket's port changed"
        src, dst = f"{a['src_host']}:mlx5_0:p0", f"{a['dst_host']}:mlx5_0:p0"
        assert tuple(a["path"]) == ref_v1_path(down, src, dst, a["udp_sport"]), "path is not the fresh probe's"
        assert link not in a["links"]
        weights[k[:3]] += a["weight"]
    assert all(abs(w - 0.5) < 1e-6 for w in weights.values())  # each channel keeps its share
