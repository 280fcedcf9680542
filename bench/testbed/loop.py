"""The whole loop on the testbed (issue 14): c4 against plain ECMP, link failure, congestion, faults.

    .venv/bin/python -m bench.testbed.loop                       # what `make bench-testbed` runs after bench.testbed
    .venv/bin/python -m bench.testbed.loop --shapes 2x2x2 --seeds 1 --skip faults   # quick

Root only. Every part as in production (`testbed.loop`): `c4 serve` (probed hashing, the shim's
TCP transport, SQLite), a `c4-node-agent` per host namespace, `c4-switch-agent` polling every
switch's snmpd, the NCCL-like workload through the shim, a webhook receiver checking
signatures. Physics: the kernel's ECMP and forwarding, real TCP sockets over veths shaped by
HTB, nftables ECN marks read through snmpd; c4's own hash model and simulators play no part.

1. `ecmp-vs-c4` per shape (non-blocking: spines >= hosts per leaf, every link one rate) and
   seed (the fabric is rebuilt: every switch's hash seed changes): the ring and an alltoall
   with plain ECMP (no agent: ephemeral source ports), then posted to c4 and run on its plan.
2. `link-down` (2 leaves x 3 spines x 2 hosts: capacity remains for the whole ring after one
   uplink dies): a spine link the plan uses goes down mid-ring; the scenario PATCHes it as the
   operator; recovery of the live ring and the next communicator on the re-plan.
3. `congestion`: a spine link throttled to a quarter mid-ring; time until the controller calls
   it congested; rebalancing where the controller has it.
4. `faults` (2x2x2): a clean phase, then noncomm_hang, comm_slow, noncomm_slow, comm_hang.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from testbed import FabricSpec, Testbed
from testbed.scenarios import loop as sc
from testbed.workload import ensure_built


def up_fabric(prefix: str, shape: str, rate: int, seed: int = 1) -> Testbed:
    leaves, spines, hosts = (int(x) for x in shape.split("x"))
    tb = Testbed(prefix)
    tb.up(FabricSpec(leaves=leaves, spines=spines, hosts_per_leaf=hosts, rate_mbit=rate, seed=seed))
    return tb


def uptime() -> str:
    """`uptime`'s line (load averages), printed before and after a benchmark."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="2x2x2,4x4x4", help="ecmp-vs-c4 shapes, LEAVESxSPINESxHOSTS")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rate-mbit", type=int, default=50)
    ap.add_argument("--shape-rates", default="",
                    help="ecmp-vs-c4 rates per shape, e.g. 4x4x4=10: the fabric's aggregate rate (hosts x rate) "
                         "is what the shared cores must forward and feed; 16 ranks at 50 Mbit/s on 2 cores are "
                         "CPU-bound (bench/README.md, 'ring on 4x4x4')")
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--congestion-poll-s", type=float, default=1.0,
                    help="congestion: the switch agent's poll interval (its targets count in intervals)")
    ap.add_argument("--congestion-repolls", type=int, default=2,
                    help="congestion: the switch agent's repolls_per_interval")
    ap.add_argument("--skip", default="", help="comma-separated: ecmp-vs-c4, link-down, congestion, faults")
    ap.add_argument("--prefix", default=f"bl{os.getpid() % 100000}")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench.testbed.loop: needs root (network namespaces)", file=sys.stderr)
        return 2
    skip = set(filter(None, a.skip.split(",")))
    ensure_built()
    print(uptime())
    print(f"links {a.rate_mbit} Mbit/s (the ideal bus bandwidth); physics: kernel ECMP + real TCP sockets, "
          "HTB shaping, nftables ECN via snmpd\n")
    t_all = time.monotonic()
    summary: dict[str, Any] = {}
    shape_rate = {k: int(v) for k, v in (x.split("=") for x in a.shape_rates.split(",") if x)}
    if "ecmp-vs-c4" not in skip:
        rows = []
        for shape in a.shapes.split(","):
            rate = shape_rate.get(shape, a.rate_mbit)
            print(f"ecmp-vs-c4 {shape}: ring and alltoall, {a.bytes >> 20} MiB per rank, 2 channels, 3 iterations, "
                  f"{rate} Mbit/s")
            tb = up_fabric(a.prefix, shape, rate)
            try:
                res = sc.ecmp_vs_c4(tb, list(range(1, a.seeds + 1)), bytes_=a.bytes)
            finally:
                tb.down()
            for r in res["rows"]:
                rows.append({**r, "shape": shape, "rate_mbit": rate})
            for p in ("ring", "alltoall"):
                if p in res:
                    x = res[p]
                    print(f"  {shape} {p:<8}: c4 {x['c4']:.3f} (min {x['c4_min']:.3f})  ecmp {x['ecmp']:.3f} "
                          f"(min {x['ecmp_min']:.3f}) over {x['runs']} seeds{'' if x['ok'] else '  (some run NOT OK)'}")
        ring = [r for r in rows if r["pattern"] == "ring"]
        summary["c4"] = statistics.mean(r["c4"] for r in ring)
        summary["ecmp"] = statistics.mean(r["ecmp"] for r in ring)
        print()
    if "link-down" not in skip:
        print("link-down 2x3x2: a spine link under a c4-planned ring (2 channels x 2 QPs), per seed")
        lds = []
        for seed in range(1, a.seeds + 1):
            print(f" seed {seed}")
            tb = up_fabric(a.prefix, "2x3x2", a.rate_mbit, seed)
            try:
                lds.append(sc.link_down(tb))
            finally:
                tb.down()
        rec = [x["live"]["recovered_s"] for x in lds]
        rew = [x["reweighted_after_s"] for x in lds]
        nxt = [x["next_vs_allowed"] for x in lds]
        after = [x["live"]["after"] or 0.0 for x in lds]
        print(f"  over {len(lds)} seeds: live ring back to >= 0.9 of allowed after "
              f"{', '.join('never' if r is None else f'{r:.1f} s' for r in rec)}; re-weighted "
              f"{', '.join('never' if r is None else f'{r:.2f} s' for r in rew)} after the PATCH; steady after "
              f"{', '.join(f'{x:.3f}' for x in after)}; next communicator {', '.join(f'{x:.2f}' for x in nxt)} "
              f"of allowed")
        summary["failover"] = None if any(r is None for r in rec) else max(rec)
        summary["failover_next"] = min(nxt)
        print()
    if "congestion" not in skip:
        print("congestion 2x2x2: a spine link throttled to a quarter under a c4-planned ring")
        tb = up_fabric(a.prefix, "2x2x2", a.rate_mbit)
        try:
            cg = sc.congestion(tb, poll_s=a.congestion_poll_s, repolls=a.congestion_repolls)
        finally:
            tb.down()
        summary["congestion_detected"] = cg["detected_s"]
        summary["rebalance"] = cg["ring"]["recovered_s"] if cg["rebalancer"] else "blocked"
        summary["congestion_poll_s"] = a.congestion_poll_s
        print()
    if "faults" not in skip:
        d = sc.CLEAN_DIAGNOSIS
        print(f"faults 2x2x2: clean phase, then one fault per kind (per-job hang timeout {d['hang_timeout_s']:g} s, "
              f"slow factor {d['slow_factor']:g} over {d['slow_window']} collectives)")
        tb = up_fabric(a.prefix, "2x2x2", a.rate_mbit)
        try:
            ft = sc.faults(tb)
        finally:
            tb.down()
        summary["faults"] = f"{ft['right']}/{ft['total']}"
        summary["false_alarms"] = ft["false_alarms"]
        print()
    print(uptime())
    print(f"wall {time.monotonic() - t_all:.0f} s")

    def fmt(v: Any, unit: str = "") -> str:
        if v is None:
            return "never"
        return f"{v:.2f}{unit}" if isinstance(v, float) else f"{v}"

    print(f"testbed: c4 {fmt(summary.get('c4'))} ecmp {fmt(summary.get('ecmp'))} of ideal; "
          f"failover {fmt(summary.get('failover'), ' s')} (worst seed; next comm {fmt(summary.get('failover_next'))} of "
          f"allowed); "
          f"congestion seen {fmt(summary.get('congestion_detected'), ' s')}, rebalance {fmt(summary.get('rebalance'))}"
          + (f" (polls every {summary['congestion_poll_s']:g} s)" if "congestion_poll_s" in summary else "") + "; "
          f"faults {summary.get('faults', '-')}, false alarms {summary.get('false_alarms', '-')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
