"""bench/agent: the node agent's own costs, measured on the real `c4-node-agent` process.

1. LOOKUP latency on the socket, the agent holding 1,000 jobs' assignments (8 local ranks,
   4 channels, 2 flows each: 64,000 flows), from a C client that speaks FORMAT.md like the
   shim: idle (once the agent has saved the filled plans to disk; its CPU then, holding the
   jobs with nothing flowing, is printed too), and while 10,000 records/s of telemetry flow
   through the same agent.
2. Forwarding: COLL records from a C sender (waking every 10 ms and packing what is due into
   BATCH datagrams, and waiting out a full agent queue, as the shim does) through the agent to
   an HTTP sink: the rate the agent sustains (batched, and one record per datagram), and its
   CPU (its own utime + stime from /proc) at a fixed 10,000 records/s.

The controller is `bench.agent.sink` (a stand-in that lists the jobs and swallows posts), so
the figures are the agent's; the controller's ingest is bench/diagnosis/ingest.py's figure.
Physics: real Unix datagram sockets and HTTP over loopback, real processes; nothing modelled.

    .venv/bin/python -m bench.agent [--jobs 1000] [--lookups 20000] [--records 300000]
                                    [--senders 8] [--send-us 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = HERE / "build"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait(pred: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit(f"bench/agent: timed out waiting for {what}")


def settle(pid: int, limit_s: float = 60.0) -> float:
    """Wait until the process used under 5 % of a core over one second; returns the wait."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        c0 = cpu_s(pid)
        time.sleep(1.0)
        if cpu_s(pid) - c0 < 0.05:
            break
    return round(time.monotonic() - t0, 1)


