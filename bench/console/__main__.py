"""The web console in a real browser: first paint of the fabric map and interaction latency.

Run: `.venv/bin/python -m bench.console [--shapes a,b] [--repeat 3]` (Debian's chromium).
For each fabric shape it starts `c4 serve` (one uvicorn worker, a fresh SQLite file),
generates the fabric, plans one 64-rank ring job on it, then drives headless Chromium:

- first paint: a fresh browser profile opens `/console/` as a tab that signed in before (its
  token and role in the tab's session, as after a reload); the figure is the console's own
  `c4:map-painted` mark (the start of the frame after the one that drew the first map), in ms
  since navigation start; `c4:fabric-received` (when the page's code took the map state in)
  is printed beside it, so getting the data and drawing it can be told apart;
- interactions: a real mouse click, timed from its `pointerdown` event to the start of the
  frame after the one that shows the answer: an aggregated edge (or link) on the map -> its
  details in the inspector; the metric selector -> the map re-coloured; a group -> opened; a job's
  connection -> its paths highlighted; the breadcrumb -> back to the overview.

Targets (issue 15): 256 switches: first paint <= 1 s, interactions <= 200 ms; a 1,024-switch
clos3: first paint <= 3 s. What it measures is the console and the controller's read path;
the plans come from c4's own planner on generated fabrics (no traffic is involved).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TOKEN = "bench-console-admin"
# A tab that signed in before: token and role in its session, as after a reload.
SESSION_JS = ("sessionStorage.setItem('c4.console.token', %s); sessionStorage.setItem('c4.console.session', "
              "JSON.stringify({role: 'admin', may: ['links', 'hosts', 'alarms', 'jobs']}))")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
FIRST_PAINT_TARGET_MS = {256: 1000.0, 1024: 3000.0}
INTERACTION_TARGET_MS = 200.0
HERE = Path(__file__).parent


@dataclass(frozen=True)
class Shape:
    key: str
    label: str
    generate: dict[str, Any]
    nics: int = 1


SHAPES = [
    Shape("ls256", "leaf-spine 192 leaves x 64 spines, 4 hosts/leaf",
          {"kind": "leaf-spine", "leaves": 192, "spines": 64, "hosts_per_leaf": 4}),
    Shape("ls256-8nic", "leaf-spine 224 leaves x 32 spines, 2 hosts/leaf, 8 NICs/host",
          {"kind": "leaf-spine", "leaves": 224, "spines": 32, "hosts_per_leaf": 2, "nics_per_host": 8}, nics=8),
    Shape("clos256", "clos3 8 pods x (16 leaves + 8 spines) + 64 cores",
          {"kind": "clos3", "pods": 8, "leaves_per_pod": 16, "spines_per_pod": 8, "cores": 64, "hosts_per_leaf": 4}),
    Shape("clos1024", "clos3 32 pods x (16 leaves + 8 spines) + 256 cores",
          {"kind": "clos3", "pods": 32, "leaves_per_pod": 16, "spines_per_pod": 8, "cores": 256, "hosts_per_leaf": 4}),
]

# Set before each step: resolves with ms from the next pointerdown to the frame after `sel` matches.
LATENCY_JS = """(sel) => { window.__c4lat = new Promise((resolve) => {
  let t0 = null;
  document.addEventListener("pointerdown", (e) => { t0 = e.timeStamp; }, { capture: true, once: true });
  // the start of the frame after the one that shows the answer: it has been painted by then
  const done = () => requestAnimationFrame(() => requestAnimationFrame((t) => resolve(t - t0)));
  const mo = new MutationObserver(() => {
    if (t0 !== null && document.querySelector(sel)) { mo.disconnect(); done(); }
  });
  mo.observe(document.body, { subtree: true, childList: true, attributes: true });
}); }"""
CLICK_EDGE_JS = (HERE / "click_edge.js").read_text()


@dataclass
class Result:
    shape: Shape
    switches: int = 0
    links: int = 0
    payload_kb: float = 0.0
    payload_gz_kb: float = 0.0
    server_ms: list[float] = field(default_factory=list)
    received_ms: list[float] = field(default_factory=list)
    paint_ms: list[float] = field(default_factory=list)
    interactions: dict[str, list[float]] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(tmp: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "C4_DATA_DIR": tmp, "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning"}
    env.pop("C4_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


def _setup(http: httpx.Client, shape: Shape) -> str:
    """Store the fabric and plan a 64-rank ring on it; returns the job's name."""
    http.post("/v1/topology/generate", json=shape.generate).raise_for_status()
    hosts = sorted((h["name"] for h in http.get("/v1/hosts").json()["hosts"]), key=lambda n: int(n[4:]))
    per_host = 64 // shape.nics
    chosen = hosts[:: max(1, len(hosts) // per_host)][:per_host]  # spread over the fabric
    ranks = [{"rank": i, "host": h, "nic": f"mlx5_{n}"}
             for i, (h, n) in enumerate((h, n) for h in chosen for n in range(shape.nics))]
    job = {"name": "bench-ring", "ranks": ranks,
           "traffic": [{"pattern": "ring", "ranks": [r["rank"] for r in ranks], "channels": 2, "qps_per_connection": 2}]}
    http.post("/v1/jobs", json=job).raise_for_status()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = http.get("/v1/jobs/bench-ring").json()["status"]
        if status != "pending":
            if status != "planned":
                raise SystemExit(f"job {status}")
            return "bench-ring"
        time.sleep(0.5)
    raise SystemExit("job not planned in 300 s")


def _first_paint(pw: Any, url: str, result: Result) -> None:
    with tempfile.TemporaryDirectory(prefix="c4-bench-chromium-") as profile:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                    viewport={"width": 1440, "height": 900})
        try:
            ctx.add_init_script(SESSION_JS % json.dumps(TOKEN))
            page = _open(ctx, url)
            _wait_painted(page)
            marks = page.evaluate("['c4:fabric-received', 'c4:map-painted'].map(n => performance.getEntriesByName(n)[0].startTime)")
            result.received_ms.append(marks[0])
            result.paint_ms.append(marks[1])
        finally:
            ctx.close()


def _open(ctx: Any, url: str) -> Any:
    """A new tab on the console, signed in; it records what went wrong, for `_wait_painted`."""
    page = ctx.new_page()
    page.c4_problems = []
    page.on("pageerror", lambda e: page.c4_problems.append(f"page error: {e}"))
    page.on("console", lambda m: page.c4_problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("requestfailed", lambda r: page.c4_problems.append(f"request failed: {r.url} {r.failure}"))
    page.goto(f"{url}/console/")
    return page


def _wait_painted(page: Any, timeout_s: float = 60.0) -> None:
    # Polled from here: the console's CSP forbids the eval that wait_for_function needs.
    deadline = time.monotonic() + timeout_s
    while not page.evaluate("() => performance.getEntriesByName('c4:map-painted').length > 0"):
        if time.monotonic() > deadline:
            raise SystemExit(f"the map was not painted within 60 s; the page says: {page.inner_text('body')[:400]!r};"
                             f" problems: {page.c4_problems}")
        time.sleep(0.02)


def _timed_click(page: Any, expect: str, click: Any) -> float:
    page.evaluate(LATENCY_JS, expect)
    click()
    return float(page.evaluate("window.__c4lat"))


def _interactions(pw: Any, url: str, job: str, result: Result, shots: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="c4-bench-chromium-") as profile:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                    viewport={"width": 1440, "height": 900})
        try:
            ctx.add_init_script(SESSION_JS % json.dumps(TOKEN))
            page = _open(ctx, url)
            _wait_painted(page)
            got = result.interactions
            if shots:
                page.screenshot(path=str(shots / f"{result.shape.key}-overview.png"))

            # The busiest edge a click can single out (in a dense overview most points of an
            # edge are within 2 px of another one); found before the timed click.
            edges = page.evaluate("[...document.querySelectorAll('svg.map line.edge')].map(g => g.dataset.edge)")
            xy = next((p for p in (page.evaluate(CLICK_EDGE_JS, k) for k in reversed(edges[-60:])) if p), None)
            if xy is None:
                raise SystemExit("no edge of the overview can be clicked alone")
            got.setdefault("map edge -> details", []).append(_timed_click(
                page, "[data-testid=inspector] .details:not([data-testid=inspector-empty])", lambda: page.mouse.click(*xy)))
            got.setdefault("metric selector", []).append(_timed_click(
                page, "[data-testid=metric] button.on[data-metric=utilization]",
                lambda: page.click("[data-testid=metric] button[data-metric=utilization]")))
            page.click("[data-testid=metric] button[data-metric=planned]")
            group = page.evaluate("(document.querySelector('svg.map g.group') || {dataset: {}}).dataset.node")
            if group:
                gid = group[2:]
                got.setdefault("open group", []).append(_timed_click(
                    page, f"svg.map[data-level='group:{gid}']",
                    lambda: page.locator(f"svg.map g.group[data-node='{group}'] rect.box").dblclick()))
                got.setdefault("breadcrumb -> overview", []).append(_timed_click(
                    page, "svg.map[data-level=overview]", lambda: page.click("[data-testid=crumbs] button")))
            page.click(f"tr[data-job='{job}']")
            page.wait_for_selector("[data-conn]")
            got.setdefault("connection -> paths on map", []).append(_timed_click(
                page, "svg.map .hl-path", lambda: page.locator("[data-conn]").nth(3).click()))
        finally:
            ctx.close()


def _server_side(http: httpx.Client, result: Result) -> None:
    for _ in range(3):
        t = time.perf_counter()
        raw = http.get("/console/api/fabric", headers={"Accept-Encoding": "identity"})
        result.server_ms.append((time.perf_counter() - t) * 1000)
    gz = http.get("/console/api/fabric", headers={"Accept-Encoding": "gzip"})
    result.payload_kb = len(raw.content) / 1024
    result.payload_gz_kb = int(gz.headers.get("content-length", len(gz.content))) / 1024
    doc = raw.json()
    result.switches = len(doc["switches"]["name"])
    result.links = len(doc["links"]["name"])


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.0f} / {max(xs):5.0f}" if xs else "      —"


