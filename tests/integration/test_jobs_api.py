"""Jobs API on a real app and database: POST -> planned in the background, assignments that the
validator accepts, long-poll, refusals, link events, deletion."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.domain.jobs import Assignment, FlowKey
from controller.services import jobs as job_service
from controller.services.runtime import Runtime
from controller.te import flows as job_flows
from controller.te.validate import plan_problems

FABRIC = {"kind": "leaf-spine", "leaves": 4, "spines": 2, "hosts_per_leaf": 2, "nics_per_host": 1,
          "ports_per_nic": 2, "host_gbps": 200, "fabric_gbps": 400}


def job(name: str, hosts: list[int], channels: int = 2, qps: int = 2) -> dict[str, Any]:
    return {"name": name, "ranks": [{"rank": i, "host": f"host{h}", "nic": "mlx5_0"} for i, h in enumerate(hosts)],
            "traffic": [{"pattern": "ring", "ranks": list(range(len(hosts))), "channels": channels,
                         "qps_per_connection": qps}]}


def wait_planned(client: TestClient, name: str, status: str = "planned", timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = client.get(f"/v1/jobs/{name}").json()
        if got["status"] == status:
            return got  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"job {name} not {status}: {got}")


def validate(client: TestClient, runtime: Runtime, name: str) -> dict[str, Any]:
    """The solver-free validator over what the API returns."""
    from controller.services import topology

    body = client.get(f"/v1/jobs/{name}/assignments").json()
    spec = job_service.spec_from_document({k: v for k, v in client.get(f"/v1/jobs/{name}").json().items()
                                           if k in ("name", "ranks", "traffic")})
    flows = job_flows.derive_flows(spec)
    _, view = topology.current(runtime)
    got = {FlowKey(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]): Assignment(
        FlowKey(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]), f"{a['src_host']}:{a['src_nic']}:{a['src_port']}",
        f"{a['dst_host']}:{a['dst_nic']}:{a['dst_port']}", a["udp_sport"], a["weight"], tuple(a["path"]),
        tuple(a["links"])) for a in body["assignments"]}
    assert plan_problems(view, flows, got) == []
    return body  # type: ignore[no-any-return]


@pytest.fixture
def fabric(client: TestClient) -> None:
    assert client.post("/v1/topology/generate", json=FABRIC).status_code == 201


def test_post_plans_in_background_and_assignments_validate(client: TestClient, runtime: Runtime, fabric: None) -> None:
    r = client.post("/v1/jobs", json=job("a", list(range(8))))
    assert r.status_code == 202 and r.json()["status"] in ("pending", "planned")
    got = wait_planned(client, "a")
    plan = got["plan"]
    for field in ("flows", "max_link_utilization", "lower_bound", "ecmp_expected_max_utilization", "solve_ms",
                  "solver", "predicted_busbw_fraction", "ecmp_predicted_busbw_fraction"):
        assert field in plan
    assert plan["flows"] == 32 and plan["lower_bound"] <= plan["max_link_utilization"] + 1e-9
    assert plan["max_link_utilization"] == pytest.approx(plan["lower_bound"])
    body = validate(client, runtime, "a")
    assert body["version"] >= 1 and len(body["assignments"]) == 32
    mine = client.get("/v1/jobs/a/assignments", params={"host": "host0"}).json()["assignments"]
    assert mine and all(a["src_host"] == "host0" for a in mine)
    assert [j["name"] for j in client.get("/v1/jobs").json()["jobs"]] == ["a"]


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda j: j["ranks"][0].update(host="nohost"), "ranks[0].host"),
    (lambda j: j["ranks"][1].update(nic="mlx5_7"), "ranks[1].nic"),
    (lambda j: j["ranks"][1].update(rank=0), "ranks[1].rank"),
    (lambda j: j["traffic"][0].update(ranks=[0]), "traffic[0].ranks"),
    (lambda j: j["traffic"][0].update(ranks=[0, 9]), "traffic[0].ranks[1]"),
    (lambda j: j["traffic"][0].update(channels=0), "traffic.0.channels"),
    (lambda j: j["traffic"][0].update(qps_per_connection=0), "traffic.0.qps_per_connection"),
    (lambda j: j.update(extra=1), "extra"),
])
def test_bad_jobs_are_422_naming_the_field_and_store_nothing(client: TestClient, fabric: None, mutate, field) -> None:  # type: ignore[no-untyped-def]
    body = job("bad", [0, 1, 2])
    mutate(body)
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    fields = [e["field"] for e in r.json()["error"]["details"]["errors"]]
    assert any(f.replace("[", ".").replace("]", "") == field.replace("[", ".").replace("]", "") for f in fields), fields
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_isolated_host_is_409_and_duplicate_name_is_409(client: TestClient, fabric: None) -> None:
    assert client.post("/v1/hosts/host3/isolate", json={"reason": "test"}).status_code in (200, 201)
    r = client.post("/v1/jobs", json=job("x", [0, 3]))
    assert r.status_code == 409 and "host3" in r.json()["error"]["message"]
    assert client.post("/v1/jobs", json=job("y", [0, 1])).status_code == 202
    assert client.post("/v1/jobs", json=job("y", [0, 1])).status_code == 409


def test_link_down_replans_affected_flows_and_bumps_version(client: TestClient, runtime: Runtime, fabric: None) -> None:
    client.post("/v1/jobs", json=job("a", list(range(8))))
    wait_planned(client, "a")
    before = client.get("/v1/jobs/a/assignments").json()
    used = sorted({name for a in before["assignments"] for name in a["links"][1:-1]})
    r = client.patch(f"/v1/links/{used[0]}", json={"state": "down"})
    assert r.status_code == 200 and r.json()["replanned_flows"] >= 1
    after = validate(client, runtime, "a")
    assert after["version"] > before["version"]
    assert all(used[0] not in a["links"] for a in after["assignments"])
    untouched = {(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]): a["path"] for a in before["assignments"]
                 if used[0] not in a["links"]}
    moved = [a for a in after["assignments"] if (a["src_rank"], a["dst_rank"], a["channel"], a["qp"]) in untouched
             and untouched[(a["src_rank"], a["dst_rank"], a["channel"], a["qp"])] != a["path"]]
    assert moved == []
    # up: next-hop sets grow again, so some flows keep their path under a new source port
    assert client.patch(f"/v1/links/{used[0]}", json={"state": "up"}).status_code == 200
    validate(client, runtime, "a")


def test_long_poll_returns_when_the_version_moves(client: TestClient, fabric: None) -> None:
    client.post("/v1/jobs", json=job("a", [0, 2, 4, 6]))
    t0 = time.monotonic()
    body = client.get("/v1/jobs/a/assignments", params={"after_version": 0, "wait_s": 20}).json()
    assert body["version"] >= 1 and body["assignments"] and time.monotonic() - t0 < 20


def test_partitioned_pair_fails_the_job_and_leaves_others(client: TestClient, fabric: None) -> None:
    client.post("/v1/jobs", json=job("ok", [0, 1, 2]))
    wait_planned(client, "ok")
    host7 = next(h for h in client.get("/v1/topology").json()["hosts"] if h["name"] == "host7")
    for port in host7["nics"][0]["ports"]:
        assert client.patch(f"/v1/links/{port['link']}", json={"state": "down"}).status_code == 200
    client.post("/v1/jobs", json=job("cut", [0, 7]))
    got = wait_planned(client, "cut", "failed")
    assert "no path between ranks" in got["error"]
    assert client.get("/v1/jobs/ok").json()["status"] == "planned"


def test_delete_frees_load_at_once(client: TestClient, fabric: None) -> None:
    client.post("/v1/jobs", json=job("a", list(range(8))))
    wait_planned(client, "a")
    assert client.delete("/v1/jobs/a").status_code == 204
    assert client.get("/v1/jobs/a").status_code == 404
    client.post("/v1/jobs", json=job("b", list(range(8))))
    got = wait_planned(client, "b")
    assert got["plan"]["max_link_utilization"] == pytest.approx(got["plan"]["lower_bound"])


def test_forced_fabric_replacement_replans_active_jobs(client: TestClient, runtime: Runtime, fabric: None) -> None:
    client.post("/v1/jobs", json=job("a", list(range(8))))
    before = wait_planned(client, "a")
    bigger = {**FABRIC, "spines": 4}
    assert client.post("/v1/topology/generate", json=bigger).status_code == 409
    assert client.post("/v1/topology/generate", params={"force": "true"}, json=bigger).status_code == 201
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = client.get("/v1/jobs/a").json()
        if got["status"] == "planned" and got["version"] > before["version"]:
            break
        time.sleep(0.05)
    assert got["status"] == "planned" and got["version"] > before["version"]
    validate(client, runtime, "a")


def test_assignment_reads_are_open_to_agents_and_writes_to_schedulers(client: TestClient, fabric: None, token_for) -> None:  # type: ignore[no-untyped-def]
    agent, scheduler, viewer = token_for("agent"), token_for("scheduler"), token_for("viewer")
    assert client.post("/v1/jobs", json=job("a", [0, 1]), headers=scheduler).status_code == 202
    assert client.post("/v1/jobs", json=job("b", [0, 1]), headers=agent).status_code == 403
    assert client.get("/v1/jobs/a/assignments", headers=agent).status_code == 200
    assert client.delete("/v1/jobs/a", headers=viewer).status_code == 403
    assert client.delete("/v1/jobs/a", headers=scheduler).status_code == 204


def test_c4_plan_what_if_prints_summary_links_and_ecmp(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess
    import sys

    from controller.topology.document import to_document
    from controller.topology.generate import LeafSpineSpec, leaf_spine

    fabric = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2))
    (tmp_path / "fabric.json").write_text(json.dumps(to_document(fabric)))
    (tmp_path / "job.json").write_text(json.dumps(job("w", [0, 2, 5, 7])))
    link = next(x.name for x in fabric.links if not x.is_host_link)
    cmd = [sys.executable, "-m", "controller.cli", "plan", str(tmp_path / "fabric.json"), str(tmp_path / "job.json")]
    out = subprocess.run([*cmd, "--down", link, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plan"]["lower_bound"] <= doc["plan"]["max_link_utilization"] + 1e-9
    assert doc["plan"]["ecmp_expected_max_utilization"] >= doc["plan"]["lower_bound"] - 1e-9
    assert doc["links"] and all(r["link"] != link for r in doc["links"])
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "ECMP" in text.stdout and "max link utilization" in text.stdout
    (tmp_path / "bad.json").write_text(json.dumps(job("w", [0, 99])))
    bad = subprocess.run([*cmd[:-1], str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "ranks[1].host" in bad.stderr


def test_link_down_summary_is_refreshed_in_the_background(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-plan inside the PATCH either carries the previous bound over (still a lower bound,
    but loose once capacity is gone) with the previous ECMP and bus-bandwidth figures, or, once
    the worker has indexed the plan, proves the new bound at once (issue 9: a bound is carried
    only when the change provably cannot lower the optimum). Either way the figures end up
    refreshed, optimal, without a version bump (assignments are unchanged by the refresh)."""
    from controller.services import planning

    # The refresh waits 0.25 s; on a fast machine it could land before the read of the
    # PATCH's own figures below. 3 s keeps that read ahead of it.
    monkeypatch.setattr(planning, "REFRESH_DELAY_S", 3.0)
    thin = {**FABRIC, "ports_per_nic": 1, "fabric_gbps": 100}  # a leaf's two uplinks carry what crosses it
    assert client.post("/v1/topology/generate", json=thin).status_code == 201
    client.post("/v1/jobs", json=job("a", list(range(8))))
    planned = wait_planned(client, "a")["plan"]
    used = sorted({name for a in client.get("/v1/jobs/a/assignments").json()["assignments"]
                   for name in a["links"][1:-1] if "spine" in name})
    assert client.patch(f"/v1/links/{used[0]}", json={"state": "down"}).status_code == 200
    carried = client.get("/v1/jobs/a").json()
    assert carried["plan"]["solver"].startswith("replan:")
    assert carried["plan"]["max_link_utilization"] > planned["max_link_utilization"], (planned, carried["plan"], used)
    assert planned["lower_bound"] <= carried["plan"]["lower_bound"] <= carried["plan"]["max_link_utilization"]
    if carried["plan"]["lower_bound"] == planned["lower_bound"]:  # carried: the old figures until the refresh
        assert carried["plan"]["predicted_busbw_fraction"] == planned["predicted_busbw_fraction"]
        deadline = time.monotonic() + 30
        while (got := client.get("/v1/jobs/a").json())["plan"]["lower_bound"] == carried["plan"]["lower_bound"]:
            assert time.monotonic() < deadline, got["plan"]
            time.sleep(0.1)
    else:
        time.sleep(3.5)  # the refresh, which changes nothing that was already current
        got = client.get("/v1/jobs/a").json()
    assert got["version"] == carried["version"] and got["plan"]["solver"] == carried["plan"]["solver"]
    assert got["plan"]["lower_bound"] == pytest.approx(got["plan"]["max_link_utilization"])  # the plan is optimal
    assert got["plan"]["predicted_busbw_fraction"] < planned["predicted_busbw_fraction"]