def run_json(argv: list[str], timeout_s: float = 600) -> dict[str, Any]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--lookups", type=int, default=20000)
    p.add_argument("--records", type=int, default=300000)
    p.add_argument("--fixed-rate", type=int, default=10000)
    p.add_argument("--fixed-seconds", type=float, default=10.0)
    p.add_argument("--senders", type=int, default=8, help="processes sharing the fixed rate")
    p.add_argument("--send-us", type=int, default=10000,
                   help="the senders' period (the shim's C4_SEND_US) in the fixed-rate runs")
    p.add_argument("--encoding", choices=("packed", "json"), default="packed",
                   help="the telemetry form the stand-in controller offers (json: it has no packed form)")
    a = p.parse_args()
    subprocess.run(["make", "-s", "-C", str(HERE)], check=True)
    work = Path(tempfile.mkdtemp(prefix="c4-bench-agent-"))
    sink_port, web_port = free_port(), free_port()
    ranks, channels, qps = 8, 4, 2
    sink = subprocess.Popen([sys.executable, "-m", "bench.agent.sink", "--port", str(sink_port),
                             "--jobs", str(a.jobs), "--ranks", str(ranks), "--channels",
                             str(channels), "--qps", str(qps),
                             *(["--json-only"] if a.encoding == "json" else [])],
                            cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
    sock = str(work / "shim.sock")
    env = {**os.environ, "C4_AGENT_CONTROLLER": f"http://127.0.0.1:{sink_port}",
           "C4_AGENT_HOST": "benchhost", "C4_AGENT_SOCKET": sock,
           "C4_AGENT_SPOOL": str(work / "spool"), "C4_AGENT_SHIM_PORT": "0",
           "C4_AGENT_LISTEN": f"127.0.0.1:{web_port}", "C4_AGENT_PROBE_INTERVAL_S": "0",
           "C4_AGENT_LOG_LEVEL": "warning"}
    agent = subprocess.Popen([sys.executable, "-m", "node_agent.cli"], cwd=ROOT, env=env)
    results: dict[str, Any] = {"jobs": a.jobs, "flows": a.jobs * ranks * channels * qps,
                               "encoding": a.encoding}
    try:
        health = f"http://127.0.0.1:{web_port}/healthz"

        def flows() -> int:
            try:
                return int(httpx.get(health, timeout=2).json()["flows"])
            except (httpx.HTTPError, ValueError, KeyError):
                return 0

        t0 = time.monotonic()
        wait(lambda: flows() >= results["flows"], 300, f"{results['flows']} flows in the cache")
        results["cache_fill_s"] = round(time.monotonic() - t0, 1)
        # Steady state: the agent saves the filled plans to disk once (a thread, seconds for
        # 64,000 flows); lookups are measured after it, as a running host sees them. Then the
        # agent's CPU with nothing flowing: what holding 1,000 jobs costs (long-polls, job list).
        results["settle_s"] = settle(agent.pid)
        c0, w0 = cpu_s(agent.pid), time.monotonic()
        time.sleep(10.0)
        results["idle_cpu_pct_of_one_core"] = round(100 * (cpu_s(agent.pid) - c0) / (time.monotonic() - w0), 1)
        lk = [str(BUILD / "lookup_client"), sock, str(a.lookups), str(a.jobs), str(ranks),
              str(channels)]
        # the floor: the same client against a minimal C responder, on this machine, now
        echo_sock = str(work / "echo.sock")
        echo = subprocess.Popen([str(BUILD / "echo_agent"), echo_sock], stdout=subprocess.PIPE,
                                text=True)
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        results["lookup_floor"] = run_json([lk[0], echo_sock, *lk[2:]])
        echo.kill()
        echo.wait()
        results["lookup_idle"] = run_json(lk)
        # the same, while telemetry flows through the agent at the fixed rate
        fire = subprocess.Popen([str(BUILD / "firehose"), sock,
                                 str(int(a.fixed_rate * 60)), str(a.fixed_rate), "bjob0", "0"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        results["lookup_under_load"] = run_json(lk)
        fire.kill()
        fire.wait()
        time.sleep(2.0)
        results["settle_before_fixed_rate_s"] = settle(agent.pid)  # the killed sender's backlog done
        stats = f"http://127.0.0.1:{sink_port}/bench/stats"
        # CPU at a fixed rate
        n = int(a.fixed_rate * a.fixed_seconds)
        before, c0, w0 = httpx.get(stats).json()["records"], cpu_s(agent.pid), time.monotonic()
        sent = run_json([str(BUILD / "firehose"), sock, str(n), str(a.fixed_rate), "bjob0", "0",
                         "64", str(a.send_us)])
        results["fixed_rate_datagrams"] = sent["datagrams"]
        w1, c1 = time.monotonic(), cpu_s(agent.pid)
        wait(lambda: httpx.get(stats).json()["records"] - before >= n, 60, "the fixed-rate records")
        results["fixed_rate"] = {"records_s": round(sent["rate"]),
                                 "agent_cpu_pct_of_one_core": round(100 * (c1 - c0) / (w1 - w0), 1),
                                 "delivered": httpx.get(stats).json()["records"] - before}
        # the same rate from the 8 NCCL processes of an 8-GPU host (ranks 0-7 of one job),
        # each sending its own ring every 10 ms: 8x the datagrams, each with 1/8 of the records
        settle(agent.pid)
        per = a.fixed_rate // a.senders
        before, c0, w0 = httpx.get(stats).json()["records"], cpu_s(agent.pid), time.monotonic()
        procs = [subprocess.Popen([str(BUILD / "firehose"), sock, str(int(per * a.fixed_seconds)),
                                   str(per), "bjob0", str(r), "64", str(a.send_us)],
                                  stdout=subprocess.PIPE, text=True)
                 for r in range(a.senders)]
        outs = [json.loads(p.communicate(timeout=a.fixed_seconds + 60)[0].strip().splitlines()[-1])
                for p in procs]
        w1, c1 = time.monotonic(), cpu_s(agent.pid)
        n = int(per * a.fixed_seconds) * a.senders
        wait(lambda: httpx.get(stats).json()["records"] - before >= n, 60, "the 8 senders' records")
        results["fixed_rate_senders"] = {
            "senders": a.senders, "records_s": round(sum(o["rate"] for o in outs)),
            "datagrams": sum(o["datagrams"] for o in outs),
            "agent_cpu_pct_of_one_core": round(100 * (c1 - c0) / (w1 - w0), 1),
            "delivered": httpx.get(stats).json()["records"] - before}
        # as fast as the agent takes them: batched as a busy shim sends them, and one record
        # per datagram (a shim that finds one record per drain)
        for key, batch, count in (("max_rate", 64, a.records),
                                  ("max_rate_unbatched", 1, a.records // 3)):
            before, c0 = httpx.get(stats).json()["records"], cpu_s(agent.pid)
            sent = run_json([str(BUILD / "firehose"), sock, str(count), "0", "bjob0", "0",
                             str(batch)])
            t_fire = sent["seconds"]
            got = wait(lambda n=count, b=before: (
                (s := httpx.get(stats).json())["records"] - b >= n and s), 120,
                "every record at the sink")
            c1 = cpu_s(agent.pid)
            # from the first record sent to the post that brought the sink the last one
            wall = (got["last_us"] - sent["t0_us"]) / 1e6
            results[key] = {"records": count, "datagrams": sent["datagrams"], "sender_s": t_fire,
                            "delivered_s": round(wall, 3), "records_s": round(count / wall),
                            "agent_cpu_s": round(c1 - c0, 2), "sender_waits": sent["waits"],
                            "delivered": got["records"] - before}
        # the agent's count of communicator ranks named two ways (the senders' records must be
        # consistent, as NCCL's are: a conflict invalidates the agent's record formats)
        metrics = httpx.get(f"http://127.0.0.1:{web_port}/metrics", timeout=5).text
        results["rank_conflicts"] = sum(float(line.split()[-1]) for line in metrics.splitlines()
                                        if line.startswith("c4_agent_rank_conflicts_total"))
    finally:
        agent.terminate()
        agent.wait(30)
        sink.terminate()
        sink.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results))
    lf, li, ll = results["lookup_floor"], results["lookup_idle"], results["lookup_under_load"]
    fr, mr, mu = results["fixed_rate"], results["max_rate"], results["max_rate_unbatched"]
    fs = results["fixed_rate_senders"]
    print(f"""
Telemetry posted as {a.encoding}; rank conflicts the agent counted: {results['rank_conflicts']:g}.

| measure | figure | target |
|---|---|---|
| LOOKUP round trip against a minimal C responder (this machine's floor, now) | p50 {lf['p50_us']} µs, p99 {lf['p99_us']} µs, max {lf['max_us']} µs | |
| LOOKUP round trip, {results['flows']:,} flows of {a.jobs} jobs cached, idle | p50 {li['p50_us']} µs, p99 {li['p99_us']} µs, max {li['max_us']} µs ({li['hits']}/{li['count']} answered with flows) | p99 ≤ 1 ms |
| LOOKUP round trip, same, with {a.fixed_rate:,} records/s flowing | p50 {ll['p50_us']} µs, p99 {ll['p99_us']} µs, max {ll['max_us']} µs | p99 ≤ 1 ms |
| forwarding, as fast as taken, batched as the shim sends them | {mr['records_s']:,} records/s ({mr['records']:,} records in {mr['datagrams']:,} datagrams, first sent to last at the sink in {mr['delivered_s']} s, {mr['agent_cpu_s']} s of agent CPU) | ≥ 50,000/s |
| forwarding, as fast as taken, one record per datagram | {mu['records_s']:,} records/s ({mu['records']:,} records in {mu['delivered_s']} s, {mu['agent_cpu_s']} s of agent CPU) | |
| agent CPU at {a.fixed_rate:,} records/s from one process (sending every {a.send_us / 1000:g} ms) | {fr['agent_cpu_pct_of_one_core']} % of one core ({fr['delivered']:,} delivered in {results['fixed_rate_datagrams']:,} datagrams) | ≤ 10 % |
| agent CPU at {fs['records_s']:,} records/s from {fs['senders']} processes (an 8-GPU host), each sending every {a.send_us / 1000:g} ms | {fs['agent_cpu_pct_of_one_core']} % of one core ({fs['delivered']:,} delivered in {fs['datagrams']:,} datagrams) | ≤ 10 % |
| agent CPU with nothing flowing, {a.jobs} jobs held (long-polls, job list) | {results['idle_cpu_pct_of_one_core']} % of one core (measured after {results['settle_s']} s of settling) | |
""")


if __name__ == "__main__":
    main()
