"""Probes and flows on a running testbed, from the Python side: reachability of every host
port, the hop a 5-tuple reaches (TTL-limited SYNs), one shaped TCP flow, and the spine a
leaf's kernel hashes a flow onto. Each runs the stdlib tools (`reach`, `probe`, `tcpflow`)
inside the hosts' namespaces with this interpreter.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from testbed import kernel
from testbed.fabric import Testbed, TestbedError
from testbed.plan import Plan


def _py(module: str) -> list[str]:
    return [sys.executable, "-m", f"testbed.{module}"]


def reach_all(tb: Testbed, timeout_s: float = 1.0) -> dict[str, dict[str, float | None]]:
    """{src address: {dst address: rtt_ms | None}} over every pair of host port addresses."""
    plan = tb.plan
    everyone = [p.address for h in plan.hosts for p in h.ports]

    def one(host: Any) -> dict[str, dict[str, float | None]]:
        srcs = ",".join(p.address for p in host.ports)
        out = tb.exec(host.name, [*_py("reach"), "--src", srcs, "--dst", ",".join(everyone),
                                  "--timeout-s", str(timeout_s)], timeout_s=10 * timeout_s + 10)
        return dict(json.loads(out.stdout))

    merged: dict[str, dict[str, float | None]] = {}
    for part in kernel.parallel(one, list(plan.hosts)):
        merged.update(part)
    return merged


def probe_hops(tb: Testbed, src: str, dst: str, sports: list[int], ttl: int = 2,
               dport: int | None = None) -> dict[int, str | None]:
    """Hop address reached at `ttl` by a TCP SYN (src, dst, sport, dport) for each sport."""
    plan = tb.plan
    host = plan.port_by_address(src).host
    ports = ",".join(str(p) for p in sports)
    out = tb.exec(host, [*_py("probe"), "--src", src, "--dst", dst, "--ttl", str(ttl),
                         "--dport", str(dport or plan.spec.shim_port), "--sports", ports], timeout_s=30)
    return {int(k): v for k, v in json.loads(out.stdout).items()}


def switch_of(plan: Plan, address: str | None) -> str | None:
    """The switch an interface or management address belongs to."""
    if address is None:
        return None
    for s in plan.switches:
        if s.mgmt_address == address:
            return s.name
    for link in plan.links:
        if not link.host_link:
            if link.a.ip == address:
                return link.a.node
            if link.b.ip == address:
                return link.b.node
    return None


def spines_by_sport(tb: Testbed, src: str, dst: str, sports: list[int],
                    dport: int | None = None) -> dict[int, str | None]:
    """For a flow between ports on different leaves: the spine each sport's packets cross."""
    plan = tb.plan
    return {s: switch_of(plan, hop) for s, hop in probe_hops(tb, src, dst, sports, 2, dport).items()}


def tcp_flow(tb: Testbed, src: str, dst: str, sport: int = 0, port: int = 5201,
             seconds: float = 2.0, nbytes: int | None = None) -> dict[str, float]:
    """One TCP flow between two host port addresses; the sink's measurement (payload Mbit/s
    from its first byte to its last)."""
    plan = tb.plan
    src_host, dst_host = plan.port_by_address(src).host, plan.port_by_address(dst).host
    sink = tb.popen(dst_host, [*_py("tcpflow"), "sink", "--bind", dst, "--port", str(port),
                               "--timeout-s", str(seconds + 20)], stdout=-1, stderr=-1, text=True)
    try:
        assert sink.stdout is not None
        if sink.stdout.readline().strip() != "listening":
            raise TestbedError(f"flow sink on {dst}:{port} did not start: {sink.stderr.read() if sink.stderr else ''}")
        argv = [*_py("tcpflow"), "send", "--src", src, "--sport", str(sport), "--dst", dst,
                "--port", str(port), "--seconds", str(seconds)]
        if nbytes is not None:
            argv += ["--bytes", str(nbytes)]
        tb.exec(src_host, argv, timeout_s=seconds + 30)
        out, err = sink.communicate(timeout=seconds + 30)
        if sink.returncode != 0:
            raise TestbedError(f"flow sink failed: {err.strip()}")
        return dict(json.loads(out))
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
