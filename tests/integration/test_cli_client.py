"""The `c4` client commands against a real controller over HTTP (uvicorn on loopback, SQLite):
tables and outputs, where the server and token come from, one-line errors with the API's exit
codes, canonical link names suggested, and the actions (link, host, alarm, token)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from controller.cli import app
from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms
from controller.services.clock import now_us
from controller.store import tokens_repo
from controller.store.db import transaction
from tests.support.live import Live, live_controller

RANKS = 8


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_controller(tmp_path_factory.mktemp("cli")) as server:
        r = server.http.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 4, "spines": 2,
                                                            "hosts_per_leaf": 2})
        assert r.status_code == 201, r.text
        ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(RANKS)]
        job = {"name": "train", "ranks": ranks,
               "traffic": [{"pattern": "ring", "ranks": list(range(RANKS)), "qps_per_connection": 2}]}
        assert server.http.post("/v1/jobs", json=job).status_code == 202
        assert server.wait_planned("train")["status"] == "planned"
        yield server


def c4(live: Live | None, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run `c4 ARGS` in-process, pointed at `live` through C4_URL/C4_TOKEN (no config file)."""
    base = {"C4_CONFIG": "/nonexistent/c4.toml", "C4_URL": "", "C4_TOKEN": ""}
    if live is not None:
        base |= {"C4_URL": live.url, "C4_TOKEN": live.token}
    result = CliRunner().invoke(app, list(args), env=base | (env or {}))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_jobs_as_table_wide_json_and_yaml(live: Live) -> None:
    api = live.http.get("/v1/jobs").json()
    plan = api["jobs"][0]["plan"]
    table = c4(live, "get", "jobs")
    assert table.exit_code == 0, table.output
    head, row = rows(table.stdout)
    assert head == ["NAME", "STATUS", "VERSION", "FLOWS", "MAX-UTIL", "BOUND", "ECMP", "AGE"]
    assert row[:7] == ["train", "planned", str(api["jobs"][0]["version"]), str(plan["flows"]),
                       f"{plan['max_link_utilization']:.3f}", f"{plan['lower_bound']:.3f}",
                       f"{plan['ecmp_expected_max_utilization']:.3f}"]
    wide = c4(live, "get", "jobs", "-o", "wide").stdout
    assert "SOLVER" in wide.splitlines()[0] and plan["solver"] in wide
    as_json = json.loads(c4(live, "get", "jobs", "-o", "json").stdout)
    assert as_json["jobs"][0]["plan"] == plan and as_json["jobs"][0]["created_at"].endswith("Z")
    assert yaml.safe_load(c4(live, "get", "job", "train", "-o", "yaml").stdout)["plan"] == plan


def test_describe_job_shows_plan_c4_bound_ecmp_links_and_alarms(live: Live) -> None:
    """(Before any test changes the fabric: a re-plan's summary refresh would race the reads.)"""
    job = live.http.get("/v1/jobs/train").json()
    links = live.http.get("/v1/jobs/train/links").json()["links"]
    out = c4(live, "describe", "job", "train", "--top", "3")
    assert out.exit_code == 0, out.output
    text = out.stdout
    plan = job["plan"]
    assert f"max link utilization   {plan['max_link_utilization']:.3f}  " \
           f"{plan['ecmp_expected_max_utilization']:.3f}" in text
    assert f"lower bound (proven)   {plan['lower_bound']:.3f}" in text
    assert f"Links (most utilized first; 3 of {len(links)} link directions)" in text
    assert links[0]["name"] in text and "Alarms" in text


def test_get_links_filters_sorts_and_shows_both_directions(live: Live) -> None:
    api = live.http.get("/v1/links", params={"kind": "fabric"}).json()["links"]
    out = c4(live, "get", "links", "--kind", "fabric", "--sort-by", "utilization")
    assert out.exit_code == 0, out.output
    got = rows(out.stdout)
    assert got[0] == ["NAME", "STATE", "GBPS", "UTIL-AB", "UTIL-BA", "FLOWS-AB", "FLOWS-BA"]
    assert len(got) == 1 + len(api)
    busiest = max(api, key=lambda x: (x["max_planned_utilization"], [-ord(c) for c in x["name"]]))
    assert got[1][0] == busiest["name"]
    assert got[1][3] == f"{busiest['load']['ab']['planned_utilization']:.3f}"


