"""The console's browser tier: Debian's Chromium, headless, driven by Playwright.

Skipped, with the reason printed, when Chromium or Playwright is missing. Each test gets a
page whose console errors, page errors and off-origin requests fail the test (a test may
allow the errors it provokes on purpose), and leaves a screenshot in the artifacts folder
(`tests/browser/artifacts/`, or `$C4_TEST_ARTIFACTS`; gitignored).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store import tokens_repo
from controller.store.db import transaction
from controller.store.migrate import upgrade
from tests.support.live_server import LiveServer

CHROMIUM = os.environ.get("C4_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
ADMIN = "browser-admin-token"
ARTIFACTS = Path(os.environ.get("C4_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))
CLICK_EDGE_JS = (Path(__file__).parents[2] / "bench" / "console" / "click_edge.js").read_text()

try:
    from playwright.sync_api import BrowserContext, Page, sync_playwright
except ImportError:  # pragma: no cover - the test extras install it
    sync_playwright = None


def _missing() -> str | None:
    if sync_playwright is None:
        return "browser tier: the playwright package is missing (pip install -e '.[test]')"
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        return f"browser tier: {CHROMIUM} is missing (apt-get install chromium; make test installs it)"
    return None


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserContext]:
    """One headless Chromium with a fresh profile per test module; each page is its own tab
    (and so its own sessionStorage: a new page is a new console session). Module scope: the
    sync Playwright driver holds the thread's event loop while it runs, so it must stop before
    another module's tests start their own."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="c4-chromium-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                    viewport={"width": 1440, "height": 900})
        try:
            yield ctx
        finally:
            ctx.close()


@dataclass
class Fabric:
    """A running controller with a stored fabric and planned jobs."""

    server: LiveServer
    runtime: Runtime
    jobs: list[str]
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = self.server.client(ADMIN)

    @property
    def url(self) -> str:
        return self.server.url

    def token(self, role: str) -> str:
        with transaction(self.runtime.sessions) as session:
            _, value = tokens_repo.create(session, f"browser-{role}", role, now_us())
        return value


def ring_job(name: str, hosts: list[str]) -> dict[str, Any]:
    ranks = [{"rank": i, "host": h, "nic": "mlx5_0"} for i, h in enumerate(hosts)]
    return {"name": name, "ranks": ranks,
            "traffic": [{"pattern": "ring", "ranks": list(range(len(hosts))), "channels": 2, "qps_per_connection": 2}]}


def wait_until(check: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def serve_fabric(tmp: Path, generate: dict[str, Any], jobs: dict[str, list[str]]) -> Iterator[Fabric]:
    """A controller on a fresh SQLite file with `generate`'s fabric and ring `jobs`, planned."""
    url = f"sqlite:///{tmp / 'c4.db'}"
    upgrade(url)
    settings = Settings(database_url=url, data_dir=tmp, admin_token=ADMIN, detector_interval_s=0.2,
                        hang_timeout_s=3.0, alarm_quiet_s=600.0, webhook_backoff_s=0.05)
    rt = Runtime.from_settings(settings)
    try:
        with LiveServer(rt) as server:
            fab = Fabric(server, rt, sorted(jobs))
            fab.admin.post("/v1/topology/generate", json=generate).raise_for_status()
            for name, hosts in jobs.items():
                fab.admin.post("/v1/jobs", json=ring_job(name, hosts)).raise_for_status()
            for name in jobs:
                wait_until(lambda n=name: fab.admin.get(f"/v1/jobs/{n}").json()["status"] == "planned",
                           60, f"job {name} planned")
            yield fab
            fab.admin.close()
    finally:
        rt.engine.dispose()


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory, chromium: BrowserContext) -> Iterator[Fabric]:
    """A flat dual-ToR leaf-spine (8 leaves, 4 spines, 16 hosts) with two 8-rank ring jobs."""
    hosts = [f"host{i}" for i in range(16)]
    yield from serve_fabric(tmp_path_factory.mktemp("browser"),
                            {"kind": "leaf-spine", "leaves": 8, "spines": 4, "hosts_per_leaf": 2},
                            {"ring-a": hosts[:8], "ring-b": hosts[8:]})


class Watch:
    """Console errors, page errors and requests that left the controller's origin."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.allowed: list[re.Pattern[str]] = []

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def open_page(chromium: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Callable[[str], tuple[Page, Watch]]]:
    """`open_page(origin)` -> a fresh tab and its Watch; checked and screenshotted at the end."""
    opened: list[tuple[Page, Watch]] = []

    def make(origin: str) -> tuple[Page, Watch]:
        page = chromium.new_page()
        watch = Watch(origin)
        page.on("console", lambda m: watch.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: watch.errors.append(f"page error: {e}"))
        page.on("request", lambda r: None if r.url.startswith(origin) else watch.foreign.append(r.url))
        opened.append((page, watch))
        return page, watch

    yield make
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for i, (page, watch) in enumerate(opened):
        if not page.is_closed():
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{i}.png"))
            page.close()
        assert not watch.foreign, f"requests left the controller: {watch.foreign}"
        assert not watch.unexpected(), f"browser errors: {watch.unexpected()}"


def login(page: Page, url: str, token: str) -> None:
    page.goto(f"{url}/console/")
    page.fill("[data-testid=token]", token)
    page.click("[data-testid=login] button[type=submit]")
    page.wait_for_selector("[data-testid=map]")


def click_edge(page: Page, link: str) -> None:
    """A real mouse click on the map edge of `link` (a link name or an edge key)."""
    xy = page.evaluate(CLICK_EDGE_JS, link)
    assert xy is not None, f"no clickable point on edge {link}"
    page.mouse.click(*xy)
