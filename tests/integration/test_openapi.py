"""The published API description serves its users: every route has a typed response and its
errors documented with the real body, bearer auth is declared, the docs work offline, and the
models neither drop fields nor lie about what the routes return."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from starlette.staticfiles import StaticFiles

from controller.api import docs
from controller.api.app import create_app
from controller.api.docs import ASSETS, has_console
from controller.api.schemas.public.diagnosis import (
    AlarmsPublic,
    HostsPublic,
    TokensPublic,
    WebhooksPublic,
)
from controller.api.schemas.public.jobs import (
    AssignmentsPublic,
    JobLinksPublic,
    JobPublic,
    JobsPublic,
)
from controller.api.schemas.public.topology import LinkDetailPublic, LinksPublic, TopologyPublic
from controller.services import jobs as jobs_service
from controller.services.clock import iso8601
from controller.settings import Settings
from controller.store.migrate import upgrade

TOKEN = "openapi-admin"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ERRORS_OF_EVERY_V1_ROUTE = {"401", "503"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    settings = Settings(database_url=url, admin_token=TOKEN, data_dir=tmp_path, max_body_bytes=4096)
    with TestClient(create_app(settings)) as client:
        yield client


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, op in item.items():
            yield path, method, op


def _resolve(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]  # type: ignore[no-any-return]


def test_every_route_has_a_typed_response_and_documented_errors(api: TestClient) -> None:
    schema = api.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": schema["components"]["securitySchemes"]["bearer"]["description"]}
    seen = 0
    for path, method, op in _operations(schema):
        seen += 1
        where = f"{method.upper()} {path}"
        ok = [s for s in op["responses"] if s.startswith("2")]
        assert len(ok) == 1, where
        if ok[0] != "204":
            content = op["responses"][ok[0]]["content"]
            if path == "/metrics":
                assert "text/plain" in content, where
            else:
                ref = content["application/json"]["schema"].get("$ref")
                assert ref and _resolve(schema, ref)["properties"], f"{where}: untyped response"
        if not path.startswith("/v1/"):
            continue
        assert op.get("security") == [{"bearer": []}], where
        documented = set(op["responses"]) - set(ok)
        expected = set(ERRORS_OF_EVERY_V1_ROUTE)
        if "{" in path:
            expected |= {"404", "422"}
        if "requestBody" in op:
            expected |= {"413", "422"}
        if method != "get":
            expected |= {"403", "409"}
        assert expected <= documented, f"{where}: {sorted(expected - documented)} undocumented"
        for status in documented:
            body = op["responses"][status]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/ErrorBody"}, f"{where} {status}"
    assert seen >= 30
    error = _resolve(schema, "#/components/schemas/ErrorBody")
    assert error["required"] == ["error"] and "HTTPValidationError" not in schema["components"]["schemas"]
    # the only admin-only read is documented with its 403
    assert "403" in schema["paths"]["/v1/tokens"]["get"]["responses"]
    assert "403" not in schema["paths"]["/v1/jobs"]["get"]["responses"]


def test_docs_and_redoc_work_offline(api: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        r = api.get(page)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "http" not in csp
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", r.text) + re.findall(r"""url: ?["']([^"']+)""", r.text)
        assert urls, r.text
        for url in urls:
            assert url.startswith("/"), f"{page} loads {url}"
            assert api.get(url).status_code == 200, url
    assert api.get("/docs/assets/swagger-ui-bundle.js").headers["content-type"].startswith(
        ("application/javascript", "text/javascript"))
    for notice in ("swagger-ui.LICENSE", "swagger-ui.NOTICE", "redoc.LICENSE", "VERSIONS"):
        assert (ASSETS / notice).stat().st_size > 0


def test_root_redirects_to_docs_or_to_the_console(api: TestClient, tmp_path: Path) -> None:
    r = api.get("/", follow_redirects=False)  # this build has the console (controller/console)
    assert r.status_code == 307 and r.headers["location"] == "/console"
    assert has_console(api.app)  # type: ignore[arg-type]
    without = FastAPI()
    docs.install(without)
    assert TestClient(without).get("/", follow_redirects=False).headers["location"] == "/docs"
    console = APIRouter(prefix="/console")
    console.add_api_route("", lambda: {"console": True})
    without.include_router(console)
    assert TestClient(without).get("/", follow_redirects=False).headers["location"] == "/console"
    bare = FastAPI()
    assert not has_console(bare)
    bare.mount("/console", StaticFiles(directory=tmp_path))
    assert has_console(bare)


def _planned(api: TestClient) -> dict[str, Any]:
    r = api.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2},
                 headers=AUTH)
    assert r.status_code == 201, r.text
    ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)]
    api.post("/v1/jobs", json={"name": "j", "ranks": ranks, "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]},
             headers=AUTH).raise_for_status()
    for _ in range(200):
        job: dict[str, Any] = api.get("/v1/jobs/j", headers=AUTH).json()
        if job["status"] != "pending":
            return job
        time.sleep(0.05)
    raise AssertionError("not planned")


def test_responses_match_their_models_and_carry_iso_times(api: TestClient) -> None:
    """The bulk routes skip re-validation for speed: their documents are checked here."""
    job = _planned(api)
    assert job["created_at"] == iso8601(job["created_at_us"]) and job["created_at"].endswith("Z")
    assert "error" not in job and "flagged" not in job  # optional fields stay out, as before
    link = api.get("/v1/links", headers=AUTH).json()["links"][0]["name"]
    api.post("/v1/hosts/host0/isolate", json={"reason": "r"}, headers=AUTH).raise_for_status()
    api.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/h", "events": ["job.planned"], "secret": "s" * 8},
             headers=AUTH).raise_for_status()
    for path, model in (("/v1/jobs", JobsPublic), ("/v1/jobs/j", JobPublic), ("/v1/jobs/j/links", JobLinksPublic),
                        ("/v1/jobs/j/assignments", AssignmentsPublic), ("/v1/links", LinksPublic),
                        (f"/v1/links/{link}", LinkDetailPublic), ("/v1/topology", TopologyPublic),
                        ("/v1/hosts", HostsPublic), ("/v1/alarms", AlarmsPublic), ("/v1/webhooks", WebhooksPublic),
                        ("/v1/tokens", TokensPublic)):
        r = api.get(path, headers=AUTH)
        assert r.status_code == 200, (path, r.text)
        model.model_validate(r.json())
    host = api.get("/v1/hosts", params={"state": "isolated"}, headers=AUTH).json()["hosts"][0]
    assert host["changed_at"] == iso8601(host["changed_at_us"])
    hook = api.get("/v1/webhooks", headers=AUTH).json()["webhooks"][0]
    assert hook["created_at"] == iso8601(hook["created_at_us"]) and "secret" not in hook


