"""The whole loop's scenarios (issue 14): `ecmp-vs-c4`, `link-down`, `faults`, `congestion`.

Every part runs as in production (`testbed.loop`): `c4 serve` in probed mode, a
`c4-node-agent` per host, `c4-switch-agent` polling every switch's snmpd, the NCCL-like
workload through the shim, a webhook receiver for the scheduler. Each scenario's function
returns a result dictionary (`bench.testbed` and the e2e tests read it) and its command
prints it. Physics: the kernel's ECMP and forwarding, real TCP sockets over veths shaped by
HTB, nftables ECN marking; nothing of c4's own models.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from testbed.fabric import Testbed, TestbedError
from testbed.loop import SHIM_PORT_ECMP_OFFSET, Loop, LoopSettings, wait_for
from testbed.scenarios import scenario
from testbed.workload import Fault, JobResult, JobSpec, default_hosts, run_job

CLEAN_DIAGNOSIS = {"hang_timeout_s": 3.0, "slow_factor": 3.0, "slow_window": 4, "auto_isolate": True}


# ---- helpers ---------------------------------------------------------------------------------


@contextmanager
def loop_on(tb: Testbed, workdir: Path | None = None, settings: LoopSettings | None = None) -> Iterator[Loop]:
    base = workdir or Path(tempfile.mkdtemp(prefix=f"c4loop-{tb.prefix}-"))
    loop = Loop(tb, base, settings).start()
    try:
        yield loop
    finally:
        loop.stop()


def ecmp_spec(tb: Testbed, name: str, pattern: str, hosts: list[str], **kw: Any) -> JobSpec:
    """Plain ECMP: no agent, ephemeral source ports, the kernel's hash decides. The node agent
    owns the shim's port on every host, so these ranks listen on the next port."""
    return JobSpec(name=name, pattern=pattern, hosts=hosts, shim_port=tb.plan.spec.shim_port + SHIM_PORT_ECMP_OFFSET,
                   **kw)


def c4_spec(loop: Loop, name: str, pattern: str, hosts: list[str], **kw: Any) -> JobSpec:
    return JobSpec(name=name, pattern=pattern, hosts=hosts, agent_sockets=dict(loop.sockets), **kw)


def run_in_background(tb: Testbed, spec: JobSpec) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = run_job(tb, spec)
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


def finished(t: threading.Thread, out: dict[str, Any], timeout_s: float) -> JobResult:
    t.join(timeout_s)
    if t.is_alive():
        raise TestbedError("the workload did not finish in time")
    if "error" in out:
        raise out["error"]
    return out["result"]  # type: ignore[no-any-return]


def iteration_timeline(res: JobResult) -> list[tuple[float, float, float]]:
    """(start s, end s, bus bandwidth as a fraction of ideal) per measured iteration, wall clock."""
    from testbed.workload import bus_factor

    by_iter: dict[int, list[dict[str, Any]]] = {}
    for recs in res.records.values():
        for r in recs:
            if r.get("event") == "iter" and not r.get("warmup"):
                by_iter.setdefault(r["iter"], []).append(r)
    n = len(res.records)
    out = []
    for _, rows in sorted(by_iter.items()):
        if len(rows) < n:
            continue
        t0, t1 = min(r["t_start_us"] for r in rows) / 1e6, max(r["t_end_us"] for r in rows) / 1e6
        bw = res.bytes_per_rank * 8 / max(t1 - t0, 1e-9) / 1e6 * bus_factor(res.spec.pattern, n)
        out.append((t0, t1, bw / res.rate_mbit))
    return out


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=1, default=str))


# ---- ecmp-vs-c4 ------------------------------------------------------------------------------


