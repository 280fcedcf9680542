"""The console's own endpoints and assets on a real app and database.

The map's compact state is checked against `GET /v1/links` (the API it must agree with), the
connections view against `GET /v1/jobs/{name}/assignments`, and the assets against what the
page may load (only its own origin: no CDN, nothing fetched at run time).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.console.routes import STATIC_DIR
from tests.integration.test_jobs_api import FABRIC, job, wait_planned


@pytest.fixture
def planned(client: TestClient) -> None:
    assert client.post("/v1/topology/generate", json=FABRIC).status_code == 201
    assert client.post("/v1/jobs", json=job("a", [0, 2, 4, 6])).status_code == 202
    wait_planned(client, "a")


@pytest.mark.parametrize(("role", "may"), [("viewer", []), ("agent", []), ("scheduler", ["hosts", "alarms", "jobs"]),
                                           ("admin", ["links", "hosts", "alarms", "jobs"])])
def test_session_names_the_role_and_what_it_may_change(client: TestClient, token_for: Any, role: str,
                                                       may: list[str]) -> None:
    got = client.get("/console/api/session", headers=token_for(role))
    assert got.status_code == 200
    assert got.json() == {"role": role, "may": may}


def test_console_endpoints_need_a_token_the_page_does_not(client: TestClient, planned: None) -> None:
    bare = {"Authorization": ""}
    for path in ("/console/api/session", "/console/api/fabric", "/console/api/jobs/a/connections"):
        got = client.get(path, headers=bare)
        assert got.status_code == 401, path
        assert got.json()["error"]["code"] == "unauthorized"
    page = client.get("/console/", headers=bare)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/console", headers=bare, follow_redirects=False).headers["location"] == "/console/"
    assert client.get("/console/static/nothing.js", headers=bare).status_code == 404
    assert client.get("/console/static/../routes.py", headers=bare).status_code == 404


def test_fabric_state_agrees_with_the_links_api(client: TestClient, planned: None) -> None:
    """Every link of GET /v1/links is in the map's columns with the same ends, state, and
    planned utilization and flows per direction; the layout places every switch."""
    state = client.get("/console/api/fabric").json()
    links = {x["name"]: x for x in client.get("/v1/links").json()["links"]}
    cols = state["links"]
    assert sorted(cols["name"]) == sorted(links)
    for i, name in enumerate(cols["name"]):
        want = links[name]
        assert (cols["a"][i], cols["b"][i], cols["state"][i]) == (want["a"], want["b"], want["state"])
        assert cols["host_link"][i] == int(want["host_link"])
        for d, key in enumerate(("ab", "ba")):
            assert cols["planned"][i][d] == pytest.approx(want["load"][key]["planned_utilization"], abs=1e-5)
            assert cols["flows"][i][d] == want["load"][key]["flows"]
        assert cols["measured"][i] is None  # no switch agent reports here
    topo = client.get("/v1/topology").json()
    assert sorted(state["switches"]["name"]) == sorted(s["name"] for s in topo["switches"])
    assert state["layout"]["flat"] is True
    placed = [s for r in state["layout"]["rows"] for b in r["blocks"] for s in b["switches"]]
    assert sorted(placed) == sorted(state["switches"]["name"])
    assert state["jobs"] == {"a": client.get("/v1/jobs/a").json()["version"]}
    assert state["measured"] is False


def test_fabric_state_is_conditional_and_follows_changes(client: TestClient, planned: None) -> None:
    """An unchanged state answers 304 to its ETag; a link change gives a new body at once."""
    first = client.get("/console/api/fabric")
    etag = first.headers["etag"]
    assert client.get("/console/api/fabric", headers={"If-None-Match": etag}).status_code == 304
    name = next(n for n, f in zip(first.json()["links"]["name"], first.json()["links"]["flows"], strict=True)
                if sum(f) and "spine" in n)
    assert client.patch(f"/v1/links/{name}", json={"state": "down"}).status_code == 200
    after = client.get("/console/api/fabric", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.headers["etag"] != etag
    cols = after.json()["links"]
    i = cols["name"].index(name)
    assert cols["state"][i] == "down" and cols["flows"][i] == [0, 0]


def test_fabric_state_is_gzipped_for_clients_that_take_it(client: TestClient) -> None:
    big = {**FABRIC, "leaves": 16, "spines": 8, "hosts_per_leaf": 8}
    assert client.post("/v1/topology/generate", json=big).status_code == 201
    raw = client.get("/console/api/fabric", headers={"Accept-Encoding": "identity"})
    zipped = client.get("/console/api/fabric", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in raw.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert int(zipped.headers["content-length"]) < len(raw.content) / 4
    assert zipped.json() == raw.json()  # httpx decodes it


def test_connections_show_every_flow_path_to_any_role(client: TestClient, planned: None, token_for: Any) -> None:
    """A viewer reads the assignments' paths grouped by connection."""
    viewer = token_for("viewer")
    got = client.get("/console/api/jobs/a/connections", headers=viewer)
    assert got.status_code == 200
    conns = got.json()["connections"]
    flows = client.get("/v1/jobs/a/assignments").json()["assignments"]
    assert [(c["src_rank"], c["dst_rank"]) for c in conns] == sorted({(f["src_rank"], f["dst_rank"]) for f in flows})
    by_flow = {(f["src_rank"], f["dst_rank"], f["channel"], f["qp"]): f for f in flows}
    assert sum(len(c["flows"]) for c in conns) == len(flows)
    for c in conns:
        for f in c["flows"]:
            want = by_flow[(c["src_rank"], c["dst_rank"], f["channel"], f["qp"])]
            assert (f["path"], f["links"], f["udp_sport"]) == (want["path"], want["links"], want["udp_sport"])
            assert f["src_port"] == f'{want["src_host"]}:{want["src_nic"]}:{want["src_port"]}'
    assert client.get("/console/api/jobs/nope/connections").status_code == 404


