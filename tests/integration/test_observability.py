"""Prometheus and Grafana as shipped in deploy/: promtool checks the rules (and their unit
tests) and a live `/metrics` of a controller with a fabric, a planned job, a link down, an
isolated host and an open alarm; the gauges say what the API says; every metric the dashboard
and the rules name is served (or is one of the switch agents' measured metrics)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms
from controller.services.clock import now_us
from tests.support.live import live_controller

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMTOOL = shutil.which("promtool")
MAX_SERIES = 10
# Served by the switch agents' part once switches report (deploy/README.md).
MEASURED = {"c4_link_measured_utilization", "c4_link_ecn_marks_per_second", "c4_link_ecn_marked_fraction",
            "c4_link_pfc_pauses_per_second", "c4_link_congested"}
# Prometheus' own series.
BUILTIN = {"up"}

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is missing: Debian's prometheus package "
                                                         "provides it (make test installs it)")


def promtool(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=60)


def test_config_rules_and_rule_tests_pass_promtool() -> None:
    prom = DEPLOY / "prometheus"
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "c4-alerts.yml"),
                 ("test", "rules", "c4-alerts.test.yml")):
        out = promtool(*args, cwd=prom)
        assert out.returncode == 0, (args, out.stdout, out.stderr)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A controller with a fabric, a planned job, a link down and an open alarm (which isolated
    its host): its `/metrics` and what the API says at the same moment."""
    with live_controller(tmp_path_factory.mktemp("metrics"), link_metrics_max_series=MAX_SERIES) as live:
        live.http.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 4, "spines": 2,
                                                      "hosts_per_leaf": 2}).raise_for_status()
        ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(8)]
        live.http.post("/v1/jobs", json={"name": "train", "ranks": ranks,
                                         "traffic": [{"pattern": "ring", "ranks": list(range(8))}]}).raise_for_status()
        live.wait_planned("train")
        used = next(r["name"] for r in live.http.get("/v1/jobs/train/links").json()["links"] if not r["host_link"])
        live.http.patch(f"/v1/links/{used}", json={"state": "down"}).raise_for_status()
        alarm = Alarm("obs-1", AlarmKind.COMM_SLOW, "train", "0x1", 4, (Suspect(SuspectKind.NIC_PORT, "host2:mlx5_0:p0"),),
                      {"summary": "connection 1->2 at 20% of its peers' median"}, now_us())
        alarms.record(live.runtime, [AlarmEvent("opened", alarm, now_us())])
        deadline = time.monotonic() + 20
        while True:  # a scrape and an API read of the same plan (its refresh after the link change may land between)
            before = live.http.get("/v1/jobs/train").json()
            text = live.http.get("/metrics").text
            after = live.http.get("/v1/jobs/train").json()
            if before == after or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        yield {"text": text, "job": after, "down": used, "links": live.http.get("/v1/links").json()["links"]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(text: str) -> set[str]:
    """Family names and sample names (the parser drops a counter's `_total` from its family)."""
    out = set()
    for f in text_string_to_metric_families(text):
        out.add(f.name)
        if f.type == "counter":
            out.add(f"{f.name}_total")
        out.update(s.name for s in f.samples)
    return out


def test_live_metrics_pass_promtool_check_metrics(scraped: dict[str, Any]) -> None:
    out = promtool("check", "metrics", stdin=scraped["text"])
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr.strip() == "", (out.stdout, out.stderr)


def test_gauges_say_what_the_api_says(scraped: dict[str, Any]) -> None:
    got = samples(scraped["text"])
    plan = scraped["job"]["plan"]
    job = (("job_name", "train"),)
    assert got[("c4_job_max_link_utilization", job)] == pytest.approx(plan["max_link_utilization"])
    assert got[("c4_job_lower_bound", job)] == pytest.approx(plan["lower_bound"])
    assert got[("c4_job_ecmp_expected_max_utilization", job)] == pytest.approx(plan["ecmp_expected_max_utilization"])
    assert got[("c4_job_version", job)] == scraped["job"]["version"]
    assert got[("c4_job_status", (("job_name", "train"), ("status", "planned")))] == 1
    assert got[("c4_job_status", (("job_name", "train"), ("status", "failed")))] == 0
    assert got[("c4_alarms_open", (("kind", "comm_slow"),))] == 1
    assert got[("c4_alarms_open", (("kind", "comm_hang"),))] == 0
    assert got[("c4_hosts_isolated", ())] == 1
    assert got[("c4_link_down", (("link", scraped["down"]), ("state", "down")))] == 1
    assert got[("c4_planner_duration_seconds_count", (("operation", "plan"),))] >= 1
    assert got[("c4_planner_duration_seconds_count", (("operation", "link_replan"),))] >= 1
    assert got[("c4_detector_duration_seconds_count", ())] >= 1


def test_per_link_series_are_capped_to_the_most_utilized(scraped: dict[str, Any]) -> None:
    got = samples(scraped["text"])
    util = {dict(labels)["link"] + "/" + dict(labels)["direction"]: v
            for (name, labels), v in got.items() if name == "c4_link_planned_utilization"}
    api = {f"{x['name']}/{d}": x["load"][d]["planned_utilization"] for x in scraped["links"] for d in ("ab", "ba")}
    assert len(util) == MAX_SERIES and got[("c4_link_planned_directions_omitted", ())] == len(api) - MAX_SERIES
    for key, value in util.items():
        assert value == pytest.approx(api[key])
    assert min(util.values()) >= max(v for k, v in api.items() if k not in util) - 1e-9


def _exprs_of_dashboard(dashboard: dict[str, Any]) -> list[str]:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exprs = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            exprs.append(target["expr"])
    return exprs


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\bc4_[a-z0-9_]+", expr)) | ({"up"} if re.search(r"\bup\{", expr) else set())
    return {re.sub(r"_(bucket|count|sum)$", "", n) if n.endswith(("_bucket", "_count", "_sum")) else n for n in names}


def test_dashboard_and_rules_parse_and_name_only_served_metrics(scraped: dict[str, Any], tmp_path: Path) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "c4-dashboard.json").read_text())
    exprs = [e.replace("$job", ".*") for e in _exprs_of_dashboard(dashboard)]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "c4-alerts.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    records = {"groups": [{"name": "dashboard", "rules": [{"record": f"c4:dashboard:expr{i}", "expr": e}
                                                         for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump(records))
    out = promtool("check", "rules", str(tmp_path / "dashboard-rules.yml"))
    assert out.returncode == 0, out.stdout + out.stderr  # every PromQL expression parses
    served = families(scraped["text"]) | MEASURED | BUILTIN
    named = set().union(*(_metric_names(e) for e in exprs))
    assert named - served == set(), f"named but not served: {sorted(named - served)}"
    assert {"c4_job_max_link_utilization", "c4_link_planned_utilization", "c4_alarms_open",
            "c4_planner_duration_seconds", "c4_link_measured_utilization"} <= named
