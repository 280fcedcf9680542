"""The console in a real browser against a real controller: log in, read the map, act, watch.

Every test drives the page as an operator would (real clicks on the map, the dialogs, the
tabs) and checks the result twice: on the page, and through the REST API.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN, Fabric, click_edge, login, serve_fabric, wait_until

pytestmark = pytest.mark.browser


def busiest_fabric_link(fab: Fabric) -> dict[str, Any]:
    links = fab.admin.get("/v1/links", params={"kind": "fabric", "state": "up"}).json()["links"]
    return max(links, key=lambda x: (x["load"]["ab"]["flows"] + x["load"]["ba"]["flows"], x["name"]))


def test_login_shows_the_map_and_keeps_the_token_out_of_sight(fabric: Fabric, open_page: Any) -> None:
    """Log in with a token: the map shows every switch and link; the token is in this tab's
    session only, never on the page, and a new tab has to log in again."""
    page, _ = open_page(fabric.url)
    response = page.goto(f"{fabric.url}/console/")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    page.fill("[data-testid=token]", ADMIN)
    page.click("[data-testid=login] button[type=submit]")
    page.wait_for_selector("[data-testid=map]")
    topo = fabric.admin.get("/v1/topology").json()
    expect(page.locator("svg.map g.node")).to_have_count(len(topo["switches"]))
    all_links = fabric.admin.get("/v1/links").json()["links"]
    expect(page.locator("svg.map line.edge")).to_have_count(len(all_links))  # flat: one edge per link
    expect(page.locator("svg.map g.host")).to_have_count(len(topo["hosts"]))
    expect(page.locator("[data-testid=role]")).to_have_text("admin")
    expect(page.locator("[data-testid=live]")).to_contain_text("live")
    assert ADMIN not in page.content()
    assert page.evaluate("() => JSON.stringify(localStorage)") == "{}"
    assert page.evaluate("() => sessionStorage.getItem('c4.console.token')") == ADMIN
    page.reload()
    page.wait_for_selector("[data-testid=map]")  # same tab, same session: still signed in
    other, _ = open_page(fabric.url)
    other.goto(f"{fabric.url}/console/")
    expect(other.locator("[data-testid=login]")).to_be_visible()  # a new tab is a new session
    page.click("[data-testid=logout]")
    expect(page.locator("[data-testid=login]")).to_be_visible()
    assert page.evaluate("() => sessionStorage.length") == 0


def test_a_wrong_token_is_refused(fabric: Fabric, open_page: Any) -> None:
    """A token the controller does not know gets a clear refusal and no console."""
    page, watch = open_page(fabric.url)
    watch.allow(r"status of 401")
    page.goto(f"{fabric.url}/console/")
    page.fill("[data-testid=token]", "not-a-token")
    page.click("[data-testid=login] button[type=submit]")
    expect(page.locator("[data-testid=login-error]")).to_contain_text("not valid")
    expect(page.locator("[data-testid=map]")).to_have_count(0)


def test_taking_a_link_down_replans_and_shows_the_new_plan(fabric: Fabric, open_page: Any) -> None:
    """Click a loaded link on the map, take it down with a confirmation: the map marks it
    down, its planned flows go to zero, the jobs' versions move; bring it back up."""
    link = busiest_fabric_link(fabric)
    name = link["name"]
    assert link["load"]["ab"]["flows"] + link["load"]["ba"]["flows"] > 0
    before = {j["name"]: j["version"] for j in fabric.admin.get("/v1/jobs").json()["jobs"]}
    users = {j["job"] for j in fabric.admin.get(f"/v1/links/{name}").json()["jobs"]}
    page, _ = open_page(fabric.url)
    login(page, fabric.url, ADMIN)
    click_edge(page, name)
    details = page.locator(f"[data-testid=link-details][data-link='{name}']")
    expect(details).to_be_visible()
    page.click("[data-testid=link-down]")
    expect(page.locator("[data-testid=confirm]")).to_contain_text("re-planned")
    page.click("[data-testid=confirm-ok]")
    expect(page.locator(f"svg.map line.edge[data-link='{name}']")).to_have_attribute("data-state", "down")
    expect(details).to_have_attribute("data-state", "down")
    expect(details.locator("[data-testid=flows-0]")).to_have_text("0")
    expect(details.locator("[data-testid=flows-1]")).to_have_text("0")
    expect(page.locator("[data-testid=toast]").filter(has_text="flow(s) re-planned")).to_be_visible()
    for job in users:  # the plan change, on the page right after the action
        expect(page.locator(f"tr[data-job='{job}'] [data-testid=job-version]")).to_contain_text(f"v{before[job] + 1}")
    api = fabric.admin.get(f"/v1/links/{name}").json()
    assert api["state"] == "down" and api["load"]["ab"]["flows"] == api["load"]["ba"]["flows"] == 0
    for job in users:
        assert fabric.admin.get(f"/v1/jobs/{job}").json()["version"] > before[job]
        flows = fabric.admin.get(f"/v1/jobs/{job}/assignments").json()["assignments"]
        assert not any(name in f["links"] for f in flows)
    page.click("[data-testid=link-up]")
    page.click("[data-testid=confirm-ok]")
    expect(details).to_have_attribute("data-state", "up")
    assert fabric.admin.get(f"/v1/links/{name}").json()["state"] == "up"