def test_server_and_token_come_from_flags_env_or_config_file(live: Live, tmp_path: Path) -> None:
    config = tmp_path / "c4.toml"
    config.write_text(f'url = "{live.url}"\ntoken = "{live.token}"\n')
    assert c4(None, "get", "hosts", env={"C4_CONFIG": str(config)}).exit_code == 0
    assert c4(None, "get", "hosts", "--server", live.url, "--token", live.token).exit_code == 0
    flag_wins = c4(live, "get", "hosts", "--token", "wrong")
    assert flag_wins.exit_code == 3 and flag_wins.stderr.strip() == "error: invalid or revoked token (unauthorized)"
    no_token = c4(live, "get", "hosts", env={"C4_TOKEN": ""})
    assert no_token.exit_code == 3 and "--token or C4_TOKEN" in no_token.stderr


def test_errors_are_one_line_with_the_api_exit_code(live: Live) -> None:
    missing = c4(live, "describe", "job", "nope")
    assert (missing.exit_code, missing.stderr) == (4, "error: no job named 'nope'\n")
    with transaction(live.runtime.sessions) as s:
        _, viewer = tokens_repo.create(s, "cli-viewer", "viewer", now_us())
    forbidden = c4(live, "link", "down", "leaf0:Ethernet0--spine0:Ethernet0", "--token", viewer)
    assert forbidden.exit_code == 3 and len(forbidden.stderr.splitlines()) == 1 and "(forbidden)" in forbidden.stderr
    unreachable = c4(live, "get", "jobs", "--server", "http://127.0.0.1:1")
    assert unreachable.exit_code == 6 and "cannot reach the controller at http://127.0.0.1:1" in unreachable.stderr
    bad_state = c4(live, "get", "alarms", "--state", "sleeping")
    assert bad_state.exit_code == 2 and bad_state.stderr.startswith("error: query.state: ")


def test_a_reversed_or_unknown_link_name_suggests_the_canonical_one(live: Live) -> None:
    link = live.http.get("/v1/links", params={"kind": "fabric"}).json()["links"][0]
    reversed_name = f"{link['b']}:{link['b_port']}--{link['a']}:{link['a_port']}"
    out = c4(live, "link", "down", reversed_name)
    assert out.exit_code == 4
    assert out.stderr == f"error: no link named {reversed_name!r}; did you mean {link['name']!r}?\n"
    assert live.http.get(f"/v1/links/{link['name']}").json()["state"] == "up"  # nothing changed
    by_switches = c4(live, "describe", "link", f"{link['b']}--{link['a']}")
    assert by_switches.exit_code == 4 and repr(link["name"]) in by_switches.stderr
    typo = c4(live, "get", "links", link["name"].replace("Ethernet", "Etherent", 1))
    assert typo.exit_code == 4 and f"did you mean {link['name']!r}?" in typo.stderr


def test_link_down_drain_up_replan_and_describe(live: Live) -> None:
    used = live.http.get("/v1/jobs/train/links").json()["links"]
    name = next(r["name"] for r in used if not r["host_link"])
    down = c4(live, "link", "down", name)
    assert down.exit_code == 0, down.output
    patched = live.http.get(f"/v1/links/{name}").json()
    assert patched["state"] == "down" and patched["load"]["ab"]["flows"] == patched["load"]["ba"]["flows"] == 0
    assert down.stdout.startswith(f"link {name} is down; ") and "assignment(s) re-planned" in down.stdout
    described = c4(live, "describe", "link", name).stdout
    assert "State:" in described and "down" in described and "Jobs on it\nnone" in described
    assert rows(c4(live, "get", "links", "--state", "down").stdout)[1][:2] == [name, "down"]
    assert c4(live, "link", "drain", name).stdout.startswith(f"link {name} is drained")
    up = c4(live, "link", "up", name, "-o", "json")
    assert up.exit_code == 0 and json.loads(up.stdout)["state"] == "up"