def test_consecutive_link_failures_replan_from_the_kept_index(client: TestClient, runtime: Runtime, fabric: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner indexes a job's plan after planning it, and each link re-plan hands on the
    index of the plans it wrote, so the next failure starts from it (the re-plan indexes no
    flow itself); every plan validates."""
    from controller.services import planning
    from controller.services.planning import Planner
    from controller.te import replan

    planner = next(h.__self__ for h in runtime.on_link_change if isinstance(getattr(h, "__self__", None), Planner))
    client.post("/v1/jobs", json=job("a", list(range(8))))
    wait_planned(client, "a")
    deadline = time.monotonic() + 30
    while planner.memory.index_key() is None:  # built by the worker's step after the plan
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rebuilt: list[object] = []  # indexes built inside a re-plan, or by the worker
    real = replan.index_plans
    monkeypatch.setattr(replan, "index_plans", lambda *a: rebuilt.append(a) or real(*a))
    monkeypatch.setattr(planning, "index_plans", lambda *a: rebuilt.append(a) or real(*a))
    down: list[str] = []
    for _ in range(2):
        body = client.get("/v1/jobs/a/assignments").json()
        assert [(n, v) for n, _, v, _ in planner.memory.index_key() or ()] == [("a", body["version"])]
        used = sorted({n for a in body["assignments"] for n in a["links"][1:-1] if n not in down})
        down.append(used[len(used) // 2])
        r = client.patch(f"/v1/links/{down[-1]}", json={"state": "down"})
        assert r.status_code == 200 and r.json()["replanned_flows"] >= 1
        after = validate(client, runtime, "a")
        assert not {n for a in after["assignments"] for n in a["links"]} & set(down)
    planner._build_index()  # what the worker does next: nothing, the re-plan handed its index on
    assert rebuilt == []
    assert [(n, v) for n, _, v, _ in planner.memory.index_key() or ()] == [("a", after["version"])]


def test_a_rolled_back_link_change_leaves_no_plan_in_the_planner_caches(client: TestClient, runtime: Runtime,
                                                                         fabric: None) -> None:
    """If the PATCH's transaction fails after the planner re-planned inside it, nothing of
    that re-plan survives: not in the database, not in the planner's caches (plans, index,
    candidates: the next change gets the same revision number on another fabric)."""
    from controller.services.planning import Planner

    planner = next(h.__self__ for h in runtime.on_link_change if isinstance(getattr(h, "__self__", None), Planner))
    client.post("/v1/jobs", json=job("a", list(range(8))))
    wait_planned(client, "a")
    before = client.get("/v1/jobs/a/assignments").json()
    used = sorted({n for a in before["assignments"] for n in a["links"][1:-1]})
    cached = planner.memory.any_candidates()

    def fail_after_planner(*_args: object) -> int:
        raise RuntimeError("a later hook failed")

    runtime.on_link_change.append(fail_after_planner)
    try:
        with pytest.raises(RuntimeError):
            client.patch(f"/v1/links/{used[0]}", json={"state": "down"})
    finally:
        runtime.on_link_change.remove(fail_after_planner)
    assert client.get("/v1/jobs/a/assignments").json() == before
    assert next(x for x in client.get("/v1/topology").json()["links"] if x["name"] == used[0])["state"] == "up"
    loaded = planner.memory.loaded("a")
    assert loaded is None or loaded.version == before["version"]
    key = planner.memory.index_key()
    assert key is None or [(n, v) for n, _, v, _ in key] == [("a", before["version"])]
    assert planner.memory.any_candidates() is cached
    # Another link at the revision number the rolled-back change had.
    other = next(n for n in used if n != used[0] and not set(n.split("--")) & set(used[0].split("--")))
    r = client.patch(f"/v1/links/{other}", json={"state": "down"})
    assert r.status_code == 200 and r.json()["replanned_flows"] >= 1
    after = validate(client, runtime, "a")
    assert after["version"] == before["version"] + 1
    assert all(other not in a["links"] for a in after["assignments"])
    assert any(used[0] in a["links"] for a in after["assignments"])  # up all along, still used


def test_a_new_job_refreshes_the_summaries_of_jobs_it_shares_nics_with(client: TestClient, fabric: None) -> None:
    """A job planned onto the NICs of a planned job changes that job's per-flow demand and
    background: the planner refreshes the older job's summary, computed over both jobs as the
    new job's was (the same ECMP expectation here: the same hosts), without touching its
    assignments."""
    client.post("/v1/jobs", json=job("a", list(range(8))))
    first = wait_planned(client, "a")
    client.post("/v1/jobs", json=job("b", list(range(8))[::-1]))
    b = wait_planned(client, "b")["plan"]
    assert b["ecmp_expected_max_utilization"] != first["plan"]["ecmp_expected_max_utilization"]
    deadline = time.monotonic() + 10
    # (the POST lowers a's bound at once and b's plan raises a's maximum at once; the ECMP
    # figure comes with the refresh)
    while ((got := client.get("/v1/jobs/a").json())["plan"]["ecmp_expected_max_utilization"]
           == first["plan"]["ecmp_expected_max_utilization"]):
        assert time.monotonic() < deadline, got["plan"]
        time.sleep(0.1)
    assert got["version"] == first["version"]
    assert got["plan"]["ecmp_expected_max_utilization"] == b["ecmp_expected_max_utilization"]


def test_a_bound_that_may_no_longer_hold_is_lowered_until_the_refresh(client: TestClient, runtime: Runtime) -> None:
    """When a link change moves one job's flows off a link another job's candidates cross, or
    fails a job, the other job's stored bound was computed on the old background: it is
    lowered at once to the NIC pigeonhole bound (proven whatever the background), and the
    planner's next step restores the full bound. The planner's worker is stopped so that the
    state between the two can be seen."""
    from controller.services.planning import Planner

    planner = next(h.__self__ for h in runtime.on_link_change if isinstance(getattr(h, "__self__", None), Planner))
    # single-port NICs, thin uplinks: the full bound (uplinks) is above the pigeonhole one (NICs)
    thin = {**FABRIC, "ports_per_nic": 1, "fabric_gbps": 50}
    assert client.post("/v1/topology/generate", json=thin).status_code == 201
    pairs = {**job("a", [0, 2]), "traffic": [{"pattern": "pairs", "pairs": [[0, 1]], "channels": 2,
                                              "qps_per_connection": 2}]}
    client.post("/v1/jobs", json=pairs)  # host0 (leaf0) -> host2 (leaf1): spine -> leaf1 directions
    alone = wait_planned(client, "a")["plan"]["lower_bound"]
    assert alone > 1.0
    client.post("/v1/jobs", json=job("b", [2, 3, 4, 5]))  # leaves 1 and 2; 5 -> 2 enters leaf1 from a spine
    wait_planned(client, "b")
    worker = next(w for w in runtime.workers if w.name == "planner")
    worker.stop()
    planner.step()  # whatever the worker had left: refreshes after b was planned
    before = client.get("/v1/jobs/a").json()
    a_links = {n for x in client.get("/v1/jobs/a/assignments").json()["assignments"] for n in x["links"]}
    b_links = sorted({n for x in client.get("/v1/jobs/b/assignments").json()["assignments"]
                      for n in x["links"][1:-1] if n.startswith("leaf2:") and n not in a_links})
    port = next(p for h in client.get("/v1/topology").json()["hosts"] if h["name"] == "host5"
                for n in h["nics"] for p in n["ports"])
    # b's flows from leaf2 move to the other spine, off a spine -> leaf1 direction a's
    # candidates cross; then b fails (no path to host5)
    for change in (b_links[0], port["link"]):
        r = client.patch(f"/v1/links/{change}", json={"state": "down"})
        assert r.status_code == 200
        lowered = client.get("/v1/jobs/a").json()
        assert lowered["version"] == before["version"]  # a's flows did not change
        assert lowered["plan"]["lower_bound"] == pytest.approx(1.0)  # 4 flows of 50 Gb/s on host0's 200 Gb/s port
        time.sleep(0.3)  # the refresh's delay
        planner.step()
        assert client.get("/v1/jobs/a").json()["plan"]["lower_bound"] > 1.0
    assert client.get("/v1/jobs/a").json()["plan"]["lower_bound"] == pytest.approx(alone)
    assert client.get("/v1/jobs/b").json()["status"] == "failed"


def test_a_link_change_reads_stored_plans_that_carry_fields_beyond_the_summary(client: TestClient, runtime: Runtime,
                                                                             fabric: None) -> None:
    """A stored `plan` may hold more than the planner's summary (the rebalancer's `congestion`);
    a link change reading it must not fail (it did: a 500 on the testbed's link-down scenario)."""
    from controller.store import jobs_repo  # the test writes what the rebalancer stores
    from controller.store.db import transaction

    client.post("/v1/jobs", json=job("a", list(range(8))))
    wait_planned(client, "a")
    with transaction(runtime.sessions) as session:
        row = jobs_repo.by_name(session, "a")
        assert row is not None
        row.plan = {**row.plan, "congestion": [{"link": "x", "direction": "ab", "step": "weights"}]}
    used = sorted({name for a in client.get("/v1/jobs/a/assignments").json()["assignments"] for name in a["links"][1:-1]})
    r = client.patch(f"/v1/links/{used[0]}", json={"state": "down"})
    assert r.status_code == 200, r.text
    assert r.json()["replanned_flows"] >= 1


def test_a_host_isolated_while_a_post_waits_for_the_lock_refuses_the_job(
        client: TestClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The POST checks its hosts under the fabric's lock, which isolating a host takes too: a
    host isolated after the POST began and before it got the lock refuses the job (read before
    the lock, the job was accepted, never flagged, and planned through the host). A taken name
    is answered first, as before."""
    from controller.services import hosts as host_service
    from controller.store import fabric_repo

    assert client.post("/v1/topology/generate", json=FABRIC).status_code == 201
    assert client.post("/v1/jobs", json=job("taken", [2, 3])).status_code == 202
    real, fired = fabric_repo.lock, []

    def lock(session: Any) -> Any:  # another request isolates host1 and commits first
        if not fired:
            fired.append(1)
            host_service.isolate(runtime, "host1", "isolated meanwhile")
        return real(session)

    monkeypatch.setattr(fabric_repo, "lock", lock)
    r = client.post("/v1/jobs", json=job("a", [0, 1]))
    assert fired and r.status_code == 409, r.text
    assert r.json()["error"]["details"] == {"hosts": ["host1"]}
    assert client.get("/v1/jobs/a").status_code == 404
    r = client.post("/v1/jobs", json=job("taken", [0, 1]))
    assert r.status_code == 409 and r.json()["error"]["details"] == {"job": "taken"}
