"""The `c4` commands that talk to a running controller over its API, kubectl style:

    c4 get jobs|alarms|hosts|links|webhooks [NAME] [-o wide|json|yaml] [--watch]
    c4 describe job|alarm|link NAME
    c4 link down|drain|up NAME          c4 host isolate NAME --reason TEXT | release NAME
    c4 alarm ack|resolve ID             c4 token list | revoke ID

Every command takes `--server`/`-s` and `--token` (else `C4_URL`/`C4_TOKEN`, else the config
file; `controller.client.http`). A refusal prints the API's message on one line (a 422: one
line per field) and exits with the code `http.EXIT` gives it; never a traceback. An unknown
link name is answered with the canonical one it probably meant (`names.suggest`).

This module only declares the command line; `actions` does the work and is imported when a
command runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Annotated, ParamSpec, TypeVar

import typer

from controller.client.options import Interval, Output, OutputOpt, Server, Token, Watch

P = ParamSpec("P")
R = TypeVar("R")

get_app = typer.Typer(help="List jobs, alarms, hosts, links or webhooks as tables.", no_args_is_help=True)
describe_app = typer.Typer(help="Show one job, alarm or link in detail.", no_args_is_help=True)
link_app = typer.Typer(help="Take a link down, drain it or bring it up (its flows are re-planned).",
                       no_args_is_help=True)
host_app = typer.Typer(help="Isolate a host or release it.", no_args_is_help=True)
alarm_app = typer.Typer(help="Acknowledge or resolve an alarm.", no_args_is_help=True)


def _actions() -> ModuleType:
    from controller.client import actions

    return actions


def handled(fn: Callable[P, R]) -> Callable[P, R]:
    """Print an `ApiFailure` as its lines on stderr and exit with its code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from controller.client.http import ApiFailure

        try:
            return fn(*args, **kwargs)
        except ApiFailure as failure:
            for line in failure.lines:
                typer.echo(line, err=True)
            raise typer.Exit(failure.exit_code) from None

    return wrapper


# --- get ------------------------------------------------------------------------------------


@handled
def get_jobs(name: Annotated[str | None, typer.Argument(help="One job.")] = None,
             status: Annotated[str | None, typer.Option(help="pending, planned or failed.")] = None,
             output: OutputOpt = Output.TABLE, watch: Watch = False, interval: Interval = 2.0,
             server: Server = None, token: Token = None) -> None:
    """Jobs with their plan figures: max link utilization, proven lower bound, ECMP's."""
    _actions().list_("jobs", "/v1/jobs", {"status": status}, name, output, watch, interval, server, token)


@handled
def get_alarms(id_: Annotated[str | None, typer.Argument(metavar="ID", help="One alarm.")] = None,
               job: Annotated[str | None, typer.Option(help="Only this job's.")] = None,
               state: Annotated[str | None, typer.Option(help="open, acknowledged or resolved.")] = None,
               kind: Annotated[str | None, typer.Option(help="comm_hang, noncomm_hang, comm_slow, noncomm_slow.")] = None,
               limit: Annotated[int, typer.Option(min=1, max=5000, help="At most this many, newest first.")] = 500,
               output: OutputOpt = Output.TABLE, watch: Watch = False, interval: Interval = 2.0,
               server: Server = None, token: Token = None) -> None:
    """Alarms, newest first, with their first suspect."""
    act = _actions()
    act.list_("alarms", "/v1/alarms", {"job": job, "state": state, "kind": kind, "limit": limit},
              act.alarm_id(id_) if id_ else None, output, watch, interval, server, token)


@handled
def get_hosts(state: Annotated[str | None, typer.Option(help="active or isolated.")] = None,
              output: OutputOpt = Output.TABLE, watch: Watch = False, interval: Interval = 2.0,
              server: Server = None, token: Token = None) -> None:
    """Hosts and whether they are isolated (and by which alarm)."""
    _actions().list_("hosts", "/v1/hosts", {"state": state}, None, output, watch, interval, server, token)


@handled
def get_links(name: Annotated[str | None, typer.Argument(help="One link.")] = None,
              state: Annotated[str | None, typer.Option(help="up, down or drained.")] = None,
              kind: Annotated[str | None, typer.Option(help="fabric (switch to switch) or host (host ports).")] = None,
              sort_by: Annotated[str, typer.Option(help="name, or utilization (most utilized first).")] = "name",
              output: OutputOpt = Output.TABLE, watch: Watch = False, interval: Interval = 2.0,
              server: Server = None, token: Token = None) -> None:
    """Links with their state and planned utilization per direction (ab: from a to b)."""
    if sort_by not in ("name", "utilization"):
        typer.echo(f"error: --sort-by: {sort_by!r} is not name or utilization", err=True)
        raise typer.Exit(2)
    act = _actions()
    act.list_("links", "/v1/links", {"state": state, "kind": kind}, name, output, watch, interval, server, token,
              sort=act.by_utilization if sort_by == "utilization" else None)