def ecmp_vs_c4(tb: Testbed, seeds: list[int], patterns: tuple[str, ...] = ("ring", "alltoall"),
               bytes_: int = 4 << 20, iters: int = 3, channels: int = 2, chunk_bytes: int = 64 << 10,
               log: Callable[[str], None] = print, workdir: Path | None = None) -> dict[str, Any]:
    """Per seed (the fabric is rebuilt with that seed: every switch's hash seed changes): the
    same jobs first with plain ECMP, then posted to c4 and run on its plan."""
    spec0 = tb.plan.spec
    rows: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            if tb.plan.spec.seed != seed:
                tb.down()
                tb.up(replace(spec0, seed=seed))
            hosts = default_hosts(tb.plan)
            with loop_on(tb, workdir and workdir / f"seed{seed}") as loop:
                for pattern in patterns:
                    kw = {"bytes": bytes_, "iters": iters, "warmup": 1, "channels": channels,
                          "chunk_bytes": chunk_bytes, "verify": "first", "timeout_s": 60.0}
                    ecmp = run_job(tb, ecmp_spec(tb, f"ecmp-{pattern}-{seed}", pattern, hosts, **kw))
                    name = f"c4-{pattern}-{seed}"
                    t0 = time.monotonic()
                    job = loop.post_job(name, hosts, pattern, channels=channels, qps=1,
                                        diagnosis={"auto_isolate": False})
                    plan_s = time.monotonic() - t0
                    c4 = run_job(tb, c4_spec(loop, name, pattern, hosts, **kw))
                    loop.delete_job(name)
                    row = {"seed": seed, "pattern": pattern, "ranks": len(hosts),
                           "ecmp": ecmp.fraction_of_ideal, "c4": c4.fraction_of_ideal,
                           "ok": ecmp.ok and c4.ok and ecmp.verified() and c4.verified(),
                           "plan": job.get("plan"), "plan_s": plan_s,
                           "ecmp_codes": ecmp.codes, "c4_codes": c4.codes}
                    rows.append(row)
                    log(f"  seed {seed} {pattern:<8} ecmp {row['ecmp']:.3f}  c4 {row['c4']:.3f} of ideal  "
                        f"(planned in {plan_s:.1f} s, plan max util {job['plan']['max_link_utilization']:.2f}, "
                        f"bound {job['plan']['lower_bound']:.2f}, ecmp expected {job['plan']['ecmp_expected_max_utilization']:.2f})"
                        f"{'' if row['ok'] else '  NOT OK: ' + str(row['ecmp_codes']) + ' ' + str(row['c4_codes'])}")
    finally:
        if tb.plan.spec.seed != spec0.seed:
            tb.down()
            tb.up(spec0)
    out: dict[str, Any] = {"rows": rows}
    for pattern in patterns:
        mine = [r for r in rows if r["pattern"] == pattern]
        if mine:
            out[pattern] = {"ecmp": statistics.mean(r["ecmp"] for r in mine),
                            "c4": statistics.mean(r["c4"] for r in mine),
                            "c4_min": min(r["c4"] for r in mine), "ecmp_min": min(r["ecmp"] for r in mine),
                            "runs": len(mine), "ok": all(r["ok"] for r in mine)}
    return out


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workdir", default="", help="keep the controller's and agents' logs here")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")


@scenario("ecmp-vs-c4", "the same ring and alltoall with plain ECMP, then planned by c4 (whole loop), per seed")
def _ecmp_vs_c4(tb: Testbed, argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="c4-testbed run ecmp-vs-c4")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated; the fabric is rebuilt with each")
    ap.add_argument("--patterns", default="ring,alltoall")
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--channels", type=int, default=2)
    _common(ap)
    a = ap.parse_args(argv)
    plan = tb.plan
    print(f"ecmp-vs-c4 on {tb.prefix}: {len(plan.leaves)}x{len(plan.spines)}x{plan.spec.hosts_per_leaf} at "
          f"{plan.spec.rate_mbit} Mbit/s; bus bandwidth as a fraction of ideal (the shaped rate)")
    res = ecmp_vs_c4(tb, [int(s) for s in a.seeds.split(",")], tuple(a.patterns.split(",")), a.bytes, a.iters,
                     a.channels, workdir=Path(a.workdir) if a.workdir else None)
    for p in a.patterns.split(","):
        if p in res:
            print(f"{p}: c4 {res[p]['c4']:.3f} (min {res[p]['c4_min']:.3f}) ecmp {res[p]['ecmp']:.3f} "
                  f"(min {res[p]['ecmp_min']:.3f}) of ideal over {res[p]['runs']} seeds")
    emit(res, a.json)
    return 0 if all(r["ok"] for r in res["rows"]) else 1
