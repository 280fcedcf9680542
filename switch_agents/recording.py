"""Recorded walks: `RecordingClient` writes down what a real `SnmpClient` answered, poll by
poll; `ReplayClient` is the fake that answers from such a recording (tests, no network).

A recording (JSON) holds one target's polls; each poll is every value any request of that
poll returned, with its kind::

    {"target": "leaf0", "profile": "sonic",
     "polls": [{"1.3.6.1.2.1.1.3.0": ["timeticks", 1200],
                "1.3.6.1.2.1.31.1.1.1.1.1": ["string", "Ethernet0"],
                "1.3.6.1.2.1.31.1.1.1.10.1": ["counter64", 123456789]}, ...]}

Polls begin with a GET of sysUpTime (what `TargetPoller.poll` sends first), so the replay
moves to the next recorded poll on each such GET and stays on the last one at the end; a
poll recorded as `{"error": "RequestTimedOut: ..."}` replays as that failure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from switch_agents.profiles import SYS_UPTIME
from switch_agents.snmp import Oid, Reply, SnmpClient, Target, Value, oid, oid_text

_UPTIME = oid(SYS_UPTIME)


class RecordingClient:
    """Passes every call to `inner` and records the values per target and poll."""

    def __init__(self, inner: SnmpClient) -> None:
        self.inner = inner
        self.polls: dict[str, list[dict[str, Any]]] = {}

    def _keep(self, target: Target, reply: Reply, starts_poll: bool) -> None:
        polls = self.polls.setdefault(target.name, [])
        if starts_poll or not polls:
            polls.append({})
        if reply.error is not None:
            polls[-1]["error"] = reply.error
        for o, v in reply.values.items():
            polls[-1][oid_text(o)] = [v.kind, v.value]

    async def get(self, target: Target, oids: Sequence[Oid]) -> Reply:
        reply = await self.inner.get(target, oids)
        self._keep(target, reply, _UPTIME in oids)
        return reply

    async def walk(self, target: Target, columns: Sequence[Oid]) -> Reply:
        reply = await self.inner.walk(target, columns)
        self._keep(target, reply, False)
        return reply

    async def close(self) -> None:
        await self.inner.close()

    def document(self, target: str, profile: str) -> dict[str, Any]:
        return {"target": target, "profile": profile, "polls": self.polls.get(target, [])}


class ReplayClient:
    """Answers from recordings, by target name; a target with none times out."""

    def __init__(self, recordings: dict[str, list[dict[str, Any]]]) -> None:
        self._polls = {name: [self._parse(p) for p in polls] for name, polls in recordings.items()}
        self._index: dict[str, int] = {}
        self.calls: list[tuple[str, str, int]] = []  # (target, "get"/"walk", varbinds asked)

    @staticmethod
    def _parse(poll: dict[str, Any]) -> tuple[dict[Oid, Value], str | None]:
        values = {oid(k): Value(str(v[0]), v[1]) for k, v in poll.items() if k != "error"}
        return dict(sorted(values.items())), poll.get("error")

    @classmethod
    def from_files(cls, *paths: Path) -> ReplayClient:
        recordings = {}
        for path in paths:
            doc = json.loads(path.read_text())
            recordings[str(doc["target"])] = list(doc["polls"])
        return cls(recordings)

    def _current(self, target: Target, advance: bool) -> tuple[dict[Oid, Value], str | None] | None:
        polls = self._polls.get(target.name)
        if not polls:
            return None
        i = self._index.get(target.name, -1)
        if advance or i < 0:
            i = min(i + 1, len(polls) - 1)
            self._index[target.name] = i
        return polls[i]

    async def get(self, target: Target, oids: Sequence[Oid]) -> Reply:
        self.calls.append((target.name, "get", len(oids)))
        got = self._current(target, _UPTIME in oids)
        if got is None:
            return Reply(error="RequestTimedOut: No SNMP response received before timeout", requests=1)
        values, error = got
        if error is not None:
            return Reply(error=error, requests=1)
        found = {o: values[o] for o in oids if o in values}
        return Reply(found, requests=1, varbinds=len(oids))

    async def walk(self, target: Target, columns: Sequence[Oid]) -> Reply:
        self.calls.append((target.name, "walk", len(columns)))
        got = self._current(target, False)
        if got is None:
            return Reply(error="RequestTimedOut: No SNMP response received before timeout", requests=1)
        values, error = got
        if error is not None:
            return Reply(error=error, requests=1)
        found = {o: v for o, v in values.items() if any(o[:len(c)] == c for c in columns)}
        return Reply(found, requests=1, varbinds=len(found))

    async def close(self) -> None:
        return None
