"""`c4-switch-agent`: run the agent, check a configuration, poll once, record walks."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path

import typer

from switch_agents.config import ConfigError, describe, load, resolve_secrets
from switch_agents.profiles import PROFILES

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="c4 switch agent: polls switches' ECN and PFC counters over SNMP and posts them to c4.")


def _configured(path: Path):  # type: ignore[no-untyped-def]
    try:
        cfg = load(path)
        secrets = resolve_secrets(cfg)
    except ConfigError as exc:
        typer.echo(f"{path}: invalid configuration", err=True)
        for field, message in exc.problems:
            typer.echo(f"  {field}: {message}", err=True)
        raise typer.Exit(2) from None
    return cfg, secrets


@app.command("check-config")
def check_config(config: Path = typer.Argument(..., help="The agent's TOML configuration file.")) -> None:
    """Validate the file and read every secret it names (printing none); exit 2 if anything is wrong."""
    cfg, _ = _configured(config)
    typer.echo(f"{config}: OK")
    for line in describe(cfg):
        typer.echo(f"  {line}")


@app.command()
def run(config: Path = typer.Argument(..., help="The agent's TOML configuration file."),
        output: Path | None = typer.Option(None, help="Append each cycle's samples (one JSON POST body per "
                                                       "line) to this file instead of posting them."),
        cycles: int | None = typer.Option(None, min=1, help="Stop after this many cycles."),
        log_level: str = typer.Option("info", help="debug, info, warning or error.")) -> None:
    """Poll every target each interval and post the samples to the controller."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg, secrets = _configured(config)
    if cfg.controller is None and output is None:
        typer.echo("the configuration has no [controller]: give --output FILE to keep the samples", err=True)
        raise typer.Exit(2)
    from switch_agents.agent import Agent

    async def main() -> None:
        agent = Agent(cfg, secrets, output=output)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, agent.stop)
        await agent.run(cycles)

    asyncio.run(main())


@app.command("poll-once")
def poll_once(config: Path = typer.Argument(..., help="The agent's TOML configuration file."),
              target: list[str] = typer.Option(None, help="Only this switch (repeatable).")) -> None:
    """Poll the targets once and print the POST body; the exit status is 1 if a poll failed."""
    cfg, secrets = _configured(config)
    from switch_agents.agent import build_plans
    from switch_agents.poller import TargetPoller
    from switch_agents.snmp import PysnmpClient

    plans = [p for p in build_plans(cfg, secrets) if not target or p.switch in target]

    async def main() -> list:  # type: ignore[type-arg]
        client = PysnmpClient(cfg.snmp.v2c_decoder)
        try:
            return list(await asyncio.gather(*(TargetPoller(p, client, "once").poll() for p in plans)))
        finally:
            await client.close()

    results = asyncio.run(main())
    typer.echo(json.dumps({"samples": [r.sample for r in results if r.ok]}, indent=1))
    failed = [r for r in results if not r.ok]
    for r in failed:
        typer.echo(f"{r.switch}: {r.error}", err=True)
    raise typer.Exit(1 if failed else 0)


@app.command()
def record(config: Path = typer.Argument(..., help="The agent's TOML configuration file."),
           target: str = typer.Option(..., help="The switch to record."),
           polls: int = typer.Option(2, min=1, help="Polls to record."),
           interval_s: float = typer.Option(2.0, help="Seconds between polls."),
           out: Path = typer.Option(..., help="Where to write the recording (JSON).")) -> None:
    """Record a target's walks for the test fake (`switch_agents.recording.ReplayClient`)."""
    cfg, secrets = _configured(config)
    from switch_agents.agent import build_plans
    from switch_agents.poller import TargetPoller
    from switch_agents.recording import RecordingClient
    from switch_agents.snmp import PysnmpClient

    found = [p for p in build_plans(cfg, secrets) if p.switch == target]
    if not found:
        typer.echo(f"no target {target!r} in {config}", err=True)
        raise typer.Exit(2)
    plan = found[0]

    async def main() -> dict:  # type: ignore[type-arg]
        client = RecordingClient(PysnmpClient(cfg.snmp.v2c_decoder))
        poller = TargetPoller(plan, client, "record")
        try:
            for i in range(polls):
                if i:
                    await asyncio.sleep(interval_s)
                await poller.poll()
        finally:
            await client.close()
        return client.document(plan.switch, plan.profile.name)

    out.write_text(json.dumps(asyncio.run(main()), indent=1) + "\n")
    typer.echo(f"recorded {polls} polls of {target} to {out}")


@app.command()
def profiles() -> None:
    """List the vendor OID profiles."""
    for name, p in sorted(PROFILES.items()):
        typer.echo(f"{name}: {p.description}")
        for c in p.columns:
            typer.echo(f"    {c.counter:<16} {c.oid} ({c.index})")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
