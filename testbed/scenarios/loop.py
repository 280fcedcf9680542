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
import itertools
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from testbed.fabric import Testbed, TestbedError
from testbed.loop import SHIM_PORT_ECMP_OFFSET, Delivery, Loop, LoopSettings, wait_for
from testbed.scenarios import scenario
from testbed.workload import Fault, JobResult, JobSpec, default_hosts, run_job

# Per-job detector settings (API `diagnosis`): a 6 s hang timeout keeps the hang scenarios short
# (3 s gave false hangs at load average 18: CPU-starved ranks entered their first collective late);
# the slow detectors keep the defaults (3x below the peers' median over 10 collectives): with a
# window of 4 or 6, clean rings on this shared 2-core machine opened comm_slow alarms (CPU
# starvation of a rank holds its TCP peers' data in the network, which counts as network time).
CLEAN_DIAGNOSIS = {"hang_timeout_s": 6.0, "slow_factor": 3.0, "slow_window": 10, "auto_isolate": True}


# ---- helpers ---------------------------------------------------------------------------------


@contextmanager
def loop_on(tb: Testbed, workdir: Path | None = None, settings: LoopSettings | None = None,
            shared: Loop | None = None) -> Iterator[Loop]:
    """A whole loop for one scenario, or `shared` (started by the caller, left running)."""
    if shared is not None:
        yield shared
        return
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
               log: Callable[[str], None] = print, workdir: Path | None = None, shared: Loop | None = None
               ) -> dict[str, Any]:
    """Per seed (the fabric is rebuilt with that seed: every switch's hash seed changes): the
    same jobs first with plain ECMP, then posted to c4 and run on its plan. `shared`: a loop
    already running on this fabric (then only its own seed can run)."""
    if shared is not None and any(s != tb.plan.spec.seed for s in seeds):
        raise TestbedError("a shared loop runs on the fabric as it is: seeds must be its own")
    spec0 = tb.plan.spec
    rows: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            if tb.plan.spec.seed != seed:
                tb.down()
                tb.up(replace(spec0, seed=seed))
            hosts = default_hosts(tb.plan)
            with loop_on(tb, workdir and workdir / f"seed{seed}", shared=shared) as loop:
                for pattern in patterns:
                    kw = {"bytes": bytes_, "iters": iters, "warmup": 1, "channels": channels,
                          "chunk_bytes": chunk_bytes, "verify": "first", "timeout_s": 60.0}
                    ecmp = run_job(tb, ecmp_spec(tb, f"ecmp-{pattern}-{seed}", pattern, hosts, **kw))
                    name = f"c4-{pattern}-{seed}"
                    t0 = time.monotonic()
                    try:
                        job = loop.post_job(name, hosts, pattern, channels=channels, qps=1,
                                            diagnosis={"auto_isolate": False})
                    except TestbedError as e:  # reported as a failed row, the other runs go on
                        log(f"  seed {seed} {pattern:<8} ecmp {ecmp.fraction_of_ideal:.3f}  c4 NOT PLANNED: {e}")
                        rows.append({"seed": seed, "pattern": pattern, "ranks": len(hosts), "ok": False,
                                     "ecmp": ecmp.fraction_of_ideal, "c4": 0.0, "error": str(e)})
                        loop.delete_job(name)
                        continue
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


# ---- link-down -------------------------------------------------------------------------------


def _busy_uplink(tb: Testbed, asg: list[dict[str, Any]]) -> str:
    """A leaf-spine link the plan puts flows on (the first leaf's, most flows)."""
    counts: dict[str, int] = {}
    spine_links = {ln.name for ln in tb.plan.links if not ln.host_link}
    for a in asg:
        for name in a["links"]:
            if name in spine_links:
                counts[name] = counts.get(name, 0) + 1
    return max(sorted(counts), key=lambda n: counts[n])


def recovery(timeline: list[tuple[float, float, float]], t_fault: float, target: float) -> dict[str, Any]:
    """From the iteration timeline: bus bandwidth before the fault (mean), the first iteration
    that started after it, and when the first iteration at or above `target` ended (seconds
    after the fault; None: never)."""
    before = [f for t0, t1, f in timeline if t1 <= t_fault]
    after = [(t0, t1, f) for t0, t1, f in timeline if t1 > t_fault]
    back = next((t1 - t_fault for t0, t1, f in after if f >= target and t0 >= t_fault - 0.01), None)
    hit = next((f for t0, t1, f in after), None)
    steady = [f for t0, t1, f in after[1:]] or [f for _, _, f in after]
    return {"before": statistics.mean(before) if before else None, "during": hit,
            "after": statistics.mean(steady) if steady else None, "recovered_s": back}


