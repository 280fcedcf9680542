"""`c4-testbed`: the command-line shell over `testbed.fabric.Testbed` and the scenarios.

Every command takes `--prefix` (default `c4tb`, or `$C4_TESTBED_PREFIX`); the namespace of a
node N in `doc` is `<prefix>-N`. Needs root (network namespaces).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from testbed.fabric import Testbed, TestbedError
from testbed.plan import DEFAULT_PREFIX, FabricSpec, PlanError

app = typer.Typer(help="c4's testbed: a leaf-spine fabric in network namespaces, and NCCL-like traffic on it.",
                  no_args_is_help=True, add_completion=False)
link_app = typer.Typer(help="Faults on one link: rate, loss, up/down.", no_args_is_help=True)
app.add_typer(link_app, name="link")

Prefix = Annotated[str, typer.Option("--prefix", envvar="C4_TESTBED_PREFIX",
                                     help="Names of everything this testbed creates start with it.")]


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"c4-testbed: {message}", err=True)
    raise typer.Exit(code)


def _need_root() -> None:
    if os.geteuid() != 0:
        _fail("needs root (network namespaces, veth, tc, nft)")


@app.command()
def up(
    leaves: Annotated[int, typer.Option(help="Leaf switches.")] = 4,
    spines: Annotated[int, typer.Option(help="Spine switches.")] = 4,
    hosts_per_leaf: Annotated[int, typer.Option(help="Hosts whose first port is on each leaf.")] = 4,
    dual_tor: Annotated[bool, typer.Option(help="Two ports per host NIC, on leaves 2k and 2k+1.")] = False,
    rate_mbit: Annotated[int, typer.Option(help="Shaped rate of every link, each direction, Mbit/s.")] = 100,
    seed: Annotated[int, typer.Option(help="Per-switch ECMP hash seeds derive from it.")] = 1,
    mtu: Annotated[int, typer.Option(help="MTU of every data-plane interface.")] = 9000,
    ecn_threshold_pkts: Annotated[int, typer.Option(help="Switch queues mark CE above this many packets.")] = 16,
    snmpd_extra: Annotated[str | None, typer.Option(
        help="File of extra snmpd.conf lines for every switch; {switch}, {netns}, {mgmt_address} and {run_dir} are replaced.")] = None,
    prefix: Prefix = DEFAULT_PREFIX,
) -> None:
    """Build the fabric: namespaces, shaped veths with ECN marking, ECMP routes, snmpd."""
    _need_root()
    extra = []
    if snmpd_extra:
        with open(snmpd_extra) as f:
            template = f.read()

        def lines(plan, sw):  # type: ignore[no-untyped-def]
            return template.format(switch=sw.name, netns=plan.netns(sw.name), mgmt_address=sw.mgmt_address,
                                   run_dir=str(Testbed(prefix).run_dir)).splitlines()

        extra.append(lines)
    spec = FabricSpec(leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf, dual_tor=dual_tor,
                      rate_mbit=rate_mbit, seed=seed, mtu=mtu, ecn_threshold_pkts=ecn_threshold_pkts)
    tb = Testbed(prefix)
    try:
        t = tb.up(spec, extra_snmpd=extra)
    except (PlanError, TestbedError) as e:
        _fail(str(e))
    plan = tb.plan
    typer.echo(f"testbed {prefix}: {len(plan.leaves)} leaves, {len(plan.spines)} spines, {len(plan.hosts)} hosts, "
               f"{len(plan.links)} links at {rate_mbit} Mbit/s; up in {t.total_s:.2f} s")
    typer.echo("  " + ", ".join(f"{k} {v:.2f} s" for k, v in t.steps.items()))
    typer.echo(f"  management network {plan.mgmt_net}: this namespace is {plan.mgmt_gateway} on {plan.root_ifname}")
    if not tb.hash_seed_supported:
        typer.echo("  note: this kernel has no net.ipv4.fib_multipath_hash_seed; switches use the kernel's own seed (doc says 0)")


@app.command()
def down(prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Remove every namespace, process, link and file of this prefix (works after a crash)."""
    _need_root()
    r = Testbed(prefix).down()
    typer.echo(f"testbed {prefix}: removed {len(r.namespaces)} namespaces, stopped {len(r.killed)} processes "
               f"in {r.elapsed_s:.2f} s")