def test_no_fabric_yet_is_a_clear_404(client: TestClient) -> None:
    got = client.get("/console/api/fabric")
    assert got.status_code == 404
    assert "no topology" in got.json()["error"]["message"]


def _assets() -> list[Path]:
    return sorted(p for p in STATIC_DIR.rglob("*") if p.is_file())


def test_assets_load_nothing_from_elsewhere(client: TestClient) -> None:
    """Every asset is served from the package, with a type a browser runs, and no asset
    refers to another origin (no CDN: the console works with no internet)."""
    for path in _assets():
        rel = path.relative_to(STATIC_DIR).as_posix()
        got = client.get(f"/console/static/{rel}", headers={"Authorization": ""})
        assert got.status_code == 200, rel
        assert got.content == path.read_bytes()
        if path.suffix == ".js":
            assert got.headers["content-type"].startswith("text/javascript"), rel
        if path.suffix in (".js", ".css", ".html"):
            # XML namespace names (www.w3.org) are identifiers, never fetched
            text = re.sub(r"http://www\.w3\.org/[0-9]{4}/[a-zA-Z/]+", "", path.read_text())
            assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), f"{rel} refers elsewhere"
        assert client.get(f"/console/static/{rel}", headers={"If-None-Match": got.headers["etag"]}).status_code == 304


def test_the_page_preloads_every_module() -> None:
    """index.html lists every module for preloading, so the browser fetches them in one
    round instead of a chain of imports."""
    html = (STATIC_DIR / "index.html").read_text()
    listed = set(re.findall(r'<link rel="modulepreload" href="static/([^"]+)">', html))
    modules = {p.relative_to(STATIC_DIR).as_posix() for p in _assets() if p.suffix == ".js"} - {"js/main.js", "js/boot.js"}
    assert listed == modules
    # boot.js, a classic script, starts the first requests before the modules run
    assert html.index('<script src="static/js/boot.js"></script>') < html.index('<script type="module"')


def test_vendored_libraries_are_the_recorded_ones() -> None:
    """The vendored files are byte for byte what scripts/console-vendor.sh recorded."""
    vendor = STATIC_DIR / "vendor"
    recorded = dict(line.split()[::-1] for line in (vendor / "VERSIONS").read_text().splitlines()
                    if re.fullmatch(r"[0-9a-f]{64}  \S+", line))
    assert set(recorded) == {"preact.module.js", "hooks.module.js", "htm.module.js"}
    for name, digest in recorded.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    assert 'from"./preact.module.js"' in (vendor / "hooks.module.js").read_text()
