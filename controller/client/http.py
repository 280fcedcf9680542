"""The CLI's connection to a running controller: where it is, the token, one HTTP client, and
API refusals turned into one-line errors with exit codes.

Where and who, first found wins: the `--server`/`--token` flags, then `C4_URL`/`C4_TOKEN`,
then the config file (`C4_CONFIG`, else `~/.config/c4/config.toml`) with `url = "..."` and
`token = "..."`, then `http://127.0.0.1:8000` without a token.

Exit codes (`EXIT`): 0 done; 1 any other failure; 2 bad input (a 422 or 413, or bad
arguments); 3 refused auth (401, 403); 4 not found (404); 5 conflict (409); 6 the controller
is unreachable or unavailable (connection refused, timeout, 503).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT = {401: 3, 403: 3, 404: 4, 409: 5, 413: 2, 422: 2, 503: 6}
UNREACHABLE = 6
MAX_PROBLEMS_SHOWN = 20


class ApiFailure(Exception):
    """A refusal or failure, as the user sees it: lines to print and an exit code."""

    def __init__(self, lines: list[str], exit_code: int, status: int | None = None, code: str = "",
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines, self.exit_code, self.status, self.code = lines, exit_code, status, code
        self.details = details or {}


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    token: str | None
    source: str  # where the URL came from, for error messages


def config_path() -> Path:
    env = os.environ.get("C4_CONFIG")
    return Path(env) if env else Path.home() / ".config" / "c4" / "config.toml"


def resolve(server: str | None, token: str | None) -> Target:
    """The controller and token to use (see the module docstring for the order)."""
    file: dict[str, Any] = {}
    path = config_path()
    if path.is_file():
        try:
            file = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, OSError) as exc:
            raise ApiFailure([f"error: config file {path}: {exc}"], 2) from exc
    if server:
        url, source = server, "--server"
    elif os.environ.get("C4_URL"):
        url, source = os.environ["C4_URL"], "C4_URL"
    elif isinstance(file.get("url"), str):
        url, source = file["url"], str(path)
    else:
        url, source = DEFAULT_URL, "the default"
    tok = token or os.environ.get("C4_TOKEN") or (file.get("token") if isinstance(file.get("token"), str) else None)
    return Target(url.rstrip("/"), tok, source)


def failure_from_response(response: httpx.Response) -> ApiFailure:
    """API.md's error body as one line (a 422: one line per offending field)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    error: dict[str, Any] = {}
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    code = str(error.get("code") or f"http_{status}")
    message = str(error.get("message") or response.reason_phrase or f"HTTP {status}")
    details: dict[str, Any] = error["details"] if isinstance(error.get("details"), dict) else {}
    problems: list[Any] = details["errors"] if isinstance(details.get("errors"), list) else []
    if problems:
        lines = [f"error: {p.get('field') or 'body'}: {p.get('message')}" for p in problems[:MAX_PROBLEMS_SHOWN]
                 if isinstance(p, dict)]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            lines.append(f"error: ... and {len(problems) - MAX_PROBLEMS_SHOWN} more")
    else:
        lines = [f"error: {message}"]
    if status in (401, 403) and code:
        lines[-1] += f" ({code})"
    exit_code = EXIT.get(status, 1)
    return ApiFailure(lines, exit_code, status, code, details)


class Client:
    """A thin HTTP client: JSON in and out; refusals raise `ApiFailure`."""

    def __init__(self, target: Target, timeout_s: float = 30.0) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self._http = httpx.Client(base_url=target.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def request(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, json=json, params=clean)
        except httpx.TimeoutException as exc:
            raise ApiFailure([f"error: the controller at {self.target.url} did not answer in time"],
                             UNREACHABLE) from exc
        except httpx.HTTPError as exc:
            raise ApiFailure([f"error: cannot reach the controller at {self.target.url} (from {self.target.source}):"
                              f" {_reason(exc)}; set --server or C4_URL"], UNREACHABLE) from exc
        if response.status_code >= 400:
            failure = failure_from_response(response)
            if response.status_code == 401 and not self.target.token:
                failure.lines[-1] += "; give a token with --token or C4_TOKEN"
            raise failure
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body if body is not None else {})

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