@app.command()
def status(prefix: Prefix = DEFAULT_PREFIX,
           as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False) -> None:
    """Compare the kernel with the plan; exit 1 when something is missing or different."""
    _need_root()
    try:
        st = Testbed(prefix).status()
    except TestbedError as e:
        _fail(str(e))
    if as_json:
        typer.echo(json.dumps(st, indent=1))
    else:
        spec = st["spec"]
        typer.echo(f"testbed {prefix}: {spec['leaves']}x{spec['spines']}x{spec['hosts_per_leaf']}"
                   f"{' dual-ToR' if spec['dual_tor'] else ''}, {spec['rate_mbit']} Mbit/s, "
                   f"management {st['mgmt_net']} (gateway {st['mgmt_gateway']})")
        for row in st["links"]:
            rate = row["a_mbit"] if row["a_mbit"] == row["b_mbit"] else f"{row['a_mbit']}/{row['b_mbit']}"
            typer.echo(f"  {row['name']:<44} {row['a_state']:>5}/{row['b_state']:<5} {rate} Mbit/s")
        typer.echo(f"  snmpd: {sum(st['snmpd'].values())}/{len(st['snmpd'])} running")
        for p in st["problems"]:
            typer.echo(f"  PROBLEM: {p}")
    if st["problems"]:
        raise typer.Exit(1)


@app.command()
def doc(prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Print the fabric as an API.md topology document (for PUT /v1/topology)."""
    try:
        typer.echo(json.dumps(Testbed(prefix).doc(), indent=1))
    except TestbedError as e:
        _fail(str(e))


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(ctx: typer.Context, node: str, prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Run a command in a node's namespace: c4-testbed exec host0 -- ip route."""
    _need_root()
    argv = [a for a in ctx.args if a != "--"]
    os.execvp("ip", ["ip", "netns", "exec", Testbed(prefix).netns(node), *argv])


@link_app.command("rate")
def link_rate(name: str, rate_mbit: Annotated[int, typer.Argument(help="Mbit/s; 0 restores the built rate.")],
              direction: Annotated[str, typer.Option(help="both, ab (a sends) or ba.")] = "both",
              prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Shape one link (a fault: a degraded optic, a throttled port)."""
    _need_root()
    try:
        Testbed(prefix).set_link_rate(name, rate_mbit or None, direction)
    except TestbedError as e:
        _fail(str(e))


@link_app.command("loss")
def link_loss(name: str, loss_pct: float, direction: Annotated[str, typer.Option()] = "both",
              prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Drop a percentage of the packets leaving on a link."""
    _need_root()
    try:
        Testbed(prefix).set_link_loss(name, loss_pct, direction)
    except TestbedError as e:
        _fail(str(e))


@link_app.command("set")
def link_set(name: str, state: Annotated[str, typer.Argument(help="up or down")],
             converge: Annotated[bool, typer.Option(help="Other leaves stop using the spine (routing converged).")] = True,
             prefix: Prefix = DEFAULT_PREFIX) -> None:
    """`ip link set` a link down or up."""
    _need_root()
    if state not in ("up", "down"):
        _fail("state must be up or down")
    try:
        Testbed(prefix).set_link_state(name, state == "up", converge)
    except TestbedError as e:
        _fail(str(e))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, scenario: Annotated[str, typer.Argument(help="A registered scenario; `list` names them.")],
        prefix: Prefix = DEFAULT_PREFIX) -> None:
    """Run a scenario on the testbed (options after the name go to the scenario: --help)."""
    from testbed.scenarios import SCENARIOS, load_builtin, run_scenario

    if scenario == "list":
        load_builtin()
        for name, sc in sorted(SCENARIOS.items()):
            typer.echo(f"{name:<12} {sc.help}")
        return
    _need_root()
    try:
        code = run_scenario(scenario, Testbed(prefix), list(ctx.args))
    except TestbedError as e:
        _fail(str(e))
    raise typer.Exit(code)


def main() -> None:  # pragma: no cover - console entry point
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
