"""The `c4` command: serve, demo, migrate, token, topology, plan, settings, and the client
commands for a running controller (get, describe, link, host, alarm, token list|revoke:
`controller.client.commands`).

Each command is a thin shell over services and the pure core; start-up runs in explicit
steps (wait for the database, migrate, seed, serve).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from controller.client import commands as client_commands
from controller.settings import Settings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from controller.domain.problems import Problem

app = typer.Typer(help="c4: traffic engineering and fault diagnosis for AI training fabrics.",
                  no_args_is_help=True, add_completion=False)
token_app = typer.Typer(help="API tokens: create one on the database; list or revoke them on a controller.",
                        no_args_is_help=True)
topology_app = typer.Typer(help="Fabric documents.", no_args_is_help=True)
app.add_typer(token_app, name="token")
app.add_typer(topology_app, name="topology")
client_commands.register(app, token_app)


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

    from controller.services import eventlog

    settings = Settings()
    eventlog.configure(settings.log_format, settings.log_level)
    _prepare(settings, migrate=migrate)
    # On SIGTERM requests in progress get `C4_SHUTDOWN_DRAIN_S` to finish; then uvicorn cancels
    # them, and heavy work off the event loop stops at its next checkpoint, committing nothing.
    uvicorn.run("controller.api.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level=settings.log_level, log_config=eventlog.uvicorn_log_config(settings.log_format,
                                                                                     settings.log_level),
                timeout_graceful_shutdown=settings.shutdown_drain_s)  # type: ignore[arg-type]  # seconds, float fine


@app.command("simulate-hosts")
def simulate_hosts(
    controller: Annotated[str, typer.Option(envvar="C4_CONTROLLER_URL",
                                            help="Controller base URLs, comma-separated: the first sets the demo "
                                                 "up; each batch goes to the first that takes it.")]
    = "http://127.0.0.1:8000",
    token: Annotated[str, typer.Option(envvar="C4_TOKEN", help="An admin token (sets the demo up, posts telemetry).")]
    = "",
    setup: Annotated[bool, typer.Option(help="PUT the demo fabric and POST the demo jobs if absent.")] = True,
) -> None:
    """Stand in for the demo's hosts: post the C4D simulator's telemetry of the demo jobs to a
    controller over HTTP, in real time, until interrupted (docker-compose's `hosts` service)."""
    import logging
    import signal
    import threading

    from controller.services import demo_hosts

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not token:
        typer.echo("error: give --token or C4_TOKEN (an admin token)", err=True)
        raise typer.Exit(2)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    demo_hosts.run([u.strip().rstrip("/") for u in controller.split(",") if u.strip()], token, setup, stop)


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
        request = TypeAdapter(GenerateRequest).validate_python(fields, strict=False)  # key=value: text to numbers
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
    """Offline what-if: plan one job on a fabric; summary, per-link table and ECMP side by side.

    The fabric is validated exactly as `PUT /v1/topology` validates it and the job as
    `POST /v1/jobs` does (same validators, same messages, one line per field; exit code 2).
    An unknown `--down` link exits 4 with the canonical name it probably meant. On a terminal
    the phases show on stderr while planning; piped, nothing but the answer is printed.
    """
    from dataclasses import asdict

    from controller.api.schemas.jobs import JobCreate
    from controller.api.schemas.topology import TopologyCreate
    from controller.client import names
    from controller.te.whatif import what_if
    from controller.topology.validate import problems as fabric_problems

    fabric_doc = _read_json(topology)
    job_doc = _read_json(job)
    fabric = _validated(topology, TopologyCreate, fabric_doc).to_fabric()
    _fail_on(topology, fabric_problems(fabric))
    spec = _validated(job, JobCreate, job_doc).to_spec()
    known = [{"name": x.name, "a": x.a, "a_port": x.a_port, "b": x.b, "b_port": x.b_port} for x in fabric.links]
    for name in down or []:
        if not any(x["name"] == name for x in known):
            typer.echo(f"error: --down: no link named {name!r} in {topology}; {names.hint(name, known)}", err=True)
            raise typer.Exit(4)
    with _phases() as on_phase:
        result = what_if(fabric, spec, down or [], on_phase=on_phase)
    _fail_on(job, result.problems)
    p = result.plan
    if p is None or p.summary is None:
        typer.echo(f"failed: {p.error if p else 'no plan'}", err=True)
        raise typer.Exit(1)
    s = p.summary
    rows = result.links if top == 0 else result.links[:top]
    if as_json:
        typer.echo(json.dumps({"links_down": down or [], "plan": asdict(s), "links": [asdict(r) for r in rows]},
                              indent=2))
        return
    typer.echo(f"job {spec.name}: {s.flows} flows, {p.status.value}, solver {s.solver}, {s.solve_ms} ms")
    if down:
        typer.echo(f"links down: {', '.join(down)}")
    typer.echo(f"{'':24}{'c4':>10}{'ECMP':>10}")
    typer.echo(f"{'max link utilization':24}{s.max_link_utilization:>10.3f}{s.ecmp_expected_max_utilization:>10.3f}")
    typer.echo(f"{'lower bound (proven)':24}{s.lower_bound:>10.3f}{s.lower_bound:>10.3f}")
    typer.echo(f"{'bus bandwidth / ideal':24}{s.predicted_busbw_fraction:>10.3f}{s.ecmp_predicted_busbw_fraction:>10.3f}")
    typer.echo(f"\n{'link':52} {'dir':>3} {'Gbps':>6} {'c4':>6} {'ECMP':>6}")
    for r in rows:
        typer.echo(f"{r.link:52} {r.direction:>3} {r.capacity_gbps:>6.0f} {r.c4_utilization:>6.3f} {r.ecmp_utilization:>6.3f}")


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        typer.echo(f"error: {path}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from exc
    except json.JSONDecodeError as exc:
        typer.echo(f"error: {path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", err=True)
        raise typer.Exit(2) from exc


_Model = TypeVar("_Model", bound="BaseModel")


def _validated(path: Path, model: type[_Model], doc: object) -> _Model:
    """`doc` validated by the API's own request schema; its problems as the API words them."""
    from pydantic import ValidationError

    from controller.api.errors import validation_problems

    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        _fail_on(path, validation_problems(exc.errors(), body_prefix=False))
        raise  # unreachable: _fail_on exits


def _fail_on(path: Path, problems: Sequence[Problem]) -> None:
    for problem in problems:
        typer.echo(f"error: {path}: {problem.field or 'body'}: {problem.message}", err=True)
    if problems:
        raise typer.Exit(2)


@contextmanager
def _phases() -> Iterator[Callable[[str], None]]:
    """A phase line with elapsed time on stderr while planning, when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield lambda _phase: None
        return
    from rich.console import Console

    started = time.monotonic()
    with Console(stderr=True).status("starting") as status:
        yield lambda phase: status.update(f"{phase} ({time.monotonic() - started:.1f} s)")


@app.command("settings")
def show_settings() -> None:
    """List every C4_* environment variable with its default."""
    for name, info in Settings.model_fields.items():
        typer.echo(f"C4_{name.upper():<24} {info.default!s:<12} {info.description or ''}")


@app.command()
def demo(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the last demo's database instead of starting afresh.")]
    = False,
    access_log: Annotated[bool, typer.Option(help="Also log every HTTP request.")] = False,
) -> None:
    """Serve on SQLite with a generated fabric, two jobs and live telemetry; prints where to look.

    Each run starts from a fresh demo database (`<C4_DATA_DIR>/demo.db`) unless `--keep`; with
    `C4_DATABASE_URL` set, that database is used as it is. Events (plans, link changes, alarms,
    isolations) are logged as they happen.
    """
    import uvicorn

    from controller.api.app import create_app
    from controller.api.docs import CONSOLE_PATH, has_console
    from controller.services import demo as demo_service
    from controller.services import eventlog

    settings = Settings()
    eventlog.configure(settings.log_format, settings.log_level)
    if settings.database_url:
        where = f"C4_DATABASE_URL ({settings.database_url.split('@')[-1]}), used as it is"
    else:
        path = (settings.data_dir / "demo.db").resolve()
        if not keep:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        settings = settings.model_copy(update={"database_url": f"sqlite:///{path}"})
        where = f"{path} ({'kept from the last run' if keep else 'fresh; --keep keeps it next time'})"
    _prepare(settings)
    runtime, token = demo_service.seed(settings)
    api = create_app(runtime=runtime)
    traffic = demo_service.traffic(api.state.telemetry)
    base = f"http://{host}:{port}"
    lines = [
        f"c4 demo: {base}/",
        f"  console:   {base}{CONSOLE_PATH}" if has_console(api) else "  console:   not in this build",
        f"  API docs:  {base}/docs (Swagger UI, works offline)  {base}/redoc",
        f"  metrics:   {base}/metrics",
        f"  database:  {where}",
        f"admin token: {token}",
        "try, in another shell:",
        f"  export C4_URL={base} C4_TOKEN={token}",
        "  .venv/bin/c4 get jobs; .venv/bin/c4 get alarms --watch; .venv/bin/c4 describe job demo-a",
        f"live demo traffic: {', '.join(j.name for j in traffic.jobs)}; "
        f"a slow NIC port on {demo_service.DEMO_FAULT.target} from {demo_service.DEMO_FAULT.onset_s:.0f} s "
        "(then: c4 get alarms, c4 describe alarm ID)",
    ]
    typer.echo("\n".join(lines))
    sys.stdout.flush()
    traffic.start()
    try:
        uvicorn.run(api, host=host, port=port, log_level=settings.log_level, access_log=access_log,
                    log_config=eventlog.uvicorn_log_config(settings.log_format, settings.log_level),
                    timeout_graceful_shutdown=settings.shutdown_drain_s)  # type: ignore[arg-type]  # seconds, float fine
    finally:
        traffic.stop()


if __name__ == "__main__":
    app()
