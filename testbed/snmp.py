"""Debian's net-snmp `snmpd`, one per switch, inside the switch's namespace.

Each agent listens on the switch's management address (UDP 161) and answers IF-MIB for the
interfaces of its namespace: `ifName` is the switch port name of the fabric document
(`Ethernet3`), `ifHCInOctets`/`ifHCOutOctets` are the kernel's counters of that veth. v2c,
read-only community `public` from the management network. net-snmp caches interface counters
for a few seconds, like a real switch's counter refresh. Every agent also runs the switch
agent's pass_persist extension (`switch_agents/qdisc_pass_persist.py`): each port's CE marks
(the `ecn_<port>` nft counters), queue drops, and tx octets and packets read fresh at the
same moment (snmpd's own IF-MIB counters lag by seconds), read with the agent's `linux` profile.

Extension hook: `extra_config` callables (registered with `register_extra_config`, or passed
to `Testbed.up`/`Testbed.configure_snmpd`) return more `snmpd.conf` lines per switch, e.g. a
`pass_persist` line for an ECN-marks extension. Such lines run inside the switch's namespace,
so a `pass_persist` program there sees the switch's own `tc -s qdisc` and `nft list counters`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from switch_agents import qdisc_pass_persist
from testbed import kernel
from testbed.plan import Plan, SwitchPlan

COMMUNITY = "public"
SNMP_PORT = 161
# Modules Debian's snmpd loads that a switch has no use for (host resources, SMUX, event MIB).
EXCLUDED_MODULES = "smux,mteTrigger,mteTriggerConf,hrSWRun,hrSWInstalled,hrSystem,hrStorage,hrDevice,hrFilesys,hrProcess"

ExtraConfig = Callable[[Plan, SwitchPlan], Iterable[str]]
_registered: list[ExtraConfig] = []


def register_extra_config(fn: ExtraConfig) -> ExtraConfig:
    """Add a source of extra snmpd.conf lines for every switch of every testbed brought up
    later in this process (usable as a decorator)."""
    _registered.append(fn)
    return fn


def config(plan: Plan, sw: SwitchPlan, state_dir: Path, extra: Iterable[ExtraConfig] = ()) -> str:
    lines = [
        f"# snmpd for testbed {plan.prefix}, switch {sw.name} (namespace {plan.netns(sw.name)})",
        f"agentAddress udp:{sw.mgmt_address}:{SNMP_PORT}",
        f"rocommunity {COMMUNITY} {plan.mgmt_net}",
        f"sysName {sw.name}",
        f"sysDescr c4 testbed {sw.role} {sw.name} (Linux network namespace {plan.netns(sw.name)})",
        f"sysLocation c4 testbed {plan.prefix}",
        "sysContact c4-testbed",
        f"[snmp] persistentDir {state_dir / 'persist'}",
        # The switch agent's `linux` profile: ECN marks and queue drops per port (its nft markers).
        # Cached 0.15 s (one walk takes 20-30 ms), not its default 1 s: with the agent polling
        # every second a 1 s cache can serve a poll that comes a little under 1 s after the last
        # one the same reading (a sample of zero packets). Under 0.2 s since the agent's second
        # early re-poll leaves 0.2-0.3 s before the next cycle: with 0.3 s that cycle read the
        # re-poll's cached reading (0 bytes in 0.23 s, then 1.25 s of bytes in the next 1 s
        # window: a throttled 12 Mbit/s link read 15.1, and the rebalancer re-solved with it).
        f"pass_persist .{qdisc_pass_persist.BASE_TEXT} {sys.executable} {qdisc_pass_persist.__file__} --cache-s 0.15",
    ]
    for source in (*_registered, *extra):
        lines += [str(line) for line in source(plan, sw)]
    return "\n".join(lines) + "\n"


def paths(run_dir: Path, switch: str) -> tuple[Path, Path, Path, Path]:
    d = run_dir / "snmp" / switch
    return d, d / "snmpd.conf", d / "snmpd.pid", d / "snmpd.log"


def start(plan: Plan, sw: SwitchPlan, run_dir: Path, extra: Iterable[ExtraConfig] = ()) -> None:
    """Write the config and start the daemon; it binds its port before detaching, so a
    returned call means the agent is listening (or an error was raised)."""
    d, conf, pid, log = paths(run_dir, sw.name)
    d.mkdir(parents=True, exist_ok=True)
    conf.write_text(config(plan, sw, d, extra))
    kernel.netns_exec(plan.netns(sw.name), [
        "snmpd", "-C", "-c", str(conf), "-p", str(pid), "-Lf", str(log),
        "-I", "-" + EXCLUDED_MODULES, "-M", "/dev/null", "-m", ""], timeout_s=20)


def pid_of(run_dir: Path, switch: str) -> int | None:
    pidfile = paths(run_dir, switch)[2]
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def stop(run_dir: Path, switch: str) -> None:
    pid = pid_of(run_dir, switch)
    if pid:
        kernel.kill_all([pid])