def link_down(tb: Testbed, iters: int = 12, fail_after_s: float = 3.0, bytes_: int = 4 << 20, channels: int = 2,
              log: Callable[[str], None] = print, workdir: Path | None = None, shared: Loop | None = None,
              qps: int = 2) -> dict[str, Any]:
    """A ring planned by c4 runs; a spine link its flows use goes down (`ip link set`, routing
    converges: the other leaves stop using that spine toward the cut leaf); the scenario, as
    the operator, PATCHes the link down; c4 re-plans. Measured: the live ring's bus bandwidth
    through it (its sockets cannot move: the kernel's re-hash carries the cut flows), the
    re-plan's latency and the `job.replanned` webhook, and the ring's next communicator on the
    new plan, against what the remaining capacity allows (ideal / the plan's max utilization).

    With `qps` >= 2 each connection has sockets to shift weight between: c4 marks the pairs the
    change re-hashed stale, the agents re-probe them, and c4 re-weights the live connections
    (`controller.services.failover`: a second `job.replanned`, reason "... re-probed"), which
    the node agents push to the shim without a reconnect."""
    hosts = default_hosts(tb.plan)
    out: dict[str, Any] = {}
    with loop_on(tb, workdir, shared=shared) as loop:
        name = "link-down"
        # Rebalancing off for this job: the scenario measures the failover alone. (With it on, the
        # rebalancer sometimes moved a fresh job's flows at once, from smoothed link rates that
        # still carried the previous job's traffic as "background": see testbed/README.md.)
        loop.post_job(name, hosts, "ring", channels=channels, qps=qps, diagnosis={"auto_isolate": False},
                      rebalance=False)
        asg = loop.assignments(name)["assignments"]
        link = _busy_uplink(tb, asg)
        kw = {"bytes": bytes_, "warmup": 1, "channels": channels, "chunk_bytes": 64 << 10, "verify": "first",
              "timeout_s": 30.0}
        th, box = run_in_background(tb, c4_spec(loop, name, "ring", hosts, iters=iters, **kw))
        time.sleep(fail_after_s)
        t_fault = time.time()
        tb.set_link_state(link, up=False, converge=True)
        t_patch0 = time.monotonic()
        r = loop.http.patch(f"/v1/links/{link}", json={"state": "down"})
        patch_s = time.monotonic() - t_patch0
        if r.status_code != 200:
            raise TestbedError(f"PATCH /v1/links/{link}: {r.status_code} {r.text[:200]}")
        replanned = r.json().get("replanned_flows")
        hook = wait_for(lambda: [d for d in loop.webhooks.events("job.replanned") if d.data.get("job") == name],
                        10, "the job.replanned webhook")
        reweighted = None
        with suppress(TestbedError):
            reweighted = wait_for(lambda: [d for d in loop.webhooks.events("job.replanned")
                                           if d.data.get("job") == name and "re-probed" in str(d.data.get("reason"))],
                                  15, "the re-weight after fresh probes", 0.1)
        reweight_s = reweighted[0].received_s - t_patch0 if reweighted else None
        job = loop.http.get(f"/v1/jobs/{name}").json()
        # What the remaining capacity allows: every ring connection crosses the spines (ranks
        # interleaved over the leaves), so the cut leaf sends hosts_per_leaf line rates over
        # spines - 1 uplinks. (The re-plan's own max utilization, printed beside, can be higher:
        # it was made on probes the change had made stale.)
        replan_allowed = min(1.0, 1.0 / job["plan"]["max_link_utilization"])
        allowed = min(1.0, (len(tb.plan.spines) - 1) / tb.plan.spec.hosts_per_leaf)
        live = finished(th, box, iters * 30 + 60)
        timeline = iteration_timeline(live)
        rec = recovery(timeline, t_fault, 0.9 * allowed)
        rec["timeline"] = [(round(t0 - t_fault, 2), round(t1 - t_fault, 2), round(f, 3)) for t0, t1, f in timeline]
        # The ring's next communicator (a restart, or NCCL's next comm) looks its ports up afresh.
        nxt = run_job(tb, c4_spec(loop, name, "ring", hosts, iters=3, **kw))
        tb.set_link_state(link, up=True, converge=True)
        loop.http.patch(f"/v1/links/{link}", json={"state": "up"})
        loop.delete_job(name)
        out = {"link": link, "allowed": allowed, "replan_allowed": replan_allowed, "patch_s": patch_s, "replanned_flows": replanned,
               "webhook_signature_ok": all(d.signature_ok for d in hook),
               "webhook_after_s": hook[0].received_s - t_patch0 + patch_s * 0,
               "reweighted_after_s": reweight_s, "qps": qps,
               "live": rec, "live_ok": live.ok, "next": nxt.fraction_of_ideal, "next_ok": nxt.ok and nxt.verified(),
               "next_vs_allowed": nxt.fraction_of_ideal / allowed}
    log(f"  link {link} down {fail_after_s:g} s into the ring (ip link set, routes converged); PATCHed by the "
        f"scenario as operator in {out['patch_s'] * 1000:.0f} ms: {replanned} flows re-planned, job.replanned "
        f"webhook {'signed' if out['webhook_signature_ok'] else 'BAD SIGNATURE'}")
    log(f"  remaining capacity allows {allowed:.2f} of ideal ((spines - 1) / hosts per leaf; the PATCH's re-plan, "
        f"on stale probes, allowed {out['replan_allowed']:.2f})")
    log(f"  live connections re-weighted (re-probed, {qps} sockets per connection, no reconnect): "
        f"{f'after {reweight_s:.2f} s' if reweight_s is not None else 'NOT within 15 s'} of the PATCH")
    rb, rd, ra = rec["before"], rec["during"], rec["after"]
    log(f"  live ring (open sockets stay; the kernel re-hashes flows, c4 re-weights them): before {rb or 0:.3f}, the iteration "
        f"hit {rd or 0:.3f}, after {ra or 0:.3f} of ideal; back to >= 0.9 x allowed "
        f"{'after {:.1f} s'.format(rec['recovered_s']) if rec['recovered_s'] is not None else 'NEVER'}")
    log("  timeline (s from the fault: start, end, of ideal): "
        + " ".join(f"[{a:+.1f},{b:+.1f}] {f:.2f}" for a, b, f in rec["timeline"]))
    log(f"  next communicator on the re-plan: {out['next']:.3f} of ideal = {out['next_vs_allowed']:.2f} of allowed")
    return out


