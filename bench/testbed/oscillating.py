"""Issue 13's oscillating load on the testbed: does the closed loop flap?

    .venv/bin/python -m bench.testbed.oscillating                  # 10 minutes, a swing every 60 s
    .venv/bin/python -m bench.testbed.oscillating --minutes 3 --swing-s 30   # quick

Root only. Physics: the testbed (kernel ECMP, real TCP through the shim, HTB shaping, the
nftables ECN marker read through snmpd by the real `c4-switch-agent`), the real controller
and node agents (`testbed.loop`); c4's own load model plays no part (`bench.rebalance` is that
version). A c4-planned ring runs back to back (one communicator after another, each
`--iters` iterations) on a 2 leaves x 3 spines x 2 hosts fabric at 50 Mbit/s, while two spine
uplinks of the first leaf that its plan uses take turns being throttled to a quarter: A from
`--warm-s`, then every `--swing-s` the throttled one is restored and the other throttled, for
`--minutes`. The load the controller sees swings between the two links' directions.

Measured: flaps, counted as `bench.rebalance` counts them (`scenario.flaps`: a flow's load
taken off a direction that was congested at some time, then put back on it within the
controller's hold-down, `C4_CONGESTION_HOLD_DOWN_S`, 300 s by default) over the job's
assignments read every second; every path and weight change; the `job.replanned` webhooks and
their reasons; and the ring's bus bandwidth per swing (mean over the iterations that ended
in it, as a fraction of ideal). Target (issue 13): zero flaps over 10 minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from bench.rebalance.scenario import Change, flaps
from bench.testbed.loop import up_fabric, uptime
from controller.api.schemas.topology import TopologyCreate
from controller.topology.graph import FabricView
from testbed import Testbed, TestbedError
from testbed.document import to_document
from testbed.loop import LoopSettings
from testbed.scenarios import loop as sc
from testbed.workload import default_hosts, ensure_built, run_job


def _uplinks(tb: Testbed, asg: list[dict[str, Any]]) -> tuple[str, str]:
    """Two spine links of the first leaf that the plan puts flows on, the busiest first."""
    counts: dict[str, int] = {}
    first_leaf = tb.plan.leaves[0].name
    for a in asg:
        for name in a["links"]:
            link = tb.link(name)
            if not link.host_link and first_leaf in (name.split("--")[0].split(":")[0], name.split("--")[1].split(":")[0]):
                counts[name] = counts.get(name, 0) + 1
    ranked = sorted(counts, key=lambda n: (-counts[n], n))
    if len(ranked) < 2:
        raise TestbedError(f"the plan uses {len(ranked)} uplink(s) of {first_leaf}: nothing to swing between")
    return ranked[0], ranked[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--swing-s", type=float, default=60.0, help="how long each link stays throttled")
    ap.add_argument("--warm-s", type=float, default=10.0, help="ring alone before the first throttle")
    ap.add_argument("--iters", type=int, default=40, help="iterations per communicator (run back to back)")
    ap.add_argument("--rate-mbit", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefix", default=f"bo{os.getpid() % 100000}")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--json-out", default="", help="write the changes, loads, swings and timelines here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench.testbed.oscillating: needs root (network namespaces)", file=sys.stderr)
        return 2
    ensure_built()
    print(uptime())
    tb = up_fabric(a.prefix, "2x3x2", a.rate_mbit, a.seed)
    try:
        return _run(tb, a)
    finally:
        tb.down()
        print(uptime())


def _run(tb: Testbed, a: argparse.Namespace) -> int:
    view = FabricView(TopologyCreate.model_validate(to_document(tb.plan)).to_fabric())
    fabric_links = {ln.name for ln in tb.plan.links if not ln.host_link}
    hosts = default_hosts(tb.plan)
    slow = max(1, a.rate_mbit // 4)
    settings = LoopSettings(controller_env=dict(sc.CONGESTION_ENV))
    workdir = Path(a.workdir).resolve() if a.workdir else None
    with sc.loop_on(tb, workdir, settings) as loop:
        name = "oscillating"
        loop.post_job(name, hosts, "ring", channels=2, qps=2, diagnosis={"auto_isolate": False})
        asg = loop.assignments(name)["assignments"]
        link_a, link_b = _uplinks(tb, asg)
        hold = float(os.environ.get("C4_CONGESTION_HOLD_DOWN_S", "300"))
        print(f"ring on {', '.join(hosts)}; swinging a throttle to {slow} Mbit/s between {link_a} and {link_b} "
              f"every {a.swing_s:g} s for {a.minutes:g} min (hold-down {hold:g} s)", flush=True)

        stop = threading.Event()
        t0, t0_mono = time.time(), time.monotonic()  # (webhook deliveries are timed on the monotonic clock)
        end = t0 + a.warm_s + a.minutes * 60
        timelines: list[tuple[float, float, float]] = []
        ring_errors: list[str] = []

        def rings() -> None:
            n = 0
            while not stop.is_set() and time.time() < end and n < 1000:  # bounded in count and time
                n += 1
                spec = sc.c4_spec(loop, name, "ring", hosts, iters=a.iters, bytes=2 << 20, warmup=1, channels=2,
                                  chunk_bytes=64 << 10, verify="first", timeout_s=30.0)
                try:
                    timelines.extend(sc.iteration_timeline(run_job(tb, spec)))
                except Exception as exc:  # recorded; the next communicator starts
                    ring_errors.append(f"{time.time() - t0:.0f} s: {exc}")
                    time.sleep(1.0)

        changes: list[Change] = []
        hot: set[tuple[str, str]] = set()
        seen: dict[tuple[int, int, int, int], tuple[tuple[str, ...], float]] = {}
        loads: list[tuple[float, dict[tuple[str, str], float]]] = []  # per read: fabric direction -> weights

        def observe() -> None:
            t_s = time.time() - t0
            for c in loop.http.get("/v1/congestion").json()["congested"]:
                hot.add((c["link"], c["direction"]))
            load: dict[tuple[str, str], float] = {}
            for x in loop.assignments(name)["assignments"]:
                for hop in view.directed_links_of(tuple(x["path"])):
                    if hop[0] in fabric_links:
                        load[hop] = load.get(hop, 0.0) + float(x["weight"])
                key = (x["src_rank"], x["dst_rank"], x["channel"], x["qp"])
                now = (tuple(x["path"]), round(float(x["weight"]), 9))
                before = seen.get(key)
                if before is not None and before != now:
                    if before[0] != now[0]:
                        changes.append(Change(t_s, name, key, "path", before[0], now[0], now[0]))
                    if before[1] != now[1]:
                        changes.append(Change(t_s, name, key, "weight", before[1], now[1], now[0]))
                seen[key] = now
            loads.append((t_s, load))

        ring = threading.Thread(target=rings, daemon=True)
        ring.start()
        swings: list[tuple[float, float, str]] = []  # (start s, end s, the throttled link)
        throttled: str | None = None
        next_swing = t0 + a.warm_s
        try:
            while time.time() < end:
                if time.time() >= next_swing:
                    target = link_a if throttled != link_a else link_b
                    if throttled is not None:
                        tb.set_link_rate(throttled, None)
                    tb.set_link_rate(target, slow)
                    if swings:
                        swings[-1] = (swings[-1][0], time.time() - t0, swings[-1][2])
                    swings.append((time.time() - t0, end - t0, target))
                    throttled = target
                    next_swing += a.swing_s
                with suppress(Exception):  # a read the controller missed: the next second's covers it
                    observe()
                time.sleep(1.0)
        finally:
            stop.set()
            if throttled is not None:
                tb.set_link_rate(throttled, None)
            ring.join(a.iters * 30 + 120)
        with suppress(Exception):
            observe()
        replans = [d for d in loop.webhooks.events("job.replanned") if d.data.get("job") == name]
        loop.delete_job(name)

    print("job.replanned at " + ", ".join(f"{d.received_s - t0_mono:.0f} s ({d.data.get('reason')})" for d in replans))
    found = flaps(changes, hot, view.directed_links_of, hold)
    fabric_hot = {d for d in hot if d[0] in fabric_links}
    fabric_found = flaps(changes, fabric_hot, view.directed_links_of, hold)
    swung = direction_flaps(loads, fabric_hot, hold)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({
            "changes": [vars(c) for c in changes], "hot": sorted(hot), "swings": swings, "timelines": timelines,
            "loads": [(t, sorted(([list(k), v] for k, v in ld.items()))) for t, ld in loads],
            "replans": [(r.received_s - t0_mono, r.data.get("reason")) for r in replans]}, default=list))
    reasons: dict[str, int] = {}
    for delivery in replans:
        why = str(delivery.data.get("reason"))
        reasons[why] = reasons.get(why, 0) + 1
    print(f"congested at some time: {', '.join(f'{lk} {dr}' for lk, dr in sorted(hot)) or 'none'}")
    print(f"changes: {sum(c.kind == 'weight' for c in changes)} weight, {sum(c.kind == 'path' for c in changes)} path; "
          f"last at {max((c.t_s for c in changes), default=0):.0f} s; job.replanned {len(replans)} "
          f"({', '.join(f'{k} x{v}' for k, v in sorted(reasons.items()))})")
    for s0, s1, link in swings:
        fr = [f for b0, b1, f in timelines if s0 <= b1 - t0 < s1]
        print(f"  {s0:6.0f}-{s1:4.0f} s  {link} throttled: ring {statistics.mean(fr) if fr else 0:.3f} of ideal "
              f"over {len(fr)} iterations")
    before = [f for b0, b1, f in timelines if b1 - t0 < a.warm_s]
    if ring_errors:
        print(f"ring errors ({len(ring_errors)}): {'; '.join(ring_errors[:3])}")
    for earlier, later, hop in found[:20]:
        print(f"  FLAP {hop}: {earlier.kind} at {earlier.t_s:.0f} s, back at {later.t_s:.0f} s ({later.key})")
    for hop, t1, t2, down, up in swung[:20]:
        print(f"  LOAD BACK {hop[0]} {hop[1]}: its flows' weights fell by {down:.2f} at {t1:.0f} s, rose by {up:.2f} "
              f"at {t2:.0f} s")
    print(f"oscillating: {a.minutes:g} min, {len(swings)} swings every {a.swing_s:g} s; flaps {len(found)} per flow "
          f"and hot direction ({len(fabric_found)} on switch-to-switch directions), load sent back onto a hot "
          f"switch-to-switch direction {len(swung)} (hold-down {hold:g} s); ring before "
          f"{statistics.mean(before) if before else 0:.3f} of ideal, {len(timelines)} iterations")
    return 0 if not found else 1


def direction_flaps(loads: list[tuple[float, dict[tuple[str, str], float]]], hot: set[tuple[str, str]],
                    hold_down_s: float, step: float = 0.05) -> list[tuple[tuple[str, str], float, float, float, float]]:
    """Per hot direction, the sum of the weights of the job's flows that cross it (its planned
    load, in connections' shares) read after read: each fall by more than `step` followed by a
    rise by more than `step` less than `hold_down_s` later is load sent back onto it (the
    direction-level flap; `flaps` counts per flow, where weights shifted among a connection's
    flows count even when the direction's load does not come back)."""
    out = []
    for d in sorted(hot):
        series = [(t, ld.get(d, 0.0)) for t, ld in loads]
        falls = [(t1, p0 - p1) for (_, p0), (t1, p1) in itertools.pairwise(series) if p0 - p1 > step]
        for (_, p0), (t2, p1) in itertools.pairwise(series):
            if p1 - p0 > step:
                fell = [(t1, dn) for t1, dn in falls if t1 < t2 and t2 - t1 < hold_down_s]
                if fell:
                    out.append((d, fell[-1][0], t2, fell[-1][1], p1 - p0))
    return out


if __name__ == "__main__":
    sys.exit(main())