@handled
def get_webhooks(output: OutputOpt = Output.TABLE, watch: Watch = False, interval: Interval = 2.0,
                 server: Server = None, token: Token = None) -> None:
    """Webhook subscriptions (secrets are never shown)."""
    _actions().list_("webhooks", "/v1/webhooks", {}, None, output, watch, interval, server, token)


for _plural, _singular, _fn in (("jobs", "job", get_jobs), ("alarms", "alarm", get_alarms),
                                ("hosts", "host", get_hosts), ("links", "link", get_links),
                                ("webhooks", "webhook", get_webhooks)):
    get_app.command(_plural)(_fn)
    get_app.command(_singular, hidden=True)(_fn)


# --- describe -------------------------------------------------------------------------------


@describe_app.command("job")
@handled
def describe_job(name: str, top: Annotated[int, typer.Option(help="Rows of the link table (0: all).")] = 20,
                 output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """A job: status, plan summary (c4 vs proven bound vs ECMP), its busiest links, its alarms."""
    _actions().describe_job(name, top, output, server, token)


@describe_app.command("alarm")
@handled
def describe_alarm(alarm_id: Annotated[str, typer.Argument(metavar="ID", help="a-000017 or 17.")],
                   output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """An alarm: evidence and suspects (with each suspect's state now)."""
    _actions().describe_alarm(alarm_id, output, server, token)


@describe_app.command("link")
@handled
def describe_link(name: str, output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """A link: state, planned load per direction, the jobs on it, the alarms naming it."""
    _actions().describe_link(name, output, server, token)


# --- actions --------------------------------------------------------------------------------


def _link_command(state: str, doc: str) -> Callable[..., None]:
    @handled
    def command(name: Annotated[str, typer.Argument(help="The link's name (see c4 get links).")],
                output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
        _actions().set_link(name, state, output, server, token)

    command.__doc__ = doc
    return command


link_app.command("down")(_link_command("down", "Take a link down: its flows move off it at once."))
link_app.command("drain")(_link_command("drained", "Drain a link: no planned flow uses it; it stays up."))
link_app.command("up")(_link_command("up", "Bring a link back up; the planner may use it again."))


@host_app.command("isolate")
@handled
def host_isolate(name: str, reason: Annotated[str, typer.Option(help="Why (kept with the host's state).")],
                 output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """Take a host out of use: jobs naming it are refused and running ones flagged."""
    act = _actions()
    doc = act.post(act.path("v1", "hosts", name, "isolate"), {"reason": reason}, server, token)
    act.show_doc(doc, output, f"host {doc['name']} is {doc['state']} ({doc.get('reason')})")


@host_app.command("release")
@handled
def host_release(name: str, output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """Put an isolated host back in use."""
    act = _actions()
    doc = act.post(act.path("v1", "hosts", name, "release"), None, server, token)
    act.show_doc(doc, output, f"host {doc['name']} is {doc['state']}")


def _alarm_command(action: str, doc: str) -> Callable[..., None]:
    @handled
    def command(alarm_id: Annotated[str, typer.Argument(metavar="ID", help="a-000017 or 17.")],
                output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
        act = _actions()
        alarm = act.post(act.path("v1", "alarms", act.alarm_id(alarm_id), action), None, server, token)
        act.show_doc(alarm, output, f"alarm {alarm['id']} is {alarm['state']}")

    command.__doc__ = doc
    return command


alarm_app.command("ack")(_alarm_command("acknowledge", "Acknowledge an open alarm."))
alarm_app.command("acknowledge", hidden=True)(_alarm_command("acknowledge", "Acknowledge an open alarm."))
alarm_app.command("resolve")(_alarm_command("resolve", "Resolve an alarm."))


@handled
def token_list(output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """API tokens known to the controller (admin; values are never shown again)."""
    _actions().list_("tokens", "/v1/tokens", {}, None, output, False, 2.0, server, token)


@handled
def token_revoke(token_id: Annotated[int, typer.Argument(metavar="ID", help="From `c4 token list`.")],
                 output: OutputOpt = Output.TABLE, server: Server = None, token: Token = None) -> None:
    """Revoke a token: it stops working at once (within 5 s on other controller processes)."""
    act = _actions()
    doc = act.post(act.path("v1", "tokens", str(token_id), "revoke"), None, server, token)
    act.show_doc(doc, output, f"token {doc['id']} ({doc['name']}, {doc['role']}) is revoked")


def register(app: typer.Typer, token_app: typer.Typer) -> None:
    """Add the client commands to the `c4` command."""
    app.add_typer(get_app, name="get")
    app.add_typer(describe_app, name="describe")
    app.add_typer(link_app, name="link")
    app.add_typer(host_app, name="host")
    app.add_typer(alarm_app, name="alarm")
    token_app.command("list")(token_list)
    token_app.command("revoke")(token_revoke)