@scenario("link-down", "a spine link fails under a c4-planned ring: PATCH, re-plan, recovery time")
def _link_down(tb: Testbed, argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="c4-testbed run link-down")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--fail-after-s", type=float, default=3.0)
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--qps", type=int, default=2, help="sockets per connection (weights need 2 or more)")
    _common(ap)
    a = ap.parse_args(argv)
    res = link_down(tb, a.iters, a.fail_after_s, a.bytes, workdir=Path(a.workdir) if a.workdir else None,
                    qps=a.qps)
    emit(res, a.json)
    return 0 if res["live_ok"] and res["next_ok"] else 1


# ---- faults ----------------------------------------------------------------------------------

FAULT_KINDS = ("noncomm_hang", "comm_slow", "noncomm_slow", "comm_hang")


def _kill_ranks(tb: Testbed, hosts: list[str], sig: int = 9) -> None:
    """Stop the job's ranks (the workload's processes in its hosts' namespaces), by pid."""
    for h in hosts:
        for pid, comm in tb.processes(h).items():
            if comm == "c4-workload":
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass


def _suspect_ok(kind: str, first: dict[str, str] | None, want: dict[str, Any]) -> bool:
    if first is None:
        return False
    if kind in ("noncomm_hang", "noncomm_slow"):
        return first["kind"] == "host" and first["name"] == want["host"]
    if kind == "comm_slow":
        return (first["kind"] == "nic_port" and first["name"] == want["port"]) or \
               (first["kind"] == "link" and first["name"] == want["link"])
    return first["kind"] == "link" and first["name"] == want["link"]


