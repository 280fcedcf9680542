"""The agent's HTTP client for the controller (API.md), on httpx.

Every call returns a `Reply` value: a failed connection, a timeout or an error status are
outcomes the caller acts on (spool, back off, mark the controller unreachable), never
exceptions that escape this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from controller.domain.coll_packed import CONTENT_TYPE as PACKED_TYPE
from controller.domain.coll_packed import MAGIC as PACKED_MAGIC

MAX_LONG_POLLS = 32  # jobs followed by long-poll; others by the job list's versions


@dataclass(frozen=True)
class Reply:
    status: int  # HTTP status; 0 when no answer came (refused, reset, timed out)
    body: Any = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def reachable(self) -> bool:
        """The controller answered and is willing to work (not a 503 from a non-leader)."""
        return self.status != 0 and self.status != 503


class ControllerClient:
    """Two connection pools: long-polls (which hold a connection for up to their wait) never
    make a telemetry POST or a probe report wait for a free connection."""

    def __init__(self, base_url: str, token: str, timeout_s: float) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
        )  # fmt: skip
        self._polls = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s,
            limits=httpx.Limits(max_connections=MAX_LONG_POLLS, max_keepalive_connections=8),
        )  # fmt: skip

    async def close(self) -> None:
        await self._http.aclose()
        await self._polls.aclose()

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    content: bytes | None = None, json: Any = None, extra_s: float = 0.0,
                    raw: bool = False, content_type: str = "application/json") -> Reply:
        headers = {"Content-Type": content_type} if content is not None else None
        client = self._polls if extra_s > 0 else self._http
        try:
            r = await client.request(
                method, path, params=params, content=content, json=json, headers=headers,
                timeout=self.timeout_s + extra_s,
            )  # fmt: skip
        except httpx.HTTPError as e:
            return Reply(0, error=f"{type(e).__name__}: {e}")
        body: Any = None
        if raw:
            body = r.content
        elif r.content:
            try:
                body = r.json()
            except ValueError:
                body = r.text
        return Reply(r.status_code, body, "" if r.is_success else r.text[:500])

    async def openapi(self) -> Reply:
        return await self._call("GET", "/openapi.json")

    async def jobs(self) -> Reply:
        """The job list's bytes (unparsed: `sync.iter_jobs` reads it a job at a time)."""
        return await self._call("GET", "/v1/jobs", raw=True)

    async def assignments(self, job: str, host: str, after_version: int | None,
                          wait_s: float) -> Reply:
        params: dict[str, Any] = {"host": host}
        if after_version is not None and wait_s > 0:
            params |= {"after_version": after_version, "wait_s": wait_s}
        return await self._call("GET", f"/v1/jobs/{job}/assignments", params=params,
                                extra_s=wait_s)

    async def post_collectives(self, body: bytes) -> Reply:
        """A JSON batch, or a packed one (node_agent.packed: told by its first bytes)."""
        return await self._call("POST", "/v1/telemetry/collectives", content=body,
                                content_type=PACKED_TYPE if body[:4] == PACKED_MAGIC else
                                "application/json")

    async def probe_requests(self, host: str) -> Reply:
        return await self._call("GET", "/v1/probes/requests", params={"host": host})

    async def post_probes(self, doc: dict[str, Any]) -> Reply:
        return await self._call("POST", "/v1/probes", json=doc)
