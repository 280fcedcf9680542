"""`Testbed`: bring a fabric up and down, run things in its namespaces, inject link faults.

The Python API tests and scenarios use (the `c4-testbed` CLI is a shell over it)::

    tb = Testbed("c4tb")
    tb.up(FabricSpec(leaves=2, spines=2, hosts_per_leaf=2))
    tb.exec("host0", ["ip", "route"])            # runs in namespace c4tb-host0
    tb.plan.host("host1").ports[0].address       # "10.1.0.3"
    tb.set_link_rate("leaf0:Ethernet0--spine0:Ethernet0", 25)   # both directions
    tb.doc()                                     # the API.md topology document
    tb.down()

Only namespaces named `<prefix>-*`, the processes inside them, the root-namespace link
`<prefix>-mg` and `<run dir>/<prefix>` are ever touched, so `down` is safe after a crash
(it needs nothing but the prefix) and testbeds with different prefixes coexist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed import commands, kernel, snmp, state
from testbed.commands import PortState
from testbed.document import to_document
from testbed.plan import DEFAULT_PREFIX, FabricSpec, LinkPlan, Plan, check_prefix, make_plan

SEED_SYSCTL = "net.ipv4.fib_multipath_hash_seed"


class TestbedError(RuntimeError):
    """A testbed command that cannot proceed (already up, not up, unknown link, ...)."""


@dataclass
class Timings:
    steps: dict[str, float] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.steps[step] = round(now - self._t0 - sum(self.steps.values()), 3)

    @property
    def total_s(self) -> float:
        return round(sum(self.steps.values()), 3)


@dataclass
class DownReport:
    namespaces: list[str]
    killed: list[int]
    root_link_removed: bool
    elapsed_s: float


class Testbed:
    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = check_prefix(prefix)
        self._data: dict[str, Any] | None = None
        self._plan: tuple[dict[str, Any], Plan] | None = None

    # ---- state ----
    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = state.load(self.prefix)
        if self._data is None:
            raise TestbedError(f"no testbed with prefix {self.prefix!r} is up (no {state.run_dir(self.prefix)}/state.json)")
        return self._data

    @property
    def plan(self) -> Plan:
        data = self.data
        if self._plan is None or self._plan[0] is not data:
            self._plan = (data, state.plan_of(data))
        return self._plan[1]

    @property
    def run_dir(self) -> Path:
        return state.run_dir(self.prefix)

    @property
    def hash_seed_supported(self) -> bool:
        return bool(self.data.get("hash_seed_supported", True))

    def is_up(self) -> bool:
        return state.load(self.prefix) is not None

    def netns(self, node: str) -> str:
        return self.plan.netns(node)

    # ---- up / down ----
    def up(self, spec: FabricSpec, extra_snmpd: Iterable[snmp.ExtraConfig] = ()) -> Timings:
        spec.check()
        t = Timings()
        with state.global_lock():
            if kernel.namespaces(self.prefix) or state.load(self.prefix):
                raise TestbedError(f"testbed {self.prefix!r} is already up (or left over): run `c4-testbed down --prefix {self.prefix}` first")
            if kernel.link_exists(f"{self.prefix}-mg"):
                raise TestbedError(f"link {self.prefix}-mg exists in the root namespace: run `c4-testbed down --prefix {self.prefix}` first")
            addrs = [f"{a['local']}/{a['prefixlen']}" for i in _root_addrs() for a in i.get("addr_info", [])]
            mgmt_net = state.pick_mgmt_net(addrs)
            plan = make_plan(spec, self.prefix, mgmt_net)
            state.save(self.prefix, spec, mgmt_net, {"phase": "building"})
            self._data = None
            t.mark("plan")
            try:
                self._build(plan, t, list(extra_snmpd))
            except BaseException:
                self._teardown()
                raise
            state.save(self.prefix, spec, mgmt_net,
                       {"phase": "up", "hash_seed_supported": self._seed_ok, "overrides": {},
                        "link_down": [], "up_s": t.total_s})
            self._data = None
        return t

    def _build(self, plan: Plan, t: Timings, extra: list[snmp.ExtraConfig]) -> None:
        kernel.ip_batch(commands.netns_batch(plan))
        t.mark("namespaces")
        first_switch = plan.netns(plan.switches[0].name)
        self._seed_ok = kernel.sysctl_exists(first_switch, SEED_SYSCTL)
        nodes = ["mgmt", *plan.nodes]
        kernel.parallel(lambda n: kernel.sysctl(plan.netns(n), commands.sysctls(plan, n, self._seed_ok)), nodes)
        t.mark("sysctls")
        kernel.ip_batch(commands.veth_batch(plan))
        t.mark("veths")

        def configure(node: str) -> None:
            ns = plan.netns(node)
            kernel.ip_batch(commands.ip_batch(plan, node), ns)
            if node != "mgmt":
                kernel.tc_batch(commands.tc_batch(plan, node), ns)
            if node in {s.name for s in plan.switches}:
                kernel.nft_load(ns, commands.nft_ruleset(plan, node))

        kernel.parallel(configure, nodes)
        kernel.ip_batch(commands.root_batch(plan))
        t.mark("addresses, routes, shaping, ECN")
        kernel.parallel(lambda s: snmp.start(plan, s, self.run_dir, extra), list(plan.switches))
        t.mark("snmpd")

    def down(self) -> DownReport:
        with state.global_lock():
            return self._teardown()

    def _teardown(self) -> DownReport:
        t0 = time.monotonic()
        names = kernel.namespaces(self.prefix)
        killed: list[int] = []
        for pids in kernel.pids_in(names).values():
            killed += pids
        kernel.kill_all(killed)
        if names:
            kernel.ip_batch([f"netns del {n}" for n in names])
        root_link = f"{self.prefix}-mg"
        removed = False
        if kernel.link_exists(root_link):  # normally gone with its peer in <prefix>-mgmt
            kernel.run(["ip", "link", "del", root_link], check=False)
            removed = True
        shutil.rmtree(state.run_dir(self.prefix), ignore_errors=True)
        self._data = None
        return DownReport(names, killed, removed, round(time.monotonic() - t0, 3))

    # ---- running things ----
    def exec(self, node: str, argv: Sequence[str], check: bool = True, timeout_s: float = 60.0,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kernel.netns_exec(self.netns(node), argv, stdin=stdin, check=check, timeout_s=timeout_s)

    def popen(self, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process in a node's namespace (`down` kills whatever is still running)."""
        full_env = {**os.environ, **(env or {})}
        return subprocess.Popen(["ip", "netns", "exec", self.netns(node), *argv], env=full_env, **kwargs)

    def processes(self, node: str) -> dict[int, str]:
        """pid -> command name of every process in a node's namespace (e.g. to `kill -STOP` a
        rank: the workload's processes are named `c4-workload`)."""
        out = {}
        for pid in kernel.pids_in([self.netns(node)]).get(self.netns(node), []):
            try:
                out[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
        return out

    def host_addresses(self) -> dict[str, dict[str, str]]:
        return {h.name: {p.name: p.address for p in h.ports} for h in self.plan.hosts}

    def link(self, name: str) -> LinkPlan:
        try:
            return self.plan.link(name)
        except KeyError:
            raise TestbedError(f"no link named {name!r}; see `c4-testbed doc` for the names") from None

    def doc(self) -> dict[str, Any]:
        return to_document(self.plan, self.hash_seed_supported)

    # ---- observing ----
    def counters(self, node: str) -> dict[str, dict[str, int]]:
        """Per interface of a node: the kernel's byte and packet counters (ip -s link)."""
        out = {}
        for link in kernel.links_json(self.netns(node), stats=True):
            s = link.get("stats64", {})
            out[link["ifname"]] = {"tx_bytes": s.get("tx", {}).get("bytes", 0),
                                   "rx_bytes": s.get("rx", {}).get("bytes", 0),
                                   "tx_packets": s.get("tx", {}).get("packets", 0),
                                   "rx_packets": s.get("rx", {}).get("packets", 0)}
        return out

    def ecn_marks(self, switch: str) -> dict[str, int]:
        """CE marks set per egress port of a switch since `up`."""
        counters = kernel.nft_counters(self.netns(switch), commands.NFT_TABLE)
        return {k.removeprefix("ecn_"): v for k, v in counters.items() if k.startswith("ecn_")}

    def queue_drops(self, node: str) -> dict[str, int]:
        """Packets each egress buffer (bfifo) dropped since `up`."""
        out = {}
        for q in kernel.qdisc_json(self.netns(node)):
            if q.get("kind") == "bfifo":
                out[q["dev"]] = int(q.get("drops", 0))
        return out

    def status(self) -> dict[str, Any]:
        """The kernel compared with the plan: missing namespaces or interfaces, links down,
        rates other than planned, snmpd agents not running."""
        plan = self.plan
        present = set(kernel.namespaces(self.prefix))
        problems: list[str] = []
        for node in ("mgmt", *plan.nodes):
            if plan.netns(node) not in present:
                problems.append(f"namespace {plan.netns(node)} is missing")
        links: list[dict[str, Any]] = []
        oper: dict[tuple[str, str], str] = {}
        rates: dict[tuple[str, str], float] = {}
        for node in plan.nodes:
            ns = plan.netns(node)
            if ns not in present:
                continue
            for lk in kernel.links_json(ns):
                # Admin state and carrier from the flags: operstate lags them (the kernel's
                # linkwatch updates it asynchronously, up to a second later under load).
                flags = set(lk.get("flags", []))
                oper[(node, lk["ifname"])] = "UP" if {"UP", "LOWER_UP"} <= flags else (
                    "DOWN" if "UP" not in flags else "NO-CARRIER")
            for end_link in plan.links:
                for end in (end_link.a, end_link.b):
                    if end.node == node and (node, end.ifname) in oper:
                        rate = kernel.htb_rate_mbit(ns, end.ifname)
                        if rate is not None:
                            rates[(node, end.ifname)] = rate
        overrides = state.overrides_of(self.data)
        set_down = set(self.data.get("link_down", []))
        for link in plan.links:
            row = {"name": link.name, "planned_mbit": link.rate_mbit}
            for side, end in (("a", link.a), ("b", link.b)):
                st = oper.get((end.node, end.ifname))
                row[f"{side}_state"] = st or "missing"
                row[f"{side}_mbit"] = rates.get((end.node, end.ifname))
                if st is None:
                    problems.append(f"{end.node}:{end.ifname} of {link.name} is missing")
                elif st != "UP" and link.name not in set_down:
                    problems.append(f"{end.node}:{end.ifname} of {link.name} is {st}, not set down by the testbed")
                want = overrides.get((end.node, end.ifname), PortState()).rate_mbit or link.rate_mbit
                got = rates.get((end.node, end.ifname))
                if got is not None and abs(got - want) > 0.01 * want:
                    problems.append(f"{end.node}:{end.ifname} shaped at {got} Mbit/s, expected {want}")
            links.append(row)
        snmpd = {s.name: snmp.pid_of(self.run_dir, s.name) is not None for s in plan.switches}
        problems += [f"snmpd of {s} is not running" for s, ok in snmpd.items() if not ok]
        return {"prefix": self.prefix, "spec": self.data["spec"], "mgmt_net": plan.mgmt_net,
                "mgmt_gateway": plan.mgmt_gateway, "hash_seed_supported": self.hash_seed_supported,
                "links": links, "snmpd": snmpd, "overrides": state.overrides_doc(overrides),
                "links_down": self.data.get("link_down", []), "problems": problems}

    # ---- faults ----
    def _ends(self, link: LinkPlan, direction: str) -> list[tuple[str, str]]:
        """Egress interfaces for a direction: 'both', 'ab' (a sends to b) or 'ba'."""
        if direction not in ("both", "ab", "ba"):
            raise TestbedError(f"direction {direction!r}: use both, ab or ba")
        out = []
        if direction in ("both", "ab"):
            out.append((link.a.node, link.a.ifname))
        if direction in ("both", "ba"):
            out.append((link.b.node, link.b.ifname))
        return out

    def _save_overrides(self, overrides: dict[tuple[str, str], PortState], **extra: Any) -> None:
        data = dict(self.data)
        data["overrides"] = state.overrides_doc({k: v for k, v in overrides.items() if v != PortState()})
        data.update(extra)
        spec = FabricSpec(**data.pop("spec"))
        mgmt_net = data.pop("mgmt_net")
        data.pop("prefix", None)
        state.save(self.prefix, spec, mgmt_net, data)
        self._data = None

    def _apply_nft(self, nodes: Iterable[str], overrides: Mapping[tuple[str, str], PortState]) -> None:
        plan = self.plan
        for node in sorted(set(nodes)):
            kernel.nft_load(plan.netns(node), commands.nft_ruleset(plan, node, overrides))

    def set_link_rate(self, name: str, rate_mbit: int | None, direction: str = "both") -> None:
        """Shape a link (or one direction) to `rate_mbit`; None restores the built rate. The
        switch's ECN marker follows the new rate."""
        link = self.link(name)
        if rate_mbit is not None and rate_mbit < 1:
            raise TestbedError("rate_mbit must be at least 1")
        overrides = state.overrides_of(self.data)
        plan = self.plan
        for node, ifname in self._ends(link, direction):
            cur = overrides.get((node, ifname), PortState())
            overrides[(node, ifname)] = replace(cur, rate_mbit=rate_mbit)
            kernel.tc_batch(commands.tc_rate_batch(plan, ifname, rate_mbit or link.rate_mbit), plan.netns(node))
        self._apply_nft([n for n, _ in self._ends(link, direction)], overrides)
        self._save_overrides(overrides)

    def set_link_loss(self, name: str, loss_pct: float, direction: str = "both") -> None:
        """Drop `loss_pct` percent of the packets leaving on a link (nftables numgen)."""
        if not 0 <= loss_pct <= 100:
            raise TestbedError("loss_pct must be between 0 and 100")
        link = self.link(name)
        overrides = state.overrides_of(self.data)
        for node, ifname in self._ends(link, direction):
            cur = overrides.get((node, ifname), PortState())
            overrides[(node, ifname)] = replace(cur, loss_ppm=round(loss_pct * 10_000))
        self._apply_nft([n for n, _ in self._ends(link, direction)], overrides)
        self._save_overrides(overrides)

    def set_link_state(self, name: str, up: bool, converge: bool = True) -> None:
        """`ip link set down/up` on the link's `a` end (the peer loses carrier).

        With `converge` (the default) the other leaves also drop (or restore) the spine as a
        next hop toward the affected leaf, as a fabric's routing protocol would after its hold
        timer; without it, flows hashed onto that spine from other leaves are black-holed,
        which is what a fabric sees before routing converges.
        """
        link = self.link(name)
        plan = self.plan
        kernel.run(["ip", "-n", plan.netns(link.a.node), "link", "set", link.a.ifname, "up" if up else "down"])
        down = set(self.data.get("link_down", []))
        down.discard(name) if up else down.add(name)
        if converge and not link.host_link:
            self._reroute(plan, down)
        self._save_overrides(state.overrides_of(self.data), link_down=sorted(down))

    def _reroute(self, plan: Plan, down: set[str]) -> None:
        """Leaf routes toward every other leaf over the spines still connected at both ends."""
        dead = {(plan.link(n).a.node, plan.link(n).b.node) for n in down if not plan.link(n).host_link}
        for leaf in plan.leaves:
            lines = []
            for other in plan.leaves:
                if other.name == leaf.name:
                    continue
                hops = []
                for spine in plan.spines:
                    if (leaf.name, spine.name) in dead or (other.name, spine.name) in dead:
                        continue
                    lk = plan.link_between(leaf.name, spine.name)
                    hops.append(f"nexthop via {lk.b.ip} dev {lk.a.ifname}")
                dst = plan.leaf_subnet(other)
                lines.append(f"route replace {dst} {' '.join(hops)}" if hops else f"route replace unreachable {dst}")
            kernel.ip_batch(lines, plan.netns(leaf.name))

    def configure_snmpd(self, extra: Iterable[snmp.ExtraConfig]) -> None:
        """Rewrite every switch's snmpd.conf with more lines and restart the agents."""
        plan = self.plan
        extra = list(extra)
        for sw in plan.switches:
            snmp.stop(self.run_dir, sw.name)
            snmp.start(plan, sw, self.run_dir, extra)


def _root_addrs() -> list[dict[str, Any]]:
    import json

    return list(json.loads(kernel.run(["ip", "-j", "-4", "address", "show"]).stdout or "[]"))


def teardown(prefix: str) -> DownReport:
    """`down` from the prefix alone (no state needed): what the CLI runs."""
    return Testbed(prefix).down()
