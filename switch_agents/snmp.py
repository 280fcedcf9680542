"""`SnmpClient`: the narrow interface the poller talks SNMP through, and its pysnmp 7 version.

Two operations, both async and both returning a `Reply` value — never raising for what a
network or a switch can do (time out, refuse credentials, answer an error-status):
- `get(target, oids)`: the values of exactly these instances (absent ones are left out);
- `walk(target, columns)`: every row under each column, walked side by side with GETBULK
  (one request carries every unfinished column, `max_repetitions` rows each, at most
  `max_varbinds` variable bindings in all).

`PysnmpClient` keeps ONE pysnmp engine per process (a v1arch `SnmpDispatcher` for SNMPv2c, a
v3arch `SnmpEngine` for SNMPv3), created lazily inside the running event loop and reused
(research/telemetry.md §1.4: an engine is bound to its loop, and its first request costs
~0.8 s); transport targets and auth objects are cached per target. MIB lookup is
off (numeric OIDs from `profiles`), timeouts and retries are explicit per target (pysnmp's
defaults, 1 s x 6 tries, would hold a dead switch for 6 s). pysnmp's exceptions stop here.
SNMPv2c requests and responses go through `lean_v2c` by default (pysnmp's dispatcher, the
varbinds' BER read without pysnmp's per-varbind objects: a fifth of the CPU);
`v2c_decoder="pysnmp"` uses pysnmp's `get_cmd`/`bulk_cmd` instead.
`switch_agents.recording` holds the fake that replays recorded walks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Oid = tuple[int, ...]
MAX_WALK_REQUESTS = 2000  # a walk that needs more is a misbehaving agent, not a big table


def oid(text: str) -> Oid:
    return tuple(int(x) for x in text.strip(".").split("."))


def oid_text(o: Oid) -> str:
    return ".".join(map(str, o))


@dataclass(frozen=True, slots=True)
class Value:
    """A value as read: `kind` is counter32, counter64, gauge32, timeticks, integer, string or oid."""

    kind: str
    value: int | str


@dataclass(frozen=True, slots=True)
class Credentials:
    """Resolved credentials of one target (secrets included: never log this)."""

    version: str  # "2c" or "3"
    community: str = ""
    user: str = ""
    auth_protocol: str = "none"
    auth_key: str = ""
    priv_protocol: str = "none"
    priv_key: str = ""
    context: str = ""

    def __repr__(self) -> str:
        return f"Credentials(version={self.version!r}, user={self.user!r}, <secrets hidden>)"


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to poll one switch."""

    name: str
    address: str
    port: int
    credentials: Credentials
    timeout_s: float = 1.0
    retries: int = 1
    max_repetitions: int = 25
    max_varbinds: int = 50


@dataclass(slots=True)
class Reply:
    values: dict[Oid, Value] = field(default_factory=dict)
    error: str | None = None
    requests: int = 0
    varbinds: int = 0


class SnmpClient(Protocol):
    async def get(self, target: Target, oids: Sequence[Oid]) -> Reply: ...

    async def walk(self, target: Target, columns: Sequence[Oid]) -> Reply: ...

    async def close(self) -> None: ...


_KINDS = {"Counter32": "counter32", "Counter64": "counter64", "Gauge32": "gauge32", "Unsigned32": "gauge32",
          "TimeTicks": "timeticks", "Integer32": "integer", "Integer": "integer"}
_ABSENT = {"NoSuchObject", "NoSuchInstance", "EndOfMibView", "Null"}


def _convert(v: Any) -> Value | None:
    """A pysnmp value as a `Value`; None for the v2c exceptions (no such object/instance, end)."""
    name = type(v).__name__
    kind = _KINDS.get(name)
    if kind is not None:
        return Value(kind, int(v))
    if name in _ABSENT:
        return None
    if name == "OctetString" or name == "DisplayString":
        return Value("string", bytes(v.asOctets()).decode("utf-8", "replace"))
    if name == "ObjectIdentifier":
        return Value("oid", oid_text(v.asTuple()))
    if name == "IpAddress":
        return Value("string", ".".join(str(b) for b in v.asOctets()))
    return Value("string", str(v.prettyPrint()))


