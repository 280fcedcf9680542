"""Run the NCCL-like workload (`workload/c4_workload.c`) as a job on a testbed.

`run_job(tb, JobSpec(...))` builds the shim and the workload when needed, starts one rank per
host namespace with what a launcher sets (`RANK`, `C4_RANK`, `WORLD_SIZE`, `C4_JOB`,
`NCCL_NET_PLUGIN`, `C4_SHIM_ADDR` = the rank's NIC port address, `C4_SHIM_PORT`, and
`C4_AGENT_SOCKET`: `off` for plain ECMP, else the static agent's socket for that host),
waits (bounded), and returns per-rank iteration records, per-iteration times and bus
bandwidth, and the telemetry the shim sent (when the static agent ran).

Bus bandwidth follows nccl-tests: an iteration's time is from the first rank entering to the
last leaving; algbw = bytes / time; busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n
(all-to-all), x 1 (pairs). The ideal is the shaped link rate.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.fabric import Testbed, TestbedError
from testbed.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
SHIM_DIR = ROOT / "nccl_shim"
SHIM_LIB = SHIM_DIR / "build" / "libnccl-net-c4.so"
WORKLOAD_DIR = Path(__file__).resolve().parent / "workload"
WORKLOAD_BIN = WORKLOAD_DIR / "build" / "c4-workload"
PATTERNS = ("ring", "alltoall", "pairs")


def ensure_built() -> None:
    """`make` the shim library and the workload (no-ops when up to date)."""
    for argv in (["make", "-s", "-C", str(SHIM_DIR), "build/libnccl-net-c4.so"],
                 ["make", "-s", "-C", str(WORKLOAD_DIR)]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            raise TestbedError(f"{' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")


@dataclass(frozen=True)
class Fault:
    """A rank's own faults: enter every collective from `late_from` on `late_ms` late (slow
    compute), or stop entering at iteration `hang_at` (a non-communication hang)."""

    late_ms: float = 0.0
    late_from: int = 0
    hang_at: int | None = None


Flows = list[tuple[int, int]]  # (sport, weight_ppm); sport 0 = an ephemeral port


@dataclass
class JobSpec:
    name: str = "ring"
    pattern: str = "ring"
    hosts: list[str] | None = None  # rank r runs on hosts[r]; default: interleaved over leaves
    port: str = "p0"  # the NIC port each rank uses, or "all" (channel c on port c mod count)
    bytes: int = 8 << 20
    iters: int = 5
    warmup: int = 1
    channels: int = 2
    chunk_bytes: int = 128 << 10
    pairs: list[tuple[int, int]] | None = None
    faults: dict[int, Fault] = field(default_factory=dict)
    agent: bool = False  # run the static agent (records telemetry; needed for flows below)
    flows_per_conn: int = 0  # K ephemeral sockets per connection (0: the shim's default, 1)
    pins: dict[tuple[str, str, int], Flows] = field(default_factory=dict)  # (src, dst, channel)
    timeout_s: float = 60.0
    verify: str = "all"  # or "first"
    compute_ms: float = 0.0
    env: dict[str, str] = field(default_factory=dict)  # extra environment for every rank
    # host -> the socket of that host's c4-node-agent (testbed.loop): the real agent, which owns
    # the shim's port and hands accepted sockets over; exclusive with `agent` (the static one)
    agent_sockets: dict[str, str] = field(default_factory=dict)
    shim_port: int | None = None  # the port ranks listen on / connect to (default: the fabric's)

    def check(self) -> JobSpec:
        if self.pattern not in PATTERNS:
            raise TestbedError(f"pattern {self.pattern!r}: one of {', '.join(PATTERNS)}")
        if (self.flows_per_conn or self.pins) and not self.agent:
            raise TestbedError("flows_per_conn and pins are answers of the agent: set agent=True")
        if self.agent and self.agent_sockets:
            raise TestbedError("agent (the static stand-in) and agent_sockets (c4-node-agent) exclude each other")
        return self


@dataclass
class IterStat:
    iter: int
    time_s: float
    algbw_mbit: float
    busbw_mbit: float


@dataclass
class JobResult:
    spec: JobSpec
    hosts: list[str]
    addresses: list[str]  # each rank's first NIC port address
    rank_addresses: list[list[str]]  # every NIC port address each rank uses
    records: dict[int, list[dict[str, Any]]]  # rank -> its JSON lines
    codes: dict[int, int | None]
    stderr: dict[int, str]
    telemetry: list[dict[str, Any]]
    iterations: list[IterStat]
    rate_mbit: int  # the ideal: the shaped rate times the NIC ports each rank uses

    @property
    def ok(self) -> bool:
        return all(c == 0 for c in self.codes.values())

    @property
    def bytes_per_rank(self) -> int:
        return _job_bytes(self.records, self.spec)

    @property
    def busbw_mbit(self) -> float:
        """Mean bus bandwidth over the measured (non-warm-up) iterations."""
        its = self.iterations
        return sum(i.busbw_mbit for i in its) / len(its) if its else 0.0

    @property
    def fraction_of_ideal(self) -> float:
        return self.busbw_mbit / self.rate_mbit

    def verified(self) -> bool:
        rows = [r for recs in self.records.values() for r in recs if r.get("event") == "iter"]
        return bool(rows) and all(r["verified"] in (True, None) for r in rows) and any(r["verified"] for r in rows)

    def table(self) -> str:
        lines = [f"{'iter':>4} {'time ms':>9} {'algbw Mbit/s':>13} {'busbw Mbit/s':>13} {'of ideal':>8}"]
        for i in self.iterations:
            lines.append(f"{i.iter:>4} {i.time_s * 1000:>9.1f} {i.algbw_mbit:>13.1f} {i.busbw_mbit:>13.1f} "
                         f"{i.busbw_mbit / self.rate_mbit:>8.3f}")
        return "\n".join(lines)


def default_hosts(plan: Plan, n: int | None = None) -> list[str]:
    """Ranks interleaved over the leaves (host0, host4, host8, ..., host1, host5, ... on a
    4-leaf fabric), so every ring neighbour sits on another leaf and every ring connection
    crosses the spines."""
    per = plan.spec.hosts_per_leaf
    order = [f"host{leaf * per + k}" for k in range(per) for leaf in range(len(plan.leaves))]
    return order[: n or len(order)]


def port_addresses(plan: Plan, host: str, port: str) -> list[str]:
    """The addresses a rank on `host` uses: one port's, or every port's for "all"."""
    ports = {p.name: p.address for p in plan.host(host).ports}
    if port == "all":
        return list(ports.values())
    if port not in ports:
        raise TestbedError(f"host {host} has no port {port} (ports: {', '.join(ports)})")
    return [ports[port]]


def bus_factor(pattern: str, n: int) -> float:
    if n < 2:
        return 1.0
    return {"ring": 2 * (n - 1) / n, "alltoall": (n - 1) / n, "pairs": 1.0}[pattern]


def iteration_stats(records: dict[int, list[dict[str, Any]]], pattern: str, nbytes: int) -> list[IterStat]:
    by_iter: dict[int, list[dict[str, Any]]] = {}
    for recs in records.values():
        for r in recs:
            if r.get("event") == "iter" and not r.get("warmup"):
                by_iter.setdefault(r["iter"], []).append(r)
    n = len(records)
    out = []
    for it, rows in sorted(by_iter.items()):
        if len(rows) < n:
            continue  # some rank did not finish this iteration
        t = (max(r["t_end_us"] for r in rows) - min(r["t_start_us"] for r in rows)) / 1e6
        alg = nbytes * 8 / max(t, 1e-9) / 1e6
        out.append(IterStat(it, t, alg, alg * bus_factor(pattern, n)))
    return out


def _agent_config(tb: Testbed, spec: JobSpec, hosts: list[str], job_dir: Path) -> dict[str, Any]:
    table = [{"local": s, "remote": d, "conn_index": c, "flows": [list(f) for f in flows]}
             for (s, d, c), flows in sorted(spec.pins.items())]
    return {"sockets": {h: str(job_dir / f"{h}.sock") for h in hosts},
            "netns": {h: f"/run/netns/{tb.netns(h)}" for h in hosts},
            "record": str(job_dir / "telemetry.jsonl"),
            "table": table, "default_flows": spec.flows_per_conn}


def run_job(tb: Testbed, spec: JobSpec) -> JobResult:
    spec.check()
    ensure_built()
    plan = tb.plan
    hosts = spec.hosts or default_hosts(plan)
    n = len(hosts)
    rank_addresses = [port_addresses(plan, h, spec.port) for h in hosts]
    addresses = [a[0] for a in rank_addresses]
    job_dir = tb.run_dir / "jobs" / f"{spec.name}-{time.time_ns()}"
    job_dir.mkdir(parents=True)
    agent = None
    if spec.agent:
        cfg = job_dir / "agent.json"
        cfg.write_text(json.dumps(_agent_config(tb, spec, hosts, job_dir)))
        agent = tb.popen("mgmt", [sys.executable, "-m", "testbed.agent", "--config", str(cfg),
                                  "--max-s", str(spec.timeout_s * (spec.iters + spec.warmup + 2) + 60)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert agent.stdout is not None
        if agent.stdout.readline().strip() != "ready":
            raise TestbedError(f"static agent did not start: {agent.stderr.read() if agent.stderr else ''}")
    procs: dict[int, subprocess.Popen[str]] = {}
    try:
        for r, (host, addrs) in enumerate(zip(hosts, rank_addresses, strict=True)):
            if spec.agent_sockets:  # c4-node-agent owns the port and hands sockets over
                agent_env = {"C4_AGENT_SOCKET": spec.agent_sockets[host], "C4_SHIM_HANDOFF": "1",
                             "C4_LOOKUP_TIMEOUT_MS": "1000"}
            else:
                # the static agent does not own the host's fixed port (c4-node-agent does and
                # hands sockets over): each process listens on it itself (nccl_shim/README.md)
                agent_env = {"C4_AGENT_SOCKET": str(job_dir / f"{host}.sock") if spec.agent else "off",
                             "C4_SHIM_HANDOFF": "0", "C4_LOOKUP_TIMEOUT_MS": "200"}
            env = {"RANK": str(r), "C4_RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": "0",
                   "C4_JOB": spec.name, "NCCL_NET_PLUGIN": str(SHIM_LIB), "C4_SHIM_ADDR": ",".join(addrs),
                   "C4_SHIM_PORT": str(spec.shim_port or plan.spec.shim_port), "C4_WATCHDOG_MS": "200",
                   **agent_env, **spec.env}
            argv = [str(WORKLOAD_BIN), "--rendezvous", str(job_dir), "--pattern", spec.pattern,
                    "--bytes", str(spec.bytes), "--iters", str(spec.iters), "--warmup", str(spec.warmup),
                    "--channels", str(spec.channels), "--chunk-bytes", str(spec.chunk_bytes),
                    "--timeout-s", str(spec.timeout_s), "--verify", spec.verify,
                    "--compute-ms", str(spec.compute_ms)]
            if spec.pairs:
                argv += ["--pairs", ",".join(f"{a}:{b}" for a, b in spec.pairs)]
            fault = spec.faults.get(r)
            if fault:
                argv += ["--late-ms", str(fault.late_ms), "--late-from", str(fault.late_from)]
                if fault.hang_at is not None:
                    argv += ["--hang-at", str(fault.hang_at)]
            # Files, not pipes: a rank must never block on its own output while another is waited on.
            with open(job_dir / f"rank{r}.out", "w") as out, open(job_dir / f"rank{r}.err", "w") as err:
                procs[r] = tb.popen(host, argv, env=env, stdout=out, stderr=err)
        deadline = time.monotonic() + spec.timeout_s * (spec.iters + spec.warmup + 1) + 30
        for p in procs.values():
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
    outs = {r: ((job_dir / f"rank{r}.out").read_text(), (job_dir / f"rank{r}.err").read_text()) for r in procs}
    records = {r: _json_lines(out) for r, (out, _) in outs.items()}
    rec = job_dir / "telemetry.jsonl"
    telemetry = _json_lines(rec.read_text()) if rec.exists() else []
    result = JobResult(spec, hosts, addresses, rank_addresses, records, {r: p.returncode for r, p in procs.items()},
                       {r: err for r, (_, err) in outs.items()}, telemetry,
                       iteration_stats(records, spec.pattern, _job_bytes(records, spec)),
                       plan.spec.rate_mbit * min(len(a) for a in rank_addresses))
    if os.environ.get("C4_TESTBED_KEEP_JOBS") != "1":
        for f in job_dir.glob("handle.*"):
            f.unlink(missing_ok=True)
    return result


def _json_lines(text: str) -> list[dict[str, Any]]:
    """JSON objects, one per line; a line cut short by a killed process is skipped."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _job_bytes(records: dict[int, list[dict[str, Any]]], spec: JobSpec) -> int:
    """The bytes per rank the workload actually used (it rounds to whole words per slice)."""
    for recs in records.values():
        for r in recs:
            if r.get("event") == "ready":
                return int(r["bytes"])
    return spec.bytes


def connection_rates(result: JobResult) -> list[dict[str, Any]]:
    """Per (rank, peer, direction) and collective: bytes and the rate the shim's profiler
    reported in its COLL records (bytes / (t_last - t_first)), from the recorded telemetry."""
    out = []
    for line in result.telemetry:
        m = line["msg"]
        if m.get("type") != "coll" or m.get("inflight"):
            continue
        for p in m.get("peers", []):
            span = (p["t_last_us"] - p["t_first_us"]) / 1e6
            if p["bytes"] and span > 0:
                out.append({"rank": m["rank"], "host": line["host"], "seq": m["seq"], "peer": p["peer"],
                            "dir": p["dir"], "bytes": p["bytes"], "seconds": span,
                            "mbit_s": p["bytes"] * 8 / span / 1e6})
    return out