def one_fault(tb: Testbed, loop: Loop, kind: str, hosts: list[str], victim: int = 1, channels: int = 2,
              bytes_: int = 2 << 20, fault_after_s: float = 3.0, detect_s: float = 40.0,
              diagnosis: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a c4-planned ring, inject one fault into rank `victim` (its host, port or a link its
    flows cross) `fault_after_s` in, wait for the alarm; undo the fault, stop the ranks,
    release the job and any isolated host. Returns the verdict."""
    name = f"fault-{kind.replace('_', '-')}"
    host = hosts[victim]
    port = tb.plan.host(host).ports[0]
    host_link = next(ln.name for ln in tb.plan.links if ln.host_link and host in (ln.a.node, ln.b.node))
    diag = {**CLEAN_DIAGNOSIS, **(diagnosis or {})}
    loop.post_job(name, hosts, "ring", channels=channels, qps=1, diagnosis=diag)
    asg = loop.assignments(name)["assignments"]
    faults = {}
    if kind == "noncomm_slow":  # the rank enters every collective late from its 4th on (slow compute)
        faults[victim] = Fault(late_ms=1500.0, late_from=4)
    spec = c4_spec(loop, name, "ring", hosts, iters=60, bytes=bytes_, warmup=1, channels=channels,
                   chunk_bytes=64 << 10, verify="first", timeout_s=25.0)
    spec.faults = faults
    want: dict[str, Any] = {"host": host, "port": f"{host}:mlx5_0:{port.name}", "link": host_link}
    undo: Callable[[], None] = lambda: None  # noqa: E731
    if kind == "comm_hang":  # a spine link under the ring, black-holed (routing has not converged)
        dead = next(n for a in asg if a["src_host"] != host for n in a["links"]
                    if n in {ln.name for ln in tb.plan.links if not ln.host_link})
        want["link"] = dead
    th, box = run_in_background(tb, spec)
    t0 = time.monotonic()
    time.sleep(fault_after_s)
    t_fault = time.monotonic()
    how = ""
    if kind == "noncomm_hang":
        pids = [p for p, c in tb.processes(host).items() if c == "c4-workload"]
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        how = f"SIGSTOP rank {victim} on {host} (pid {','.join(map(str, pids))})"
    elif kind == "comm_slow":
        slow = max(1, tb.plan.spec.rate_mbit // 4)
        tb.set_link_rate(host_link, slow)
        undo = lambda: tb.set_link_rate(host_link, None)  # noqa: E731
        how = f"{host_link} shaped to {slow} Mbit/s both ways (tc htb; no netem on this kernel)"
    elif kind == "noncomm_slow":
        how = f"rank {victim} on {host} enters every collective 1500 ms late from its 4th (--late-ms)"
    elif kind == "comm_hang":
        tb.set_link_state(want["link"], up=False, converge=False)
        undo = lambda: tb.set_link_state(want["link"], up=True, converge=True)  # noqa: E731
        how = f"{want['link']} down (ip link set), routes not converged: flows onto it are black-holed"

    def alarm() -> dict[str, Any] | None:
        mine = [a for a in loop.alarms(name)]
        return mine[-1] if mine else None

    first_alarm = None
    with suppress(TestbedError):
        first_alarm = wait_for(alarm, detect_s, f"an alarm for {name}", 0.2)
    detected_s = time.monotonic() - t_fault if first_alarm else None
    first: dict[str, str] | None = first_alarm["suspects"][0] if first_alarm and first_alarm["suspects"] else None
    isolate_expected = first is not None and first["kind"] in ("host", "nic_port")

    def isolated_now(of: str = host) -> list[Delivery]:
        return [d for d in loop.webhooks.events("host.isolated") if d.data.get("host") == of and d.received_s >= t0]

    def restart_now() -> list[Delivery]:
        return [d for d in loop.webhooks.events("job.restart_requested")
                if d.data.get("job") == name and d.received_s >= t0]

    # Isolation and webhooks follow the alarm's commit. Waited for, not slept on: under load an
    # isolation later than a fixed 1 s could come after this fault's `release_all_hosts` and
    # leave the host isolated into the next fault, whose isolation then would not happen.
    time.sleep(1.0)
    if isolate_expected:
        named = first["name"].split(":")[0] if first else host  # the host the alarm isolates
        with suppress(TestbedError):
            wait_for(lambda: isolated_now(named) and restart_now(), 10.0, "isolation and the restart webhook", 0.2)
    alarms = loop.alarms(name)
    undo()
    _kill_ranks(tb, hosts)
    with suppress(TestbedError):
        finished(th, box, 60)
    isolated, restart = isolated_now(), restart_now()
    verdict = {
        "kind": kind, "injected": how, "expected": want["link"] if kind in ("comm_hang",) else
        (f"{want['port']} or {want['link']}" if kind == "comm_slow" else want["host"]),
        "alarm_kind": first_alarm["kind"] if first_alarm else None, "first_suspect": first,
        "suspects": first_alarm["suspects"][:3] if first_alarm else [],
        "detected_s": detected_s, "alarms": len(alarms), "extra_alarms": [a["kind"] for a in alarms[1:]],
        "isolation_expected": isolate_expected,
        "isolated": bool(isolated), "restart_webhook": bool(restart),
        "signatures_ok": all(d.signature_ok for d in (*isolated, *restart)),
        "wall_s": time.monotonic() - t0,
    }
    verdict["right"] = (verdict["alarm_kind"] == kind and _suspect_ok(kind, first, want)
                        and (not isolate_expected or (verdict["isolated"] and verdict["restart_webhook"]
                                                      and verdict["signatures_ok"])))
    loop.delete_job(name)
    loop.release_all_hosts()
    return verdict


def clean_phase(tb: Testbed, loop: Loop, hosts: list[str], iters: int = 8, channels: int = 2,
                bytes_: int = 2 << 20) -> dict[str, Any]:
    """A clean ring with the same short detector settings: no alarm may open."""
    name = "clean"
    loop.post_job(name, hosts, "ring", channels=channels, qps=1, diagnosis=CLEAN_DIAGNOSIS)
    res = run_job(tb, c4_spec(loop, name, "ring", hosts, iters=iters, bytes=bytes_, warmup=1, channels=channels,
                              chunk_bytes=64 << 10, verify="first", timeout_s=25.0))
    time.sleep(2 * CLEAN_DIAGNOSIS["hang_timeout_s"])  # the detectors see the end too
    alarms = loop.alarms(name)
    loop.delete_job(name)
    loop.release_all_hosts()  # a false alarm may have isolated one
    return {"ok": res.ok and res.verified(), "alarms": [a["kind"] for a in alarms], "fraction": res.fraction_of_ideal}


def faults(tb: Testbed, kinds: tuple[str, ...] = FAULT_KINDS, log: Callable[[str], None] = print,
           workdir: Path | None = None, clean_iters: int = 14, shared: Loop | None = None) -> dict[str, Any]:
    hosts = default_hosts(tb.plan)
    verdicts = []
    with loop_on(tb, workdir, shared=shared) as loop:
        clean = clean_phase(tb, loop, hosts, iters=clean_iters)
        log(f"  clean ring ({clean_iters} collectives, hang timeout {CLEAN_DIAGNOSIS['hang_timeout_s']:g} s, slow "
            f"factor {CLEAN_DIAGNOSIS['slow_factor']:g} over {CLEAN_DIAGNOSIS['slow_window']}): "
            f"{len(clean['alarms'])} alarms {clean['alarms'] or ''}")
        for kind in kinds:
            v = one_fault(tb, loop, kind, hosts, detect_s=30.0 if kind == "comm_slow" else 45.0)
            verdicts.append(v)
            fs = v["first_suspect"]
            log(f"  {kind:<13} {'RIGHT' if v['right'] else 'WRONG'}: {v['injected']}")
            det = f"{v['detected_s']:.1f} s" if v["detected_s"] is not None else "-"
            log(f"      alarm {v['alarm_kind']} after {det}, first suspect "
                f"{fs['kind'] + ' ' + fs['name'] if fs else None} (expected {v['expected']}); "
                f"host isolated {v['isolated']}, restart webhook {v['restart_webhook']}, signatures "
                f"{'verified' if v['signatures_ok'] else 'BAD'}; other alarms {v['extra_alarms'] or 'none'}")
    right = sum(v["right"] for v in verdicts)
    return {"clean": clean, "verdicts": verdicts, "right": right, "total": len(verdicts),
            "false_alarms": len(clean["alarms"])}


@scenario("faults", "noncomm_hang, comm_slow, noncomm_slow, comm_hang injected under c4-planned rings: localized?")
def _faults(tb: Testbed, argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="c4-testbed run faults")
    ap.add_argument("--kinds", default=",".join(FAULT_KINDS))
    _common(ap)
    a = ap.parse_args(argv)
    res = faults(tb, tuple(a.kinds.split(",")), workdir=Path(a.workdir) if a.workdir else None)
    print(f"faults {res['right']}/{res['total']} localized right; {res['false_alarms']} false alarms in the clean phase")
    emit(res, a.json)
    return 0 if res["right"] == res["total"] and not res["false_alarms"] else 1


# ---- congestion ------------------------------------------------------------------------------

# The testbed's links run at tens of Mbit/s, a thousandth of a fabric's: the detector's packet
# floor (1000 packets/s by default) is scaled to the testbed, and its EWMA to 1 s polls.
#
# The ECN thresholds too (enter 2 %, leave 0.5 %; defaults 5 % and 1 %): the testbed's hosts run
# TCP with classic ECN (RFC 3168: one window reduction per round trip however many packets are
# marked), and its marked fraction does not grow with the overload: measured here, a healthy
# link that a planned ring saturates marks 5-22 % of packets (host downlinks ~20 %), a spine
# link throttled to a quarter 5.5-14 %. No fraction tells them apart, so the detector here
# calls any persistent marking congestion and the rebalancer tells the two apart by load
# (`te.rebalance.at_planned_load`: a direction at its planned load, within capacity, with no
# background, is left alone; a throttled one carries far less than capacity: degraded). The
# rebalancer runs every poll (1 s) rather than every 2 s.
CONGESTION_ENV = {"C4_CONGESTION_MIN_PKTS_PER_S": "50", "C4_CONGESTION_EWMA_TAU_S": "2",
                  "C4_CONGESTION_ENTER_SAMPLES": "2", "C4_LINK_SAMPLE_FRESH_S": "10",
                  "C4_CONGESTION_ECN_ENTER_FRACTION": "0.02", "C4_CONGESTION_ECN_LEAVE_FRACTION": "0.005",
                  "C4_REBALANCE_INTERVAL_S": "1"}


def _channels_all_on(rows: list[Any], link: str) -> int:
    """Of `(src_rank, dst_rank, channel, qp, path, weight)` rows, the channels whose every flow's
    path crosses `link` (its two switches adjacent on the path)."""
    a, b = (x.split(":")[0] for x in link.split("--"))
    by: dict[tuple[int, int, int], list[bool]] = {}
    for src, dst, ch, _, path, _w in rows:
        hops = list(itertools.pairwise(path))
        by.setdefault((src, dst, ch), []).append((a, b) in hops or (b, a) in hops)
    return sum(1 for v in by.values() if all(v))


def _rebalancer_present() -> bool:
    """Whether this controller acts on congestion (issue 13 step 3, weights then paths)."""
    import importlib.util

    return importlib.util.find_spec("controller.te.rebalance") is not None


def congestion(tb: Testbed, iters: int = 20, throttle_after_s: float = 3.0, bytes_: int = 2 << 20, channels: int = 2,
               log: Callable[[str], None] = print, workdir: Path | None = None, detect_s: float = 30.0,
               shared: Loop | None = None, control: bool = False, poll_s: float = 1.0,
               repolls: int = 2) -> dict[str, Any]:
    """`shared`: a loop started with `CONGESTION_ENV` in its controller's environment.
    `control`: everything but the throttle (the no-false-verdict check: nothing should be
    answered, no direction judged degraded). `poll_s`: the switch agent's interval (the EWMA's
    time constant follows it, 2 intervals as in `CONGESTION_ENV`); `repolls`: its
    `repolls_per_interval`."""
    """A c4-planned ring runs; a spine link its flows use is throttled to a quarter of its rate
    (`tc` HTB: the nftables marker follows, so its queue marks CE); the switch agent's polls
    bring the marks to the controller, whose detector must call that direction congested."""
    hosts = default_hosts(tb.plan)
    poll = poll_s
    settings = LoopSettings(switch_interval_s=poll, switch_repolls_per_interval=repolls,
                            controller_env={**CONGESTION_ENV, "C4_CONGESTION_EWMA_TAU_S": f"{2 * poll:g}"})
    with loop_on(tb, workdir, settings, shared=shared) as loop:
        name = "congestion"
        loop.post_job(name, hosts, "ring", channels=channels, qps=2, diagnosis={"auto_isolate": False})
        asg = loop.assignments(name)["assignments"]
        link = _busy_uplink(tb, asg)
        spec = c4_spec(loop, name, "ring", hosts, iters=iters, bytes=bytes_, warmup=1, channels=channels,
                       chunk_bytes=64 << 10, verify="first", timeout_s=30.0)
        th, box = run_in_background(tb, spec)
        time.sleep(throttle_after_s)
        before = loop.http.get("/v1/congestion").json()["congested"]
        slow = max(1, tb.plan.spec.rate_mbit // 4)
        t_fault = time.time()
        t0 = time.monotonic()
        if not control:
            tb.set_link_rate(link, slow)

        t_fault_us = int(t_fault * 1e6)
        already = [x for x in before if x["link"] == link]

        def hot() -> list[dict[str, Any]] | None:
            c = [x for x in loop.http.get("/v1/congestion").json()["congested"]
                 if x["link"] == link and x["t_us"] > t_fault_us and (already or x["since_us"] >= t_fault_us)]
            return c or None

        found = None
        with suppress(TestbedError):
            found = wait_for(hot, detect_s, f"{link} congested", 0.2)
        detected_s = time.monotonic() - t0 if found else None
        replans = [d for d in loop.webhooks.events("job.replanned") if d.data.get("job") == name]
        res = finished(th, box, iters * 30 + 60)
        replans = [d for d in loop.webhooks.events("job.replanned") if d.data.get("job") == name]
        first_action = next((d.received_s - t0 for d in replans if d.received_s >= t0), None)
        final = loop.assignments(name)["assignments"]
        answered = (loop.http.get(f"/v1/jobs/{name}").json().get("plan") or {}).get("congestion") or []
        if not control:
            tb.set_link_rate(link, None)
        loop.delete_job(name)
        # What the remaining capacity allows: every ring connection crosses the spines (ranks
        # interleaved over the leaves), so each leaf sends hosts_per_leaf line rates up over its
        # uplinks, one of them now at a quarter.
        spec_ = tb.plan.spec
        allowed = min(1.0, (len(tb.plan.spines) - (0 if control else 1 - slow / spec_.rate_mbit)) / spec_.hosts_per_leaf)
        timeline = iteration_timeline(res)
        rec = recovery(timeline, t_fault, 0.9 * allowed)
        rec["timeline"] = [(round(a - t_fault, 2), round(b - t_fault, 2), round(f, 3)) for a, b, f in timeline]
        out = {"link": link, "throttled_mbit": slow, "detected_s": detected_s, "poll_s": poll, "t_fault_us": t_fault_us,
               "within_3_polls": detected_s is not None and detected_s <= 3 * poll + 1.0,
               "congested": found, "before": before, "already_congested": bool(already),
               "rebalancer": _rebalancer_present(), "allowed": allowed, "first_action_s": first_action,
               "replanned_webhooks": len(replans), "ring": rec, "ok": res.ok,
               "replanned_at_s": [round(d.received_s - t0, 2) for d in replans],
               "replanned_reasons": [str(d.data.get("reason")) for d in replans],
               "answered": answered,
               "final_weights": [(a.get("src_rank"), a.get("dst_rank"), a.get("channel"), a.get("qp"), a.get("path"),
                                  a.get("weight")) for a in final]}
    det = f"{detected_s:.1f} s ({detected_s / poll:.1f} polls)" if detected_s is not None else "NOT detected"
    frac = found[0]["ecn_marked_fraction"] if found else None
    if control:
        log(f"  CONTROL: {link} NOT throttled (the no-false-verdict run; times are from when the throttle would be)")
    log(f"  {link} throttled to {slow} Mbit/s (tc htb) {throttle_after_s:g} s into the ring: "
        f"{'already congested before the throttle, still after' if already and found else 'congested after ' + det}; "
        f"ECN-marked fraction {frac if frac is None else f'{frac:.3f}'}")
    if before:
        log(f"  congested before the throttle (the ring alone, at line rate under TCP's ECN response): "
            f"{', '.join(x['link'] + ' ' + x['direction'] + ' (' + x['reason'] + ')' for x in before)}")
    if out["rebalancer"]:
        fa = f"{first_action:.1f} s" if first_action is not None else "never"
        log(f"  rebalancing: {len(replans)} job.replanned, the first {fa} after the throttle; remaining capacity "
            f"allows {allowed:.3f} of ideal; ring before {rec['before'] or 0:.3f}, during {rec['during'] or 0:.3f}, "
            f"after {rec['after'] or 0:.3f}; back >= 0.9 x allowed after {rec['recovered_s']}")
        log(f"  job.replanned at {', '.join(f'{x:.1f} ({r})' for x, r in zip(out['replanned_at_s'], out['replanned_reasons'], strict=True))} s after the throttle")
        stuck = _channels_all_on(out["final_weights"], link)
        log(f"  channels (NCCL connections) with every flow on the throttled link, nothing to shift: {stuck}")
        for x in answered:
            cap = x.get("capacity_used_gbps")
            log(f"  answered {x.get('link')} {x.get('direction')}: {x.get('step')} at "
                f"{(x.get('at_us', 0) - t_fault_us) / 1e6:+.1f} s, measured {(x.get('measured_gbps') or 0) * 1e3:.1f} "
                f"Mbit/s, ECN {x.get('ecn_marked_fraction') or 0:.3f}"
                + (f", solved with {cap * 1e3:.1f} Mbit/s -> max utilization {x.get('max_utilization_after')}"
                   if cap else ""))
        log("  timeline (s from the throttle: start, end, of ideal): "
            + " ".join(f"[{a:+.1f},{b:+.1f}] {f:.2f}" for a, b, f in rec["timeline"]))
    else:
        log(f"  rebalancing: BLOCKED, the controller on this branch has no rebalancer (issue 13 step 3); the ring "
            f"stays at {rec['after'] or 0:.3f} of ideal after the throttle (before {rec['before'] or 0:.3f})")
    return out


@scenario("congestion", "a spine link throttled under a c4-planned ring: ECN marks via snmpd, congestion detected")
def _congestion(tb: Testbed, argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="c4-testbed run congestion")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--control", action="store_true", help="no throttle: what the controller answers without one")
    ap.add_argument("--poll-s", type=float, default=1.0, help="the switch agent's poll interval (s)")
    ap.add_argument("--repolls", type=int, default=2, help="the switch agent's repolls_per_interval")
    _common(ap)
    a = ap.parse_args(argv)
    res = congestion(tb, a.iters, workdir=Path(a.workdir) if a.workdir else None, control=a.control,
                     poll_s=a.poll_s, repolls=a.repolls)
    emit(res, a.json)
    if a.control:
        return 0 if res["ok"] else 1
    return 0 if res["detected_s"] is not None and res["ok"] else 1


# ---- demo ------------------------------------------------------------------------------------


@scenario("demo", "make demo on the testbed: the whole loop with a console, rings with ECMP then c4, a fault")
def _demo(tb: Testbed, argv: list[str]) -> int:
    """What `C4_DEMO_TESTBED=1 make demo` runs: the whole loop on this fabric with the
    controller on 0.0.0.0:PORT, then rounds of the same ring with plain ECMP and planned by
    c4 (bus bandwidth side by side), and in round 3 a rank stopped with SIGSTOP (an alarm, its
    host isolated, the restart webhook). Ctrl-C ends it; the fabric stays up (`c4-testbed down`)."""
    ap = argparse.ArgumentParser(prog="c4-testbed run demo")
    ap.add_argument("--port", type=int, default=int(os.environ.get("C4_DEMO_PORT", "8000")))
    ap.add_argument("--rounds", type=int, default=0, help="0: until Ctrl-C")
    ap.add_argument("--workdir", default=".c4/testbed-demo")
    a = ap.parse_args(argv)
    hosts = default_hosts(tb.plan)
    settings = LoopSettings(listen_host="0.0.0.0", listen_port=a.port, controller_env=dict(CONGESTION_ENV))
    try:
        with loop_on(tb, Path(a.workdir).resolve(), settings) as loop:
            print(f"c4 on the testbed {tb.prefix}: http://127.0.0.1:{a.port}/console/  (admin token {loop.admin})")
            print(f"  export C4_URL=http://127.0.0.1:{a.port} C4_TOKEN={loop.admin}")
            print(f"  {len(hosts)} ranks on {', '.join(hosts)}; node agents in their namespaces, switch agent on "
                  f"{len(tb.plan.switches)} snmpd; logs in {a.workdir}")
            kw = {"bytes": 4 << 20, "iters": 5, "warmup": 1, "channels": 2, "chunk_bytes": 64 << 10,
                  "verify": "first", "timeout_s": 30.0}
            n = 0
            while a.rounds == 0 or n < a.rounds:
                n += 1
                ecmp = run_job(tb, ecmp_spec(tb, f"ecmp-{n}", "ring", hosts, **kw))
                name = f"ring-{n}"
                loop.post_job(name, hosts, "ring", channels=2, qps=1, diagnosis=CLEAN_DIAGNOSIS)
                if n == 3:
                    v = one_fault(tb, loop, "noncomm_hang", hosts)
                    print(f"round {n}: {v['injected']}: alarm {v['alarm_kind']} after {v['detected_s'] or 0:.1f} s, "
                          f"suspect {v['first_suspect']}, host isolated {v['isolated']}, restart webhook "
                          f"{v['restart_webhook']} (signature {'ok' if v['signatures_ok'] else 'BAD'})")
                c4 = run_job(tb, c4_spec(loop, name, "ring", hosts, **kw))
                print(f"round {n}: ring bus bandwidth, of ideal: ECMP {ecmp.fraction_of_ideal:.3f}, "
                      f"c4 {c4.fraction_of_ideal:.3f}", flush=True)
                loop.delete_job(name)
    except KeyboardInterrupt:
        print("demo stopped")
    return 0