def report(results: list[Result]) -> None:
    print("\nfirst paint of the map (ms since navigation; median / max of runs):")
    print(f"{'shape':12} {'switches':>8} {'links':>6} {'state KB':>9} {'gzip KB':>8} {'API ms':>14} "
          f"{'state in':>14} {'map painted':>14}  target")
    for r in results:
        target = FIRST_PAINT_TARGET_MS.get(1024 if r.switches > 512 else 256)
        ok = "met" if r.paint_ms and max(r.paint_ms) <= target else "NOT met"
        print(f"{r.shape.key:12} {r.switches:8} {r.links:6} {r.payload_kb:9.0f} {r.payload_gz_kb:8.0f} "
              f"{_fmt(r.server_ms):>14} {_fmt(r.received_ms):>14} {_fmt(r.paint_ms):>14}  <= {target:.0f} ms: {ok}")
    print("\ninteractions (ms from pointerdown to the frame showing the answer; median / max):")
    kinds = sorted({k for r in results for k in r.interactions})
    print(f"{'shape':12} " + " ".join(f"{k[:26]:>26}" for k in kinds) + "  target")
    for r in results:
        worst = max((max(v) for v in r.interactions.values()), default=0.0)
        ok = "met" if worst <= INTERACTION_TARGET_MS else "NOT met"
        print(f"{r.shape.key:12} " + " ".join(f"{_fmt(r.interactions.get(k, [])):>26}" for k in kinds)
              + f"  <= {INTERACTION_TARGET_MS:.0f} ms: {ok}" + ("" if r.switches <= 512 else " (no target at 1,024)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(s.key for s in SHAPES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--screenshots", type=Path, default=None, help="Save each shape's overview here")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    wanted = args.shapes.split(",")
    results = []
    with sync_playwright() as pw:
        for shape in [s for s in SHAPES if s.key in wanted]:
            with tempfile.TemporaryDirectory(prefix="c4-bench-console-") as tmp:
                proc, url = _serve(tmp)
                try:
                    with httpx.Client(base_url=url, timeout=300, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                        t = time.perf_counter()
                        job = _setup(http, shape)
                        result = Result(shape)
                        _server_side(http, result)
                        print(f"{shape.key}: {shape.label}: {result.switches} switches, {result.links} links; "
                              f"set up and planned in {time.perf_counter() - t:.1f} s", flush=True)
                    for _ in range(args.repeat):
                        _first_paint(pw, url, result)
                        _interactions(pw, url, job, result, args.screenshots)
                    print(f"  first paint {[round(x) for x in result.paint_ms]} ms; "
                          + "; ".join(f"{k} {[round(x) for x in v]}" for k, v in result.interactions.items()), flush=True)
                    results.append(result)
                finally:
                    proc.terminate()
                    proc.wait(10)
    report(results)


if __name__ == "__main__":
    main()