def test_alarm_and_host_actions(live: Live) -> None:
    alarm = Alarm(incident_key="cli-1", kind=AlarmKind.COMM_SLOW, job="train", comm="0x9", seq=3,
                  suspects=(Suspect(SuspectKind.NIC_PORT, "host3:mlx5_0:p0"), Suspect(SuspectKind.HOST, "host3")),
                  evidence={"summary": "connection 2->3 at 20% of its peers' median", "ratio": 0.2},
                  opened_at_us=now_us())
    [alarm_id] = alarms.record(live.runtime, [AlarmEvent("opened", alarm, now_us())])
    listed = rows(c4(live, "get", "alarms").stdout)
    assert listed[1][:5] == [alarm_id, "train", "comm_slow", "open", "nic_port:host3:mlx5_0:p0"]
    described = c4(live, "describe", "alarm", str(int(alarm_id[2:]))).stdout
    assert "connection 2->3 at 20% of its peers' median" in described and "host isolated" in described
    assert c4(live, "alarm", "ack", alarm_id).stdout == f"alarm {alarm_id} is acknowledged\n"
    assert c4(live, "alarm", "resolve", alarm_id).stdout == f"alarm {alarm_id} is resolved\n"
    again = c4(live, "alarm", "ack", alarm_id)
    assert again.exit_code == 5 and again.stderr == f"error: alarm {alarm_id} is already resolved\n"
    assert c4(live, "host", "release", "host3").stdout == "host host3 is active\n"
    isolated = c4(live, "host", "isolate", "host6", "--reason", "ECC errors")
    assert isolated.stdout == "host host6 is isolated (ECC errors)\n"
    assert rows(c4(live, "get", "hosts", "--state", "isolated").stdout)[1][:2] == ["host6", "isolated"]
    assert c4(live, "host", "release", "host6").exit_code == 0
    unknown = c4(live, "host", "isolate", "host99", "--reason", "x")
    assert (unknown.exit_code, unknown.stderr) == (4, "error: no host named 'host99'\n")


def test_token_list_and_revoke(live: Live) -> None:
    with transaction(live.runtime.sessions) as s:
        token_id, value = tokens_repo.create(s, "ci-scheduler", "scheduler", now_us())
    listed = c4(live, "token", "list")
    assert listed.exit_code == 0 and value not in listed.stdout
    assert [str(token_id), "ci-scheduler", "scheduler", "active"] in [r[:4] for r in rows(listed.stdout)]
    assert c4(live, "get", "jobs", "--token", value).exit_code == 0
    revoked = c4(live, "token", "revoke", str(token_id))
    assert revoked.stdout == f"token {token_id} (ci-scheduler, scheduler) is revoked\n"
    assert c4(live, "get", "jobs", "--token", value).exit_code == 3  # at once, on this process


def test_watch_prints_again_when_something_changes(live: Live) -> None:
    """`--watch`, piped: the table first, then again each time the data changes, not when
    only an age moves on (a real process)."""
    env = {**os.environ, "C4_URL": live.url, "C4_TOKEN": live.token, "C4_CONFIG": "/nonexistent"}
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "get", "hosts", "--state", "isolated", "--watch",
                             "--interval", "0.3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "No hosts found.\n"
        live.http.post("/v1/hosts/host5/isolate", json={"reason": "watch test"}).raise_for_status()
        deadline = time.monotonic() + 20
        seen = []
        while time.monotonic() < deadline and not any(line.startswith("host5") for line in seen):
            seen.append(proc.stdout.readline())
        assert any(line.split()[:2] == ["host5", "isolated"] for line in seen), seen
        ready, _, _ = select.select([proc.stdout], [], [], 1.5)  # ages move on; the data does not
        assert ready == [], proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(10)
        live.http.post("/v1/hosts/host5/release", json={})


