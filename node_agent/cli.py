"""`c4-node-agent`: the node agent's command line (typer).

    c4-node-agent [OPTIONS]               run the daemon (until SIGTERM)
    c4-node-agent [OPTIONS] check-config  validate flags and C4_AGENT_* variables offline
    c4-node-agent [OPTIONS] probe         probe what the controller asks (or --src/--dst) once

Every option also reads ``C4_AGENT_<NAME>`` (node_agent/README.md lists them); a flag wins.
Exit status: 0 success, 2 bad configuration, 1 anything else that failed.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import typer

from node_agent import config
from node_agent.controller_client import ControllerClient
from node_agent.metrics import AgentMetrics
from node_agent.probing import probe_and_report

app = typer.Typer(name="c4-node-agent", add_completion=False,
                  help="c4's node agent: assignments in, telemetry out, paths probed.")


def _settings(ctx: typer.Context) -> config.AgentSettings:
    try:
        return config.load(ctx.obj or {})
    except config.ConfigError as e:
        for p in e.problems:
            typer.echo(f"c4-node-agent: {p}", err=True)
        raise typer.Exit(2) from None


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    controller: str = typer.Option(None, help="Controller base URL [C4_AGENT_CONTROLLER]."),
    token: str = typer.Option(None, help="Agent bearer token [C4_AGENT_TOKEN]."),
    host: str = typer.Option(None, help="This host's topology name [C4_AGENT_HOST; hostname]."),
    socket: str = typer.Option(None, help="Shim socket path [C4_AGENT_SOCKET; /run/c4/shim.sock]."),
    spool: str = typer.Option(None, help="Spool directory [C4_AGENT_SPOOL; /var/lib/c4/spool]."),
    spool_max_mb: float = typer.Option(None, help="Spool size bound [C4_AGENT_SPOOL_MAX_MB; 256]."),
    shim_port: int = typer.Option(None, help="Fixed data port owned here, 0 = none "
                                             "[C4_AGENT_SHIM_PORT; 4792]."),
    listen: str = typer.Option(None, help="host:port of /healthz, /metrics; '' = none "
                                          "[C4_AGENT_LISTEN; 127.0.0.1:9792]."),
    probe_interval_s: float = typer.Option(None, help="Probe requests period, 0 = off "
                                                      "[C4_AGENT_PROBE_INTERVAL_S; 30]."),
    log_level: str = typer.Option(None, help="debug, info, warning, error [C4_AGENT_LOG_LEVEL]."),
) -> None:
    ctx.obj = {k: v for k, v in {
        "controller": controller, "token": token, "host": host, "socket": socket,
        "spool": spool, "spool_max_mb": spool_max_mb, "shim_port": shim_port, "listen": listen,
        "probe_interval_s": probe_interval_s, "log_level": log_level}.items() if v is not None}
    if ctx.invoked_subcommand is None:
        from node_agent import daemon

        daemon.run(_settings(ctx))


@app.command("check-config")
def check_config(ctx: typer.Context) -> None:
    """Validate the settings (and that the socket and spool directories are usable); print
    the settings in effect as JSON. Contacts nothing."""
    s = _settings(ctx)
    problems = []
    for what, d in (("socket", os.path.dirname(s.socket) or "."), ("spool", s.spool)):
        probe_dir = d
        while probe_dir and not os.path.exists(probe_dir):
            probe_dir = os.path.dirname(probe_dir)
        if not os.path.isdir(probe_dir or ".") or not os.access(probe_dir or ".", os.W_OK):
            problems.append(f"{what}: cannot create or write {d}")
    out: dict[str, Any] = s.model_dump(mode="json")
    out["token"] = "***" if s.token else ""
    typer.echo(json.dumps(out, indent=2, sort_keys=True))
    for p in problems:
        typer.echo(f"c4-node-agent: {p}", err=True)
    if problems:
        raise typer.Exit(2)


@app.command()
def probe(
    ctx: typer.Context,
    src: str = typer.Option(None, help="Probe from this address (with --dst) instead of "
                                       "asking the controller."),
    dst: str = typer.Option(None, help="... to this address."),
    protocol: str = typer.Option("udp", help="udp (RoCEv2) or tcp (the shim's transport)."),
    dst_port: int = typer.Option(4791, help="The data flows' destination port."),
    post: bool = typer.Option(True, help="Post the results to the controller."),
) -> None:
    """Run path probes once and print the reports (JSON lines)."""
    s = _settings(ctx)

    async def go() -> int:
        client = ControllerClient(s.controller_url, s.token, s.http_timeout_s)
        metrics = AgentMetrics()
        try:
            if src and dst:
                requests = [{"src_address": src, "dst_address": dst, "protocol": protocol,
                             "dst_port": dst_port}]
            else:
                reply = await client.probe_requests(s.host)
                if not reply.ok or not isinstance(reply.body, dict):
                    typer.echo(f"c4-node-agent: probe requests: HTTP {reply.status} "
                               f"{reply.error}", err=True)
                    return 1
                requests = reply.body.get("requests", [])
            failed = 0
            for req in requests:
                report = await probe_and_report(client, s, metrics, req, post)
                if report is None:
                    failed += 1
                else:
                    typer.echo(json.dumps(report))
            return 1 if failed else 0
        finally:
            await client.close()

    raise typer.Exit(asyncio.run(go()))


if __name__ == "__main__":
    app()