def _hang_records(job: str, ranks: list[int], missing: int, now_us: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the node agents post when rank `missing` never enters a collective: every rank
    finished seq 0 (the first list); the others entered seq 1 at `now_us` and wait on it with
    no progress (the second). Posted in that order, no partial picture looks like a hang: the
    wait only becomes one when the hang timeout has passed."""
    n = len(ranks)
    done, waiting = [], []
    t0 = now_us - 1_000_000
    for r in ranks:
        nxt, prv = ranks[(ranks.index(r) + 1) % n], ranks[(ranks.index(r) - 1) % n]
        moved = [{"peer": nxt, "dir": "send", "bytes": 1 << 20, "t_first_us": t0 + 1000, "t_last_us": t0 + 90_000, "done": True},
                 {"peer": prv, "dir": "recv", "bytes": 1 << 20, "t_first_us": t0 + 1000, "t_last_us": t0 + 90_000, "done": True}]
        done.append({"job": job, "comm": "0xbrowser", "rank": r, "nranks": n, "op": "AllReduce", "seq": 0,
                     "bytes": 8 << 20, "t_start_us": t0, "t_end_us": t0 + 100_000, "peers": moved})
        if r != missing:
            idle = [{"peer": nxt, "dir": "send", "bytes": 0, "t_first_us": None, "t_last_us": None, "done": False},
                    {"peer": prv, "dir": "recv", "bytes": 0, "t_first_us": None, "t_last_us": None, "done": False}]
            waiting.append({"job": job, "comm": "0xbrowser", "rank": r, "nranks": n, "op": "AllReduce", "seq": 1,
                            "bytes": 8 << 20, "t_start_us": now_us, "t_end_us": None, "peers": idle})
    return done, waiting


def test_an_alarm_from_telemetry_shows_its_suspect_and_the_isolated_host(fabric: Fabric, open_page: Any) -> None:
    """Node agents report a rank that never entered a collective: without a reload the
    console shows the alarm, its suspect host lit on the map, the host isolated by that alarm;
    the operator acknowledges and resolves it, then releases the host."""
    page, _ = open_page(fabric.url)
    login(page, fabric.url, ADMIN)
    job = fabric.admin.get("/v1/jobs/ring-a").json()
    hosts = {r["rank"]: r["host"] for r in job["ranks"]}
    missing = 3
    agent = fabric.server.client(fabric.token("agent"))
    for batch in _hang_records("ring-a", sorted(hosts), missing, int(time.time() * 1e6)):
        for record in batch:  # one post per rank, from the rank's host, as its node agent would
            wait_until(lambda r=record: agent.post("/v1/telemetry/collectives",
                                                   json={"host": hosts[r["rank"]], "records": [r]}).status_code == 202,
                       10, "telemetry accepted")
    suspect = hosts[missing]
    expect(page.locator("[data-testid=open-alarms]")).to_have_text("1", timeout=20_000)
    alarm = fabric.admin.get("/v1/alarms").json()["alarms"][0]
    assert alarm["kind"] == "noncomm_hang" and alarm["suspects"][0] == {"kind": "host", "name": suspect}
    page.click("[data-tab=alarms]")
    page.click(f"tr[data-alarm='{alarm['id']}']")
    detail = page.locator(f"[data-testid=alarm-detail][data-alarm='{alarm['id']}']")
    expect(detail).to_contain_text("noncomm_hang")
    expect(detail.locator("[data-testid=evidence]")).to_contain_text("never entered")
    on_map = page.locator(f"svg.map g.host[data-node='h:{suspect}']")
    expect(on_map).to_have_class(re.compile(r"\bhl-suspect\b"))
    expect(on_map).to_have_class(re.compile(r"\bisolated\b"))
    expect(detail.locator("[data-testid=isolated-by]")).to_contain_text(suspect)
    page.click("[data-tab=hosts]")
    row = page.locator(f"tr[data-host='{suspect}']")
    expect(row).to_have_attribute("data-state", "isolated")
    expect(row.locator("[data-testid=host-alarm-link]")).to_have_text(alarm["id"])
    page.click("[data-tab=alarms]")
    page.click("[data-testid=alarm-ack]")
    expect(detail).to_have_attribute("data-state", "acknowledged")
    page.click("[data-testid=alarm-resolve]")
    page.click("[data-testid=confirm-ok]")
    expect(detail).to_have_attribute("data-state", "resolved")
    assert fabric.admin.get(f"/v1/alarms/{alarm['id']}").json()["state"] == "resolved"
    page.locator(f"svg.map g.host[data-node='h:{suspect}']").click()
    page.click("[data-testid=host-release]")
    page.click("[data-testid=confirm-ok]")
    expect(page.locator("[data-testid=host-details]")).to_have_attribute("data-state", "active")
    assert fabric.admin.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"] == []


def test_a_viewer_reads_but_is_refused_actions(fabric: Fabric, open_page: Any) -> None:
    """A viewer sees the map and a job's connections, finds the actions disabled, and when
    the page is made to send one anyway the API refuses it and nothing changes."""
    page, watch = open_page(fabric.url)
    watch.allow(r"status of 403")  # the refusal this test provokes
    login(page, fabric.url, fabric.token("viewer"))
    expect(page.locator("[data-testid=role]")).to_have_text("viewer")
    name = busiest_fabric_link(fabric)["name"]
    click_edge(page, name)
    down = page.locator("[data-testid=link-down]")
    expect(down).to_be_disabled()
    expect(page.locator("[data-testid=role-note]")).to_contain_text("viewer may not")
    down.evaluate("b => { b.disabled = false; }")  # as a stale or tampered page would
    down.click()
    page.click("[data-testid=confirm-ok]")
    expect(page.locator("[data-testid=toast]").filter(has_text="refused")).to_contain_text("may not PATCH")
    assert fabric.admin.get(f"/v1/links/{name}").json()["state"] == "up"
    page.click("tr[data-job='ring-b']")
    expect(page.locator("[data-testid=connections] [data-conn]")).to_have_count(8)


def test_a_connections_paths_light_up_on_the_map(fabric: Fabric, open_page: Any) -> None:
    """A job's plan summary (c4, bound, ECMP) and per-link table match the API; picking a
    connection lights exactly its flows' links on the map."""
    page, _ = open_page(fabric.url)
    login(page, fabric.url, ADMIN)
    job = fabric.admin.get("/v1/jobs/ring-a").json()
    page.click("tr[data-job='ring-a']")
    summary = page.locator("[data-testid=plan-summary]")
    expect(summary.locator("[data-testid=c4-max]")).to_have_text(f"{job['plan']['max_link_utilization']:.2f}")
    expect(summary.locator("[data-testid=bound]")).to_have_text(f"{job['plan']['lower_bound']:.2f}")
    expect(summary.locator("[data-testid=ecmp-max]")).to_have_text(f"{job['plan']['ecmp_expected_max_utilization']:.2f}")
    rows = fabric.admin.get("/v1/jobs/ring-a/links").json()["links"]
    if len(rows) > 12:
        page.click("[data-testid=show-all-links]")
    expect(page.locator("[data-testid=job-links] tbody tr")).to_have_count(len(rows))
    conns = fabric.admin.get("/console/api/jobs/ring-a/connections").json()["connections"]
    conn = next(c for c in conns if any(len(f["links"]) > 2 for f in c["flows"]))  # one that crosses a spine
    page.click(f"[data-conn='{conn['src_rank']}->{conn['dst_rank']}']")
    want = {name for f in conn["flows"] for name in f["links"]}
    wait_until(lambda: set(page.eval_on_selector_all("svg.map line.edge.hl-path", "els => els.map(e => e.dataset.link)")) == want,
               5, "the connection's links highlighted")
    expect(page.locator("[data-testid=flows] tbody tr")).to_have_count(len(conn["flows"]))
    expect(page.locator("[data-testid=path-chip]")).to_contain_text(f"r{conn['src_rank']} → r{conn['dst_rank']}")


def test_measured_views_say_when_there_are_no_measurements(fabric: Fabric, open_page: Any) -> None:
    """With no switch agent reporting, the measured views say so rather than show zeros."""
    page, _ = open_page(fabric.url)
    login(page, fabric.url, ADMIN)
    for metric in ("utilization", "ecn", "pfc"):
        page.click(f"[data-testid=metric] button[data-metric={metric}]")
        expect(page.locator("[data-testid=no-measurements-banner]")).to_be_visible()
        assert page.locator("svg.map line.edge.nodata").count() == page.locator("svg.map line.edge").count()
    click_edge(page, busiest_fabric_link(fabric)["name"])
    expect(page.locator("[data-testid=link-details] [data-testid=no-measurements]")).to_be_visible()
    expect(page.locator("[data-testid=link-chart]")).to_have_text("no measurements")
    page.click("[data-testid=metric] button[data-metric=planned]")
    expect(page.locator("[data-testid=no-measurements-banner]")).to_have_count(0)


@pytest.fixture(scope="module")
def big_fabric(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Any:
    """A clos3 too big to draw switch by switch (4 pods of 8 leaves and 4 spines, 16 cores)."""
    hosts = [f"host{i}" for i in range(0, 64, 4)]
    yield from serve_fabric(tmp_path_factory.mktemp("browser-clos"),
                            {"kind": "clos3", "pods": 4, "leaves_per_pod": 8, "spines_per_pod": 4, "cores": 16,
                             "hosts_per_leaf": 2}, {"wide": hosts})


def test_a_big_fabric_is_drawn_by_pod_and_opens_pod_by_pod(big_fabric: Fabric, open_page: Any) -> None:
    """Past 48 switches the map shows pods as boxes with the links between them aggregated;
    a pod opens to its switches and links, a down link inside it is marked on its box."""
    fab = big_fabric
    page, _ = open_page(fab.url)
    login(page, fab.url, ADMIN)
    expect(page.locator("svg.map g.group")).to_have_count(4)
    assert page.locator("svg.map g.host").count() == 0
    inner = "pod1-leaf0:Ethernet0--pod1-spine0:Ethernet0"
    assert fab.admin.patch(f"/v1/links/{inner}", json={"state": "drained"}).status_code == 200
    expect(page.locator("svg.map g.group[data-node='g:pod1'] .b-drained")).to_have_text("‖1")
    page.locator("svg.map g.group[data-node='g:pod1'] rect.box").dblclick()
    expect(page.locator("svg.map")).to_have_attribute("data-level", "group:pod1")
    expect(page.locator("svg.map g.node.switch")).to_have_count(16 + 8 + 4)  # 16 cores, pod1's spines and leaves
    expect(page.locator(f"svg.map line.edge[data-link='{inner}']")).to_have_attribute("data-state", "drained")
    page.click("[data-testid=crumbs] button")
    expect(page.locator("svg.map")).to_have_attribute("data-level", "overview")


@pytest.fixture(scope="module")
def measured_fabric(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Any:
    """The flat leaf-spine again, on its own controller: its switch counters must not leak
    into the tests that expect none."""
    hosts = [f"host{i}" for i in range(16)]
    yield from serve_fabric(tmp_path_factory.mktemp("browser-measured"),
                            {"kind": "leaf-spine", "leaves": 8, "spines": 4, "hosts_per_leaf": 2}, {"ring": hosts[:8]})


def _port(name: str, t_s: float, tx_bytes_s: float, pkts_s: float, marked_s: float, pauses_s: float) -> dict[str, Any]:
    """Counters of a switch port that has sent at these rates for `t_s` seconds."""
    return {"port": name, "tx_bytes": int(tx_bytes_s * t_s), "rx_bytes": 0, "tx_pkts": int(pkts_s * t_s),
            "ecn_marked_pkts": int(marked_s * t_s), "pfc_rx_pause": {"3": int(pauses_s * t_s)}, "pfc_tx_pause": {"3": 0}}


def test_measured_views_colour_links_from_switch_counters(measured_fabric: Fabric, open_page: Any) -> None:
    """Counters of one link's two switch ports, posted as a switch agent does: the map colours
    that link by measured utilization, ECN marks/s and PFC pauses/s, the others say "no
    measurements", and the link's series is charted."""
    fab = measured_fabric
    link = busiest_fabric_link(fab)
    agent = fab.server.client(fab.token("agent"))
    t0 = int(time.time() * 1e6) - 30_000_000
    for i in range(4):  # four polls 10 s apart, the last one now: rates are steady
        t_s = 10 * i
        sent = agent.post("/v1/telemetry/switches", json={"samples": [
            {"switch": link["a"], "t_us": t0 + t_s * 1_000_000, "counter_epoch": "a", "ports": [
                # a -> b at 97 % of 400 Gb/s, 500 of its 1 M packets/s ECN-marked, 20 PFC pauses/s received
                _port(link["a_port"], t_s, 0.97 * 400e9 / 8, 1e6, 500, 20)]},
            {"switch": link["b"], "t_us": t0 + t_s * 1_000_000 + 1000, "counter_epoch": "b", "ports": [
                _port(link["b_port"], t_s, 0.2 * 400e9 / 8, 2e5, 0, 0)]}]})
        assert sent.status_code == 202, sent.text
    measured = fab.admin.get(f"/v1/links/{link['name']}").json()["measured"]
    assert measured["ab"]["utilization"] == pytest.approx(0.97, rel=0.02)
    page, _ = open_page(fab.url)
    login(page, fab.url, ADMIN)
    page.click("[data-testid=metric] button[data-metric=utilization]")
    expect(page.locator("[data-testid=no-measurements-banner]")).to_have_count(0)
    edge = page.locator(f"svg.map line.edge[data-link='{link['name']}']")
    expect(edge).to_have_attribute("stroke", "#f08c2e")  # 0.97 of capacity: full
    unmeasured = len(fab.admin.get("/v1/links").json()["links"]) - 1
    expect(page.locator("svg.map line.edge.nodata")).to_have_count(unmeasured)
    page.click("[data-testid=metric] button[data-metric=ecn]")
    expect(edge).to_have_attribute("stroke", "#f0c419")  # 500 marks/s: under 1k
    page.click("[data-testid=metric] button[data-metric=pfc]")
    expect(edge).to_have_attribute("stroke", "#9bc53d")  # 20 pauses/s: under 100
    click_edge(page, link["name"])
    ab = page.locator("[data-testid=link-details] [data-testid=dir-0]")
    expect(ab).to_contain_text("0.97")
    expect(ab).to_contain_text("500")
    expect(page.locator("[data-testid=link-details] [data-testid=dir-1]")).to_contain_text("0.20")
    page.click("[data-testid=metric] button[data-metric=utilization]")
    expect(page.locator("[data-testid=link-chart] polyline")).to_have_count(2)  # both directions' series
