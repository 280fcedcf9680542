"""What the client commands do: one function per command, over `http.Client`, rendered by
`views`/`render`. `commands` declares the command line and imports this module only when a
command runs, so `c4 --help` and `c4 serve` never load an HTTP client or a table renderer.

Failures are `http.ApiFailure`s (lines to print, an exit code); `commands.handled` prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import typer

from controller.client import names, render, views
from controller.client.http import ApiFailure, Client, resolve
from controller.client.options import Output

Rows = list[dict[str, Any]]


def path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe=":/") for p in parts)


def alarm_id(value: str) -> str:
    """`17` -> `a-000017`; anything else as typed."""
    return f"a-{int(value):06d}" if value.isdigit() else value


def link_failure(client: Client, name: str, failure: ApiFailure) -> ApiFailure:
    """A 404 for a link name, with the canonical name the user probably meant."""
    if failure.status != 404:
        return failure
    try:
        links = client.get("/v1/links")["links"]
    except ApiFailure:
        return failure
    failure.lines[-1] = f"error: no link named {name!r}; {names.hint(name, links)}"
    return failure


def list_(kind: str, api_path: str, params: dict[str, Any], name: str | None, output: Output, watch: bool,
          interval: float, server: str | None, token: str | None, sort: Callable[[Rows], Rows] | None = None) -> None:
    """`c4 get KIND [NAME]`: a table (or the API's document), once or `--watch`ed."""
    key, columns, known = views.KINDS[kind]
    with Client(resolve(server, token)) as client:

        def fetch() -> tuple[Any, Any]:
            """The API's document and how it shows."""
            if name is not None:
                try:
                    doc = client.get(api_path + path(name))
                except ApiFailure as failure:
                    raise link_failure(client, name, failure) if kind == "links" else failure from None
                rows = [doc]
            else:
                doc = client.get(api_path, **params)
                rows = doc[key]
                if sort is not None:
                    rows = sort(rows)
                    doc = {**doc, key: rows}
            if output in (Output.JSON, Output.YAML):
                return doc, render.document(doc, output)
            if not rows:
                return doc, f"No {kind} found."
            return doc, render.table(rows, columns, output == Output.WIDE, known)

        if watch:
            render.watch(fetch, interval, _watch_error)
        else:
            render.show(fetch()[1])


def _watch_error(exc: Exception) -> str:
    """While watching: stop on a refusal (bad token, unknown name); retry while unreachable."""
    if isinstance(exc, ApiFailure) and exc.exit_code not in (1, 6):
        for line in exc.lines:
            typer.echo(line, err=True)
        raise typer.Exit(exc.exit_code)
    if isinstance(exc, ApiFailure):
        return " ".join(exc.lines) + " (retrying)"
    raise exc


def by_utilization(rows: Rows) -> Rows:
    return sorted(rows, key=lambda x: (-float(x.get("max_planned_utilization") or 0.0), x["name"]))


def show_doc(doc: Any, output: Output, line: str) -> None:
    """An action's answer: one line, or the API's document with `-o json|yaml`."""
    if output in (Output.JSON, Output.YAML):
        render.show(render.document(doc, output))
    else:
        typer.echo(line)


def describe_job(name: str, top: int, output: Output, server: str | None, token: str | None) -> None:
    with Client(resolve(server, token)) as client:
        job = client.get(path("v1", "jobs", name))
        try:
            links = client.get(path("v1", "jobs", name, "links"))
        except ApiFailure as failure:
            if failure.status != 404:  # no fabric stored: the job has no links to show
                raise
            links = None
        alarms = client.get("/v1/alarms", job=name, limit=10)["alarms"]
    if output in (Output.JSON, Output.YAML):
        render.show(render.document({"job": job, "links": links, "alarms": alarms}, output))
    else:
        render.show(views.describe_job(job, links, alarms, top))


def describe_alarm(value: str, output: Output, server: str | None, token: str | None) -> None:
    with Client(resolve(server, token)) as client:
        alarm = client.get(path("v1", "alarms", alarm_id(value)))
        if output in (Output.JSON, Output.YAML):
            render.show(render.document(alarm, output))
            return
        render.show(views.describe_alarm(alarm, suspect_states(client, alarm.get("suspects") or [])))


def suspect_states(client: Client, suspects: Rows) -> dict[str, str]:
    """What each of the first five suspects looks like now: a link's state and planned load,
    a host's (or a NIC port's host's) state."""
    out: dict[str, str] = {}
    hosts: dict[str, str] | None = None
    for s in suspects[:5]:
        try:
            if s["kind"] == "link":
                link = client.get(path("v1", "links", s["name"]))
                out[s["name"]] = f"{link['state']}, planned utilization {render.num(link.get('max_planned_utilization'))}"
            elif s["kind"] in ("host", "nic_port"):
                if hosts is None:
                    hosts = {h["name"]: h["state"] for h in client.get("/v1/hosts")["hosts"]}
                out[s["name"]] = f"host {hosts.get(s['name'].split(':', 1)[0], 'unknown')}"
        except ApiFailure:
            continue
    return out


def describe_link(name: str, output: Output, server: str | None, token: str | None) -> None:
    with Client(resolve(server, token)) as client:
        try:
            link = client.get(path("v1", "links", name))
        except ApiFailure as failure:
            raise link_failure(client, name, failure) from None
        alarms = [a for a in client.get("/v1/alarms", limit=500)["alarms"]
                  if any(s.get("name") == link["name"] for s in a.get("suspects") or [])][:10]
    if output in (Output.JSON, Output.YAML):
        render.show(render.document({"link": link, "alarms": alarms}, output))
    else:
        render.show(views.describe_link(link, alarms))


def set_link(name: str, state: str, output: Output, server: str | None, token: str | None) -> None:
    with Client(resolve(server, token)) as client:
        try:
            doc = client.patch(path("v1", "links", name), {"state": state})
        except ApiFailure as failure:
            raise link_failure(client, name, failure) from None
    show_doc(doc, output, f"link {doc['name']} is {doc['state']}; "
                          f"{doc.get('replanned_flows', 0)} assignment(s) re-planned")


def post(api_path: str, body: dict[str, Any] | None, server: str | None, token: str | None) -> Any:
    with Client(resolve(server, token)) as client:
        return client.post(api_path, body)
