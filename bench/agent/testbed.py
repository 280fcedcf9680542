"""bench/agent on the testbed: the node agent's two fabric figures, on real sockets.

1. Probing: 64 source ports probed across the testbed's 2-tier path (host0 on leaf0 to host3
   on leaf1, through a spine), TCP SYNs to the shim's port 4792 with TTL 1, 2, ...: the time
   of `node_agent.prober.probe` itself, run in host0's namespace, `--probes` times.
2. Weight changes: a live connection of two flows (job ranks on host1 and host3, the real shim
   driven by nccl_shim's fake NCCL `live` scenario: a 200 kB message every 20 ms), the real
   `c4 serve` and a real `c4-node-agent` per host. The controller's version is bumped
   `--bumps` times with alternating weights (written into its database as its balancing
   would); each latency runs from the commit to the first of two messages running whose bytes,
   by the kernel's per-socket counts (TCP_INFO: bytes written into each socket), split as the
   new weights say; and, second figure, until the bytes the receiver acknowledged do too.

Physics: Linux forwarding and 5-tuple hashing in network namespaces, TCP over veths shaped by
HTB at 200 Mbit/s, real processes; the figures include the controller's long-poll, the agent's
push and the shim's next message. Root only (the testbed).

    .venv/bin/python -m bench.agent.testbed [--bumps 10] [--probes 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed import FabricSpec, Testbed
from tests.agent.procs import (
    Agent,
    Controller,
    build_shim,
    split_changed_at,
    start_live,
    wait_for,
)

SPEC = FabricSpec(leaves=2, spines=2, hosts_per_leaf=2, rate_mbit=200, seed=3)
SHIM_PORT = 4792
PROBE = """
import json, time
from node_agent import prober
t = time.monotonic()
r = prober.probe({src!r}, {dst!r}, "tcp", {port}, list(range(49152, 49216)), 8, 2000.0, 0.3)
s = time.monotonic() - t
print(json.dumps({{"s": s, "packets": r.packets,
                  "reached": sum("*" not in h for h in r.hops.values()), "ports": len(r.hops)}}))
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bumps", type=int, default=10)
    p.add_argument("--probes", type=int, default=5)
    p.add_argument("--keep", help="keep the controller's and agents' logs (info) in this directory")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/agent/testbed: needs root (network namespaces)")
    build_shim()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="t11-bench-agent-tb-"))
    work.mkdir(parents=True, exist_ok=True)
    tb = Testbed(f"t11b{os.getpid() % 100000}")
    tb.up(SPEC)
    ctl: Controller | None = None
    agents: dict[str, Agent] = {}
    out: dict[str, Any] = {}
    try:
        ctl = Controller(work, host=tb.plan.mgmt_gateway).start()
        assert ctl.http.put("/v1/topology", json=tb.doc()).status_code == 200
        token = ctl.token("agent")
        for hp in tb.plan.hosts:
            agents[hp.name] = Agent(work, ctl.url, token, hp.name, shim_port=SHIM_PORT,
                                    netns=["ip", "netns", "exec", tb.netns(hp.name)],
                                    http_host=hp.mgmt_address, http_port=9792,
                                    probe_interval_s=1, long_poll_s=20,
                                    log_level="info" if a.keep else "warning")
            agents[hp.name].start()
        wait_for(lambda: all(_ready(ag) for ag in agents.values()), 60, "agents ready")
        addr = {h.name: h.ports[0].address for h in tb.plan.hosts}

        # 1. probing
        times = []
        for _ in range(a.probes):
            r = tb.exec("host0", [sys.executable, "-c", PROBE.format(
                src=addr["host0"], dst=addr["host3"], port=SHIM_PORT)], timeout_s=60)
            d = json.loads(r.stdout.splitlines()[-1])
            assert d["reached"] == d["ports"] == 64, d
            times.append(d["s"])
        out["probe_64_ports_s"] = {"median": round(statistics.median(times), 3),
                                   "max": round(max(times), 3), "runs": len(times),
                                   "packets": d["packets"]}

        # 2. weight changes on a live connection
        doc = {"name": "bench-w", "ranks": [{"rank": 1, "host": "host1", "nic": "mlx5_0"},
                                            {"rank": 3, "host": "host3", "nic": "mlx5_0"}],
               "traffic": [{"pattern": "pairs", "pairs": [[1, 3]], "channels": 1,
                            "qps_per_connection": 2}]}
        assert ctl.http.post("/v1/jobs", json=doc).status_code == 202
        wait_for(lambda: ctl.http.get("/v1/jobs/bench-w").json()["status"] == "planned", 60,
                 "the job planned")
        wait_for(lambda: all("bench-w" in agents[n].health()["jobs"] for n in ("host1", "host3")),
                 15, "agents follow the job")
        asg = ctl.http.get("/v1/jobs/bench-w/assignments").json()["assignments"]
        ports = [x["udp_sport"] for x in sorted(asg, key=lambda x: x["qp"])]
        if len(set(ports)) < 2:
            raise SystemExit(f"the plan put both flows on port {ports[0]}; rerun")
        env = {"C4_JOB": "bench-w", "C4_TEST_JOB_RANKS": "1,3", "C4_SHIM_PORT": str(SHIM_PORT),
               "C4_LOOKUP_TIMEOUT_MS": "1000", "C4_TEST_CHANNELS": "1"}
        for rank, name in enumerate(("host1", "host3")):
            env |= {f"C4_TEST_NETNS_{rank}": tb.netns(name),
                    f"C4_AGENT_SOCKET_{rank}": agents[name].socket,
                    f"C4_SHIM_ADDR_{rank}": addr[name]}
        proc, lines = start_live(env, 3.0 + 2.5 * a.bumps, 200_000, 20)
        latencies = []
        bumps: list[tuple[int, list[float]]] = []
        try:
            wait_for(lambda: split_changed_at(lines, ports, [0.5, 0.5], 0), 15, "even split")
            for i in range(a.bumps):
                w = 0.8 if i % 2 == 0 else 0.3
                _, bumped = ctl.set_weights("bench-w", {(1, 3, 0, 0): w, (1, 3, 0, 1): 1 - w})
                bumps.append((bumped, [w, 1 - w]))
                want = [w, 1 - w]

                def moved(want: list[float] = want, b: int = bumped) -> int | None:
                    return split_changed_at(lines, ports, want, b)

                seen = wait_for(moved, 10, "the new split in the sockets")
                latencies.append((seen - bumped) / 1000)
                if a.keep:
                    print(f"bump {i}: committed {bumped} us, in the sockets {seen} us", flush=True)
                time.sleep(1.0)
        finally:
            proc.wait(60)
            if a.keep:
                (work / "live.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
                (work / "bumps.json").write_text(json.dumps(bumps))
        out["weight_change_ms"] = {
            "median": round(statistics.median(latencies)), "max": round(max(latencies)),
            "all": [round(x) for x in latencies]}
        # the same split acknowledged by the receiver (the wire, behind what sockets queued)
        acked = []
        for i, (b, want) in enumerate(bumps):
            t = split_changed_at(lines, ports, want, b, key="socks")
            nxt = bumps[i + 1][0] if i + 1 < len(bumps) else None
            if t is not None and (nxt is None or t < nxt):
                acked.append((t - b) / 1000)
        out["weight_change_acked_ms"] = {
            "median": round(statistics.median(acked)) if acked else None,
            "max": round(max(acked)) if acked else None, "seen": len(acked), "of": len(bumps)}
    finally:
        for ag in agents.values():
            ag.terminate()
        for ag in agents.values():
            ag.stop()
        if ctl is not None:
            ctl.stop(signal.SIGKILL)
        tb.down()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))
    pr, wc, wa = out["probe_64_ports_s"], out["weight_change_ms"], out["weight_change_acked_ms"]
    print(f"""
| measure | figure | target |
|---|---|---|
| 64 source ports probed host0 → host3 (2 tiers, TCP to 4792), {pr['runs']} runs | median {pr['median']} s, max {pr['max']} s ({pr['packets']} packets) | ≤ 2 s |
| weight change in the live connection's sockets after the version bump (bytes written per socket, TCP_INFO), {len(wc['all'])} bumps | median {wc['median']} ms, max {wc['max']} ms | ≤ 1 s |
| the same split acknowledged by the receiver (TCP_INFO bytes_acked) | median {wa['median']} ms, max {wa['max']} ms ({wa['seen']} of {wa['of']} bumps before the next one) | |
""")


def _ready(a: Agent) -> bool:
    try:
        return bool(a.health()["ready"])
    except Exception:
        return False


if __name__ == "__main__":
    main()