class PysnmpClient:
    """The pysnmp 7 implementation. Create and use it in one event loop.

    SNMPv2c goes through pysnmp's v1arch API (one `SnmpDispatcher`, `lean_v2c.LeanDispatcher`
    unless `v2c_decoder` is "pysnmp"): it sends numeric OIDs as they are, where the v3arch API
    resolves every request OID through its MIB view first (about 0.6 ms per OID here, which
    would double the cost of polling known instances). SNMPv3 needs the v3arch `SnmpEngine`
    (USM, engine discovery). Each is created once, on first use."""

    def __init__(self, v2c_decoder: str = "lean") -> None:
        if v2c_decoder not in ("lean", "pysnmp"):
            raise ValueError(f"v2c_decoder: {v2c_decoder!r} is not lean or pysnmp")
        self._v2c_decoder = v2c_decoder
        self._dispatcher: Any = None
        self._engine: Any = None
        self._transports: dict[tuple[str, str, int, float, int], Any] = {}
        self._auth: dict[str, tuple[Any, Any]] = {}
        self._v1: Any = None
        self._v3: Any = None
        self._lean: Any = None

    def _apis(self) -> tuple[Any, Any]:
        if self._v1 is None:
            # Imported late (half a second), only in a process that polls.
            import pysnmp.hlapi.v1arch.asyncio as v1
            import pysnmp.hlapi.v3arch.asyncio as v3

            from switch_agents import lean_v2c

            self._v1, self._v3, self._lean = v1, v3, lean_v2c
        return self._v1, self._v3

    async def _transport(self, t: Target) -> Any:
        v1, v3 = self._apis()
        arch = "v1" if t.credentials.version == "2c" else "v3"
        key = (arch, t.address, t.port, t.timeout_s, t.retries)
        got = self._transports.get(key)
        if got is None:
            api = v1 if arch == "v1" else v3
            got = await api.UdpTransportTarget.create((t.address, t.port), timeout=t.timeout_s, retries=t.retries)
            self._transports[key] = got
        return got

    def _auth_for(self, t: Target) -> tuple[Any, Any]:
        got = self._auth.get(t.name)
        if got is not None:
            return got
        v1, h = self._apis()
        c = t.credentials
        if c.version == "2c":
            auth, context = v1.CommunityData(c.community, mpModel=1), None
        else:
            auth_proto = {"none": h.USM_AUTH_NONE, "md5": h.USM_AUTH_HMAC96_MD5, "sha": h.USM_AUTH_HMAC96_SHA,
                          "sha224": h.USM_AUTH_HMAC128_SHA224, "sha256": h.USM_AUTH_HMAC192_SHA256,
                          "sha384": h.USM_AUTH_HMAC256_SHA384, "sha512": h.USM_AUTH_HMAC384_SHA512}[c.auth_protocol]
            priv_proto = {"none": h.USM_PRIV_NONE, "des": h.USM_PRIV_CBC56_DES, "3des": h.USM_PRIV_CBC168_3DES,
                          "aes": h.USM_PRIV_CFB128_AES, "aes128": h.USM_PRIV_CFB128_AES,
                          "aes192": h.USM_PRIV_CFB192_AES, "aes256": h.USM_PRIV_CFB256_AES}[c.priv_protocol]
            auth = h.UsmUserData(c.user, authKey=c.auth_key or None, privKey=c.priv_key or None,
                                 authProtocol=auth_proto, privProtocol=priv_proto)
            context = h.ContextData(contextName=c.context)
        self._auth[t.name] = (auth, context)
        return auth, context

    async def _request(self, t: Target, oids: Sequence[Oid],
                       bulk_repetitions: int | None) -> tuple[str | None, list[tuple[Oid, Value | None]]]:
        """One GET (`bulk_repetitions` None) or GETBULK: (error, varbinds in order; a value is
        None for the v2c exceptions: no such object or instance, end of MIB view)."""
        v1, v3 = self._apis()
        transport = await self._transport(t)
        auth, context = self._auth_for(t)
        if t.credentials.version == "2c" and self._v2c_decoder == "lean":
            if self._dispatcher is None:
                self._dispatcher = self._lean.LeanDispatcher()
            got = await self._lean.request(self._dispatcher, auth, transport, oids, bulk_repetitions)
            if got.error_indication is not None:
                return got.error_indication, []
            if got.error_status:
                return f"error-status {got.error_status_name} at varbind {got.error_index}", []
            return None, got.varbinds or []
        if t.credentials.version == "2c":
            if self._dispatcher is None:
                self._dispatcher = v1.SnmpDispatcher()
            plain = [(self._lean.v2c.ObjectIdentifier(o), self._lean.v2c.null) for o in oids]
            if bulk_repetitions is None:
                e, s, idx, vbs = await v1.get_cmd(self._dispatcher, auth, transport, *plain, lookupMib=False)
            else:
                e, s, idx, vbs = await v1.bulk_cmd(self._dispatcher, auth, transport, 0, bulk_repetitions, *plain,
                                                   lookupMib=False)
        else:
            if self._engine is None:
                self._engine = v3.SnmpEngine()
            binds = [v3.ObjectType(v3.ObjectIdentity(oid_text(o))) for o in oids]
            if bulk_repetitions is None:
                e, s, idx, vbs = await v3.get_cmd(self._engine, auth, transport, context, *binds, lookupMib=False)
            else:
                e, s, idx, vbs = await v3.bulk_cmd(self._engine, auth, transport, context, 0, bulk_repetitions,
                                                   *binds, lookupMib=False)
        if e:
            return f"{type(e).__name__}: {e}", []
        if s and int(s) != 0:
            return f"error-status {s.prettyPrint()} at varbind {int(idx)}", []
        return None, [(tuple(name.asTuple()), _convert(val)) for name, val in vbs]

    async def get(self, target: Target, oids: Sequence[Oid]) -> Reply:
        reply = Reply()
        try:
            step = max(1, target.max_varbinds)
            for i in range(0, len(oids), step):
                error, vbs = await self._request(target, oids[i:i + step], None)
                reply.requests += 1
                if error is not None:
                    reply.error = error
                    return reply
                reply.varbinds += len(vbs)
                for name, got in vbs:
                    if got is not None:
                        reply.values[name] = got
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # pysnmp's own errors (bad address, socket errors, ...)
            reply.error = f"{type(exc).__name__}: {exc}"
        return reply

    async def walk(self, target: Target, columns: Sequence[Oid]) -> Reply:
        reply = Reply()
        try:
            current = {c: c for c in columns}
            pending = list(columns)
            while pending:
                if reply.requests >= MAX_WALK_REQUESTS:
                    reply.error = f"walk did not end after {reply.requests} requests"
                    return reply
                n = len(pending)
                reps = max(1, min(target.max_repetitions, target.max_varbinds // n))
                error, vbs = await self._request(target, [current[c] for c in pending], reps)
                reply.requests += 1
                if error is not None:
                    reply.error = error
                    return reply
                reply.varbinds += len(vbs)
                done: set[Oid] = set()
                last: dict[Oid, Oid] = {}
                for k, (o, got) in enumerate(vbs):
                    column = pending[k % n]
                    if column in done:
                        continue
                    if got is None or o[:len(column)] != column:
                        done.add(column)
                        continue
                    reply.values[o] = got
                    last[column] = o
                following = []
                for column in pending:
                    # Stop a column that left its subtree, or that did not move (an agent
                    # answering non-increasing OIDs would loop forever otherwise).
                    if column in done or column not in last or last[column] <= current[column]:
                        continue
                    current[column] = last[column]
                    following.append(column)
                pending = following
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reply.error = f"{type(exc).__name__}: {exc}"
        return reply

    async def close(self) -> None:
        for closing in (self._dispatcher, self._engine):
            if closing is None:
                continue
            try:
                if hasattr(closing, "close_dispatcher"):
                    closing.close_dispatcher()
                else:
                    closing.close()
            except Exception:  # closing a half-started dispatcher may fail; nothing to do about it
                pass
        self._dispatcher = self._engine = None
        self._transports.clear()
        self._auth.clear()
