"""Getting samples to the controller: a bounded spool and the poster that drains it.

Every successful poll's sample goes into the `Spool`; the `Poster` sends the oldest first in
batches (`POST /v1/telemetry/switches?unknown=ignore`, FORMAT.md). While the controller is
away (connection refused, timeout, 5xx, 503 from a controller that cannot take it now, 404
from one that has no fabric yet) the samples wait — briefly: older than `spool_max_age_s`, or beyond `spool_max_samples`, they are
dropped oldest first and counted, because rates need fresh counters and the next poll brings
new ones (a gap costs one interval's rate, not the counters: they are cumulative). A batch the
controller refuses as invalid (422, and other 4xx) can never succeed and is dropped at once,
loudly; 401/403 wait like an outage (a token being rotated) and say so in the health endpoint.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Spooled:
    sample: dict[str, Any]
    added_s: float


class Spool:
    def __init__(self, max_samples: int, max_age_s: float) -> None:
        self.max_samples = max_samples
        self.max_age_s = max_age_s
        self._items: deque[Spooled] = deque()

    def add(self, samples: list[dict[str, Any]], now_s: float) -> int:
        """Queue samples; returns how many old ones were dropped to make room."""
        self._items.extend(Spooled(s, now_s) for s in samples)
        dropped = 0
        while len(self._items) > self.max_samples:
            self._items.popleft()
            dropped += 1
        return dropped

    def expire(self, now_s: float) -> int:
        dropped = 0
        while self._items and now_s - self._items[0].added_s > self.max_age_s:
            self._items.popleft()
            dropped += 1
        return dropped

    def peek(self, n: int) -> list[dict[str, Any]]:
        return [self._items[i].sample for i in range(min(n, len(self._items)))]

    def pop(self, n: int) -> None:
        for _ in range(min(n, len(self._items))):
            self._items.popleft()

    def oldest_age_s(self, now_s: float) -> float:
        return now_s - self._items[0].added_s if self._items else 0.0

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class PostOutcome:
    """What one POST did: `sent` samples accepted, `dropped` refused for good, `error` if the
    controller was not reached or did not take them (then nothing left the spool)."""

    sent: int = 0
    dropped: int = 0
    error: str | None = None
    status: int | None = None
    ignored: tuple[str, ...] = ()


class Poster:
    def __init__(self, url: str, token: str, timeout_s: float, batch_max: int,
                 client: httpx.AsyncClient | None = None) -> None:
        self.endpoint = url.rstrip("/") + "/v1/telemetry/switches"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout_s = timeout_s
        self.batch_max = batch_max
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    async def post_one(self, spool: Spool) -> PostOutcome:
        """Send the oldest batch; leaves it spooled unless the controller took or refused it."""
        batch = spool.peek(self.batch_max)
        if not batch:
            return PostOutcome()
        try:
            r = await self._client.post(self.endpoint, params={"unknown": "ignore"}, json={"samples": batch},
                                        headers=self._headers, timeout=self._timeout_s)
        except httpx.HTTPError as exc:
            return PostOutcome(error=f"{type(exc).__name__}: {exc}".strip(": "))
        if r.status_code == 202:
            spool.pop(len(batch))
            ignored: tuple[str, ...] = ()
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                ignored = tuple(f"{i['field']}: {i['message']}" for i in r.json().get("ignored", []))
            return PostOutcome(sent=len(batch), status=202, ignored=ignored)
        detail = r.text[:500]
        if r.status_code == 422 or (400 <= r.status_code < 500 and r.status_code not in (401, 403, 404, 408, 429)):
            spool.pop(len(batch))
            log.error("controller refused %d samples (%d): %s", len(batch), r.status_code, detail)
            return PostOutcome(dropped=len(batch), status=r.status_code, error=f"refused ({r.status_code}): {detail}")
        return PostOutcome(status=r.status_code, error=f"HTTP {r.status_code}: {detail}")

    async def close(self) -> None:
        await self._client.aclose()