def _problems(stderr: str, path: Path) -> list[tuple[str, str]]:
    out = []
    for line in stderr.splitlines():
        assert line.startswith(f"error: {path}: "), line
        field, _, message = line.removeprefix(f"error: {path}: ").partition(": ")
        out.append((field, message))
    return out


def test_plan_validates_the_fabric_exactly_as_put_topology(live: Live, tmp_path: Path) -> None:
    doc = live.http.get("/v1/topology").json()
    job = {"name": "w", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in (0, 2, 5, 7)],
           "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    misspelled = json.loads(json.dumps(doc))
    misspelled["links"][1]["b"] = misspelled["links"][1]["b"].replace("spine", "spnie")
    unknown_key = json.loads(json.dumps(doc))
    unknown_key["switches"][0]["colour"] = "blue"
    unknown_key["hosts"][0]["nics"][0]["ports"][0]["capacity_gbps"] = -1
    for case, bad in (("misspelled", misspelled), ("unknown_key", unknown_key)):
        path = tmp_path / f"{case}.json"
        path.write_text(json.dumps(bad))
        put = live.http.put("/v1/topology", json=bad)
        assert put.status_code == 422, put.text
        expected = [(e["field"], e["message"]) for e in put.json()["error"]["details"]["errors"]]
        out = c4(None, "plan", str(path), str(tmp_path / "job.json"))
        assert out.exit_code == 2 and _problems(out.stderr, path) == expected, (out.stderr, expected)
    assert live.http.get("/v1/topology").json() == doc  # the refused PUTs changed nothing


def test_plan_names_the_down_link_and_suggests_for_unknown_ones(live: Live, tmp_path: Path) -> None:
    (tmp_path / "fabric.json").write_text(json.dumps(live.http.get("/v1/topology").json()))
    ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)]
    (tmp_path / "job.json").write_text(json.dumps({"name": "w", "ranks": ranks,
                                                   "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]}))
    link = live.http.get("/v1/links", params={"kind": "fabric"}).json()["links"][0]
    files = [str(tmp_path / "fabric.json"), str(tmp_path / "job.json")]
    wrong = f"{link['b']}:{link['b_port']}--{link['a']}:{link['a_port']}"
    out = c4(None, "plan", *files, "--down", wrong)
    assert out.exit_code == 4
    assert out.stderr == (f"error: --down: no link named {wrong!r} in {files[0]}; "
                          f"did you mean {link['name']!r}?\n")
    ok = c4(None, "plan", *files, "--down", link["name"])
    assert ok.exit_code == 0 and ok.stderr == ""  # piped: no progress lines
    assert f"links down: {link['name']}" in ok.stdout.splitlines()
    as_json = json.loads(c4(None, "plan", *files, "--down", link["name"], "--json").stdout)
    assert as_json["links_down"] == [link["name"]] and all(r["link"] != link["name"] for r in as_json["links"])


def test_plan_shows_its_phases_on_a_terminal(live: Live, tmp_path: Path) -> None:
    """stderr on a pseudo-terminal: the phase line (with the elapsed time) is drawn there."""
    (tmp_path / "fabric.json").write_text(json.dumps(live.http.get("/v1/topology").json()))
    ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(8)]
    (tmp_path / "job.json").write_text(json.dumps({"name": "w", "ranks": ranks, "traffic": [{"pattern": "alltoall"}]}))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "plan", str(tmp_path / "fabric.json"),
                             str(tmp_path / "job.json")], stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "TERM": "xterm"})
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and b"max link utilization" in stdout
    # the status redraws at its own pace: a short phase may never be drawn, the last one is
    assert re.search(rb"(finding candidate paths|planning 56 flows|comparing with ECMP) \(\d+\.\d s\)", seen), seen
