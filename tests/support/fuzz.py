"""Schemathesis against a live `c4 serve`: seed a small fabric, a job and a webhook, write a
config whose dictionaries hold the names the server knows (so generated requests reach past
404s into the real logic), run `st run` over every operation `/openapi.json` lists with a
fixed seed, and read its JSON report. Used by the fuzz tier (tests/fuzz) and bench.hardening.

What is checked (schemathesis' `--checks all`): no 5xx, every status and header documented,
responses match their schemas and content types, schema-violating requests refused,
schema-valid ones answered with a documented status (`schemathesis.toml`), auth not ignored,
undeclared methods answered 405 with `Allow`, stateful links (a deleted thing is gone).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.serve import Served

BASE_CONFIG = Path(__file__).resolve().parents[1] / "fuzz" / "schemathesis.toml"
SEED = 17
# The fuzz server's fabric bound: generation and PUT at the bound stay near a second on 2 cores
# (C4_MAX_FABRIC_LINKS' default, 262,144, makes one such request take tens of seconds).
FUZZ_SETTINGS = {"max_fabric_links": "20000", "max_fabric_switches": "2000"}


@dataclass
class FuzzRun:
    report: dict[str, Any]
    wall_s: float
    output: str

    @property
    def cases(self) -> int:
        return int(self.report["test_cases"]["generated"])

    @property
    def failures(self) -> list[Any]:
        return list(self.report.get("failures") or [])

    @property
    def errors(self) -> list[Any]:
        return list(self.report.get("errors") or [])


def seed(server: Served) -> dict[str, list[str]]:
    """A fabric, a job on it and a webhook; returns the names the fuzzer should try."""
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        http.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 4, "spines": 2,
                                                 "hosts_per_leaf": 2}).raise_for_status()
        hosts = [h["name"] for h in http.get("/v1/hosts").json()["hosts"]]
        http.post("/v1/jobs", json={"name": "fz-ring", "ranks": [{"rank": i, "host": h, "nic": "mlx5_0"}
                                                                 for i, h in enumerate(hosts[:4])],
                                    "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]}).raise_for_status()
        # A public address: accepted by the destination policy; deliveries fail (no network) and retry.
        http.post("/v1/webhooks", json={"url": "https://8.8.8.8/hook", "events": ["job.planned"],
                                        "secret": "fuzz-secret"}).raise_for_status()
        links = [x["name"] for x in http.get("/v1/links").json()["links"]]
        switches = [s["name"] for s in http.get("/v1/topology").json()["switches"]]
    return {"hosts": hosts, "jobs": ["fz-ring"], "links": links[:8], "switches": switches}


def config(path: Path, names: dict[str, list[str]]) -> Path:
    """The base config plus dictionaries of known names bound to the parameters that take them."""
    everything = names["hosts"] + names["jobs"] + names["links"] + names["switches"]
    lines = [BASE_CONFIG.read_text(), ""]
    for name, values in (("names", everything), ("hosts", names["hosts"]), ("jobs", names["jobs"]),
                         ("switches", names["switches"]), ("links", names["links"])):
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}", ""]
    lines += ["[parameters]"]
    for key, dictionary in (("path.name", "names"), ("query.host", "hosts"), ("query.job", "jobs"),
                            ("query.switch", "switches"), ("body.ranks[*].host", "hosts"), ("body.host", "hosts"),
                            ("body.records[*].job", "jobs"), ("body.samples[*].switch", "switches")):
        lines.append(f'"{key}" = {{ dictionary = "{dictionary}", probability = 0.5 }}')
    path.write_text("\n".join(lines) + "\n")
    return path


def run(server: Served, workdir: Path, max_examples: int, seed_value: int = SEED, workers: int = 1,
        timeout_s: float = 900) -> FuzzRun:
    names = seed(server)
    cfg = config(workdir / "schemathesis.toml", names)
    st = Path(sys.executable).parent / "st"
    reports = workdir / "reports"
    command = [str(st), "--config-file", str(cfg), "run", f"{server.url}/openapi.json",
               "-H", f"Authorization: Bearer {server.token}", "--checks", "all",
               "--max-examples", str(max_examples), "--seed", str(seed_value), "--workers", str(workers),
               "--request-timeout", "60", "--report", "json", "--report-dir", str(reports), "--no-color"]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    wall = time.monotonic() - start
    found = sorted(reports.glob("*.json"))
    assert found, f"schemathesis wrote no report (exit {done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    return FuzzRun(json.loads(found[-1].read_text()), wall, done.stdout + done.stderr)
