"""The workload's scenarios: `ring`, `alltoall`, `pairs` (per-iteration times and bus
bandwidth), `coupling` (one link at a quarter of the rate paces every connection of a ring,
shown with the figures the shim itself reported) and `pinning` (plain ECMP against ports
pinned by probing the kernel's hash, side by side on the same fabric)."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from testbed.fabric import Testbed, TestbedError
from testbed.pinning import pins_for, probe_spines, ring_flows
from testbed.scenarios import scenario
from testbed.workload import Fault, JobResult, JobSpec, default_hosts, port_addresses, run_job


def _parser(name: str, pattern: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"c4-testbed run {name}")
    ap.add_argument("--ranks", type=int, default=0, help="number of ranks (default: every host)")
    ap.add_argument("--hosts", default="", help="comma-separated hosts, rank order (default: interleaved over leaves)")
    ap.add_argument("--port", default="p0", help="NIC port every rank uses, or 'all' (channel c on port c mod count)")
    ap.add_argument("--bytes", type=int, default=8 << 20, help="bytes per rank per collective")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--chunk-bytes", type=int, default=128 << 10)
    ap.add_argument("--flows", type=int, default=0, help="K sockets per connection, on ephemeral ports (static agent)")
    ap.add_argument("--pin", action="store_true", help="pin every flow to its own spine by probing the kernel's hash")
    ap.add_argument("--agent", action="store_true", help="run the static agent and show the shim's telemetry")
    ap.add_argument("--late", default="", help="RANK:MS[:FROM] enter collectives late (slow compute)")
    ap.add_argument("--hang", default="", help="RANK:ITER stop entering at that iteration")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--verify", choices=("all", "first"), default="all")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    if pattern == "pairs":
        ap.add_argument("--pairs", default="", help="SRC:DST,... (default: each rank to the one half a ring away)")
    ap.set_defaults(pattern=pattern)
    return ap


def spec_from_args(tb: Testbed, a: argparse.Namespace) -> JobSpec:
    plan = tb.plan
    hosts = a.hosts.split(",") if a.hosts else default_hosts(plan, a.ranks or None)
    faults: dict[int, Fault] = {}
    if a.late:
        parts = [float(x) for x in a.late.split(":")]
        faults[int(parts[0])] = Fault(late_ms=parts[1], late_from=int(parts[2]) if len(parts) > 2 else 0)
    if a.hang:
        r, it = (int(x) for x in a.hang.split(":"))
        faults[r] = Fault(late_ms=faults.get(r, Fault()).late_ms, hang_at=it)
    pairs = None
    if getattr(a, "pairs", ""):
        pairs = [tuple(int(x) for x in p.split(":")) for p in a.pairs.split(",")]
    spec = JobSpec(name=f"{a.pattern}", pattern=a.pattern, hosts=hosts, port=a.port, bytes=a.bytes,
                   iters=a.iters, warmup=a.warmup, channels=a.channels, chunk_bytes=a.chunk_bytes,
                   pairs=pairs, faults=faults, agent=a.agent or a.flows > 0 or a.pin,  # type: ignore[arg-type]
                   flows_per_conn=a.flows, timeout_s=a.timeout_s, verify=a.verify)
    if a.pin:
        if a.pattern != "ring":
            raise TestbedError("--pin is implemented for ring jobs")
        flows = ring_flows(tb, [port_addresses(plan, h, a.port) for h in hosts], a.channels, max(1, a.flows))
        spec.pins = pins_for(tb, flows, a.channels, max(1, a.flows))
        spec.flows_per_conn = 0
    return spec


def report(tb: Testbed, res: JobResult, title: str) -> None:
    plan = tb.plan
    s = res.spec
    print(f"{title}: {s.pattern}, {len(res.hosts)} ranks on {', '.join(res.hosts)}")
    print(f"  {res.bytes_per_rank} bytes per rank, {s.channels} channels, chunks of {s.chunk_bytes} B, 8 in flight per connection; "
          f"links shaped at {plan.spec.rate_mbit} Mbit/s (the ideal bus bandwidth); "
          f"flows: {'pinned by probing' if s.pins else f'{s.flows_per_conn} ephemeral per connection' if s.flows_per_conn else 'the shim default (1 ephemeral, plain ECMP)'}")
    print(res.table())
    verdict = "data verified on every rank" if res.verified() else "DATA NOT VERIFIED"
    print(f"  bus bandwidth {res.busbw_mbit:.1f} Mbit/s = {res.fraction_of_ideal:.3f} of ideal; {verdict}")
    for r, code in sorted(res.codes.items()):
        if code != 0:
            tail = res.stderr.get(r, "").strip().splitlines()[-1:] or [""]
            print(f"  rank {r} on {res.hosts[r]} exited {code}: {tail[0]}")


def _run(pattern: str, tb: Testbed, argv: list[str]) -> int:
    a = _parser(pattern, pattern).parse_args(argv)
    res = run_job(tb, spec_from_args(tb, a))
    if a.json:
        print(json.dumps({"busbw_mbit": res.busbw_mbit, "fraction_of_ideal": res.fraction_of_ideal,
                          "iterations": [vars(i) for i in res.iterations], "codes": res.codes,
                          "verified": res.verified()}))
    else:
        report(tb, res, f"testbed {tb.prefix}")
        if a.agent:
            print_connection_table(res)
    return 0 if res.ok and res.verified() else 1


@scenario("ring", "NCCL-like ring all-reduce over every host: per-iteration times, bus bandwidth")
def ring(tb: Testbed, argv: list[str]) -> int:
    return _run("ring", tb, argv)


@scenario("alltoall", "all-to-all (grouped sends and receives): per-iteration times, bus bandwidth")
def alltoall(tb: Testbed, argv: list[str]) -> int:
    return _run("alltoall", tb, argv)


@scenario("pairs", "point-to-point pairs: per-iteration times, bus bandwidth")
def pairs(tb: Testbed, argv: list[str]) -> int:
    return _run("pairs", tb, argv)


def connection_figures(res: JobResult) -> dict[tuple[int, int], dict[str, float]]:
    """Per ring connection (src rank -> dst rank): the median over measured collectives of the
    rate the shim's profiler reported on each side, bytes / (t_last - t_first), in Mbit/s,
    and the connection's whole-run rate from the shim's transport (CONN records)."""
    n = len(res.hosts)
    warm = res.spec.warmup
    per: dict[tuple[int, int], dict[str, list[float]]] = {}
    for line in res.telemetry:
        m = line["msg"]
        if m["type"] != "coll" or m.get("inflight") or m["seq"] < warm:
            continue
        for p in m["peers"]:
            span = (p["t_last_us"] - p["t_first_us"]) / 1e6
            if not (p["done"] and p["bytes"] and span > 0):
                continue
            key = (m["rank"], p["peer"]) if p["dir"] == "send" else (p["peer"], m["rank"])
            per.setdefault(key, {"send": [], "recv": []})[p["dir"]].append(p["bytes"] * 8 / span / 1e6)
    addr_rank = {a: r for r, addrs in enumerate(res.rank_addresses) for a in addrs}
    conn: dict[tuple[int, int], float] = {}
    for line in res.telemetry:
        m = line["msg"]
        if m["type"] == "conn" and m["dir"] == "send" and m["closed"] and m["t_last_us"] > m["t_first_us"]:
            src, dst = addr_rank.get(m["local"]), addr_rank.get(m["remote"])
            if src is not None and dst is not None:
                rate = m["bytes"] * 8 / ((m["t_last_us"] - m["t_first_us"]) / 1e6) / 1e6
                conn[(src, dst)] = conn.get((src, dst), 0.0) + rate
    out = {}
    for r in range(n):
        key = (r, (r + 1) % n)
        d = per.get(key, {"send": [], "recv": []})
        out[key] = {"send_mbit": statistics.median(d["send"]) if d["send"] else float("nan"),
                    "recv_mbit": statistics.median(d["recv"]) if d["recv"] else float("nan"),
                    "conn_mbit": conn.get(key, float("nan"))}
    return out


def print_connection_table(res: JobResult) -> dict[tuple[int, int], dict[str, float]]:
    figs = connection_figures(res)
    print("  per connection, as the shim reported it (median over collectives of bytes/(t_last-t_first);")
    print("  'transport' is the connection's CONN record: all bytes over its whole life, Mbit/s):")
    print(f"  {'connection':>12} {'hosts':>17} {'send side':>10} {'recv side':>10} {'transport':>10}")
    for (src, dst), f in sorted(figs.items()):
        print(f"  {src:>5} -> {dst:<4} {res.hosts[src]:>8}>{res.hosts[dst]:<8} {f['send_mbit']:>10.1f} "
              f"{f['recv_mbit']:>10.1f} {f['conn_mbit']:>10.1f}")
    return figs


@scenario("coupling", "a ring with one host link at a quarter of the rate: every connection at the slow pace")
def coupling(tb: Testbed, argv: list[str]) -> int:
    ap = _parser("coupling", "ring")
    ap.add_argument("--slow-rank", type=int, default=0, help="the rank whose host link is throttled")
    ap.add_argument("--factor", type=float, default=4.0, help="throttle to rate / factor")
    ap.add_argument("--ecmp", action="store_true", help="leave flows to plain ECMP (default: pinned, so the healthy ring runs at the link rate)")
    a = ap.parse_args(argv)
    a.agent = True
    a.pin = not a.ecmp
    spec = spec_from_args(tb, a)
    plan = tb.plan
    host = spec.hosts[a.slow_rank] if spec.hosts else default_hosts(plan)[a.slow_rank]
    port = next(p for p in plan.host(host).ports if p.name == (plan.host(host).ports[0].name if a.port == "all" else a.port))
    link = plan.link_between(port.node, port.leaf)
    slow = max(1, round(plan.spec.rate_mbit / a.factor))
    base = run_job(tb, spec)
    report(tb, base, "healthy")
    healthy = print_connection_table(base)
    tb.set_link_rate(link.name, slow, direction="ab")  # only what the host sends: one connection
    try:
        spec.name = "ring-coupled"
        res = run_job(tb, spec)
    finally:
        tb.set_link_rate(link.name, None)
    report(tb, res, f"{link.name} ({host} sending) shaped to {slow} Mbit/s")
    figs = print_connection_table(res)
    sends = [f["send_mbit"] for f in figs.values()]
    ok = res.ok and base.ok and bool(sends) and all(x == x for x in sends)
    if ok:
        lo, hi = min(sends), max(sends)
        print(f"  every connection moved at {lo:.1f} .. {hi:.1f} Mbit/s (max/min {hi / lo:.2f}); healthy median "
              f"{statistics.median(f['send_mbit'] for f in healthy.values()):.1f}; the throttled link allows {slow} Mbit/s")
    return 0 if ok and res.verified() else 1


def compare_ecmp_pinned(tb: Testbed, spec: JobSpec, k: int = 1) -> dict[str, Any]:
    """The same ring twice on the same fabric: plain ECMP (no agent, ephemeral ports) and
    pinned (every flow on its own spine, ports found by probing). Returns both results and the
    uplink loads the kernel counted in the ECMP run."""
    plan = tb.plan
    hosts = spec.hosts or default_hosts(plan)
    flows = ring_flows(tb, [port_addresses(plan, h, spec.port) for h in hosts], spec.channels, k)
    probes = probe_spines(tb, {(f.src, f.dst) for f in flows})
    uplinks = {leaf.name: [plan.link_between(leaf.name, s.name).a.ifname for s in plan.spines] for leaf in plan.leaves}
    before = {leaf: tb.counters(leaf) for leaf in uplinks}
    c0 = _cpu()
    ecmp = run_job(tb, JobSpec(**{**vars(spec), "name": "ecmp", "hosts": hosts, "agent": False,
                                  "pins": {}, "flows_per_conn": 0}))
    c1 = _cpu()
    after = {leaf: tb.counters(leaf) for leaf in uplinks}
    load = {f"{leaf}:{i}": after[leaf][i]["tx_bytes"] - before[leaf][i]["tx_bytes"]
            for leaf, ifs in uplinks.items() for i in ifs}
    pins = pins_for(tb, flows, spec.channels, k, probes)
    c2 = _cpu()
    pinned = run_job(tb, JobSpec(**{**vars(spec), "name": "pinned", "hosts": hosts, "agent": True,
                                    "pins": pins, "flows_per_conn": 0}))
    c3 = _cpu()
    mean = statistics.mean(load.values()) if load else 0
    return {"ecmp": ecmp, "pinned": pinned, "uplink_bytes": load,
            "ecmp_uplink_imbalance": (max(load.values()) / mean) if mean else float("nan"),
            "cpu_busy": {"ecmp": _busy(c0, c1), "pinned": _busy(c2, c3)}}


def _cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def _busy(a: tuple[int, int], b: tuple[int, int]) -> float:
    return (b[0] - a[0]) / max(1, b[1] - a[1])


@scenario("pinning", "ring with plain ECMP, then with ports pinned by probing: bus bandwidth side by side")
def pinning(tb: Testbed, argv: list[str]) -> int:
    a = _parser("pinning", "ring").parse_args(argv)
    spec = spec_from_args(tb, argparse.Namespace(**{**vars(a), "pin": False, "flows": 0, "agent": False}))
    out = compare_ecmp_pinned(tb, spec)
    report(tb, out["ecmp"], "plain ECMP")
    print(f"  leaf uplink bytes, max/mean: {out['ecmp_uplink_imbalance']:.2f}; machine CPU busy {out['cpu_busy']['ecmp']:.0%}")
    report(tb, out["pinned"], "pinned")
    print(f"  machine CPU busy {out['cpu_busy']['pinned']:.0%}")
    print(f"pinning: ecmp {out['ecmp'].fraction_of_ideal:.3f} pinned {out['pinned'].fraction_of_ideal:.3f} of ideal")
    return 0 if out["ecmp"].ok and out["pinned"].ok else 1
