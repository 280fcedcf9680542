"""The `c4` command: serve, demo, migrate, token, topology, settings, ...

Each command is a thin shell over services and the pure core; start-up runs in explicit
steps (wait for the database, migrate, seed, serve).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from controller.settings import Settings

app = typer.Typer(help="c4: traffic engineering and fault diagnosis for AI training fabrics.",
                  no_args_is_help=True, add_completion=False)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
topology_app = typer.Typer(help="Fabric documents.", no_args_is_help=True)
app.add_typer(token_app, name="token")
app.add_typer(topology_app, name="topology")


def _prepare(settings: Settings, migrate: bool = True) -> None:
    """Start-up steps one and two: wait for the database, then migrate it to head."""
    from controller.store.db import make_engine, wait_for
    from controller.store.migrate import upgrade

    url = settings.resolved_database_url()
    engine = make_engine(url)
    wait_for(engine, settings.db_connect_attempts)
    engine.dispose()
    if migrate:
        upgrade(url)


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema to the latest migration."""
    settings = Settings()
    _prepare(settings, migrate=True)
    typer.echo(f"database at head: {settings.resolved_database_url().split('@')[-1]}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 1,
    migrate: Annotated[bool, typer.Option(help="Migrate the database before serving.")] = True,
) -> None:
    """Serve the API of API.md with uvicorn."""
    import uvicorn

    settings = Settings()
    _prepare(settings, migrate=migrate)
    uvicorn.run("controller.api.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level=settings.log_level)


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="admin, scheduler, agent or viewer.")],
    name: Annotated[str, typer.Option(help="A label for the token.")] = "cli",
) -> None:
    """Create a token and print it once (only its hash is stored)."""
    from controller.services import tokens

    settings = Settings()
    _prepare(settings)
    try:
        value = tokens.create(settings, name, role)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(value)


@topology_app.command("generate")
def topology_generate(
    kind: Annotated[str, typer.Argument(help="leaf-spine or clos3")] = "leaf-spine",
    params: Annotated[list[str] | None, typer.Argument(help="key=value, e.g. leaves=8 spines=4")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Print a generated fabric document for operators to edit and PUT."""
    from pydantic import TypeAdapter, ValidationError

    from controller.api.schemas.topology import GenerateRequest
    from controller.topology.document import to_document

    fields: dict[str, object] = {"kind": kind}
    for item in params or []:
        key, sep, value = item.partition("=")
        if not sep:
            typer.echo(f"error: {item!r} is not key=value", err=True)
            raise typer.Exit(2)
        fields[key] = value
    try:
        request = TypeAdapter(GenerateRequest).validate_python(fields)
    except ValidationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    text = json.dumps(to_document(request.to_fabric()), indent=2) + "\n"
    if output:
        output.write_text(text)
    else:
        sys.stdout.write(text)


@app.command("plan")
def plan_what_if(
    topology: Annotated[Path, typer.Argument(help="Fabric document (JSON, as PUT /v1/topology takes).")],
    job: Annotated[Path, typer.Argument(help="Job document (JSON, as POST /v1/jobs takes).")],
    down: Annotated[list[str] | None, typer.Option("--down", help="A link to take down first (repeatable).")] = None,
    top: Annotated[int, typer.Option(help="Rows of the per-link table (0: all).")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Offline what-if: plan one job on a fabric; summary, per-link table and ECMP side by side."""
    from dataclasses import asdict

    from pydantic import ValidationError

    from controller.api.schemas.jobs import JobCreate
    from controller.api.schemas.topology import TopologyCreate
    from controller.te.whatif import what_if

    try:
        fabric = TopologyCreate.model_validate_json(topology.read_text()).to_fabric()
        spec = JobCreate.model_validate_json(job.read_text()).to_spec()
        result = what_if(fabric, spec, down or [])
    except (ValidationError, OSError, KeyError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if result.problems:
        for problem in result.problems:
            typer.echo(f"error: {problem.field}: {problem.message}", err=True)
        raise typer.Exit(2)
    p = result.plan
    if p is None or p.summary is None:
        typer.echo(f"failed: {p.error if p else 'no plan'}", err=True)
        raise typer.Exit(1)
    s = p.summary
    rows = result.links if top == 0 else result.links[:top]
    if as_json:
        typer.echo(json.dumps({"plan": asdict(s), "links": [asdict(r) for r in rows]}, indent=2))
        return
    typer.echo(f"job {spec.name}: {s.flows} flows, {p.status.value}, solver {s.solver}, {s.solve_ms} ms")
    typer.echo(f"{'':24}{'c4':>10}{'ECMP':>10}")
    typer.echo(f"{'max link utilization':24}{s.max_link_utilization:>10.3f}{s.ecmp_expected_max_utilization:>10.3f}")
    typer.echo(f"{'lower bound (proven)':24}{s.lower_bound:>10.3f}{s.lower_bound:>10.3f}")
    typer.echo(f"{'bus bandwidth / ideal':24}{s.predicted_busbw_fraction:>10.3f}{s.ecmp_predicted_busbw_fraction:>10.3f}")
    typer.echo(f"\n{'link':52} {'dir':>3} {'Gbps':>6} {'c4':>6} {'ECMP':>6}")
    for r in rows:
        typer.echo(f"{r.link:52} {r.direction:>3} {r.capacity_gbps:>6.0f} {r.c4_utilization:>6.3f} {r.ecmp_utilization:>6.3f}")


@app.command("settings")
def show_settings() -> None:
    """List every C4_* environment variable with its default."""
    for name, info in Settings.model_fields.items():
        typer.echo(f"C4_{name.upper():<24} {info.default!s:<12} {info.description or ''}")


@app.command()
def demo(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
) -> None:
    """Serve on SQLite with a generated fabric; prints the URL and an admin token."""
    import uvicorn

    from controller.api.app import create_app
    from controller.services import demo as demo_service

    settings = Settings()
    _prepare(settings)
    runtime, token = demo_service.seed(settings)
    api = create_app(runtime=runtime)
    traffic = demo_service.traffic(api.state.telemetry)
    typer.echo(f"c4 demo: http://{host}:{port}/  (API docs at /docs)")
    typer.echo(f"admin token: {token}")
    typer.echo(f"try: curl -H 'Authorization: Bearer {token}' http://{host}:{port}/v1/topology")
    typer.echo(f"live demo traffic: {', '.join(j.name for j in traffic.jobs)}; "
               f"a slow NIC port on {demo_service.DEMO_FAULT.target} from {demo_service.DEMO_FAULT.onset_s:.0f} s")
    sys.stdout.flush()
    traffic.start()
    try:
        uvicorn.run(api, host=host, port=port, log_level=settings.log_level)
    finally:
        traffic.stop()


if __name__ == "__main__":
    app()