def test_fields_another_part_adds_reach_clients(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _planned(api)
    original = jobs_service.get

    def with_more(rt: Any, name: str) -> dict[str, Any]:
        doc = original(rt, name)
        return {**doc, "phase": "improving", "diagnosis": {"hang_timeout_s": 12.0},
                "plan": {**doc["plan"], "bound_over": "probed paths"}, "last_seen_us": 1764430012000000}

    monkeypatch.setattr(jobs_service, "get", with_more)
    got = api.get("/v1/jobs/j", headers=AUTH).json()
    assert got["phase"] == "improving" and got["diagnosis"] == {"hang_timeout_s": 12.0}
    assert got["plan"]["bound_over"] == "probed paths" and got["plan"]["flows"] == job["plan"]["flows"]
    assert got["last_seen"] == "2025-11-29T15:26:52.000000Z"


def test_a_body_over_the_limit_is_refused_with_413(api: TestClient) -> None:
    big = {"name": "x" * 5000, "switches": []}
    r = api.put("/v1/topology", json=big, headers=AUTH)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large" and r.json()["error"]["details"]["max_body_bytes"] == 4096

    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        yield b"y" * 5000
        yield b'"}'

    r = api.put("/v1/topology", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413
    r = api.put("/v1/topology", content=iter([b'{"name": "small"}']), headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "switches"


@pytest.mark.browser
def test_swagger_authorize_and_try_it_out_work_offline_in_a_browser(tmp_path: Path) -> None:
    """Chromium loads /docs with every request off this origin refused, authorizes with a
    token and runs GET /v1/hosts from the page."""
    pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("browser tier: /usr/bin/chromium is missing (Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    from tests.support.live import live_controller

    with live_controller(tmp_path) as live, sync_playwright() as pw:
        live.http.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                      "hosts_per_leaf": 1}).raise_for_status()
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page()
            outside: list[str] = []

            def block_outside(route: Any) -> None:
                if route.request.url.startswith(live.url):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()

            page.route("**/*", block_outside)
            page.goto(f"{live.url}/docs")
            page.wait_for_selector(".opblock", timeout=20_000)
            page.click("button.authorize")
            page.fill(".auth-container input", live.token)
            page.click(".auth-btn-wrapper button.authorize")
            page.click("button.btn-done")
            page.click("#operations-diagnosis-list_hosts_v1_hosts_get .opblock-summary")
            with page.expect_response(lambda r: "/v1/hosts" in r.url) as answer:
                page.click("#operations-diagnosis-list_hosts_v1_hosts_get button.execute")
            assert answer.value.status == 200
            assert answer.value.request.headers.get("authorization") == f"Bearer {live.token}"
            assert outside == []
        finally:
            browser.close()
