"""SNMPv2c GET and GETBULK on pysnmp's v1arch dispatcher, without pysnmp's per-varbind cost.

Why this exists: the agent's CPU target (100 switches x 64 ports every 10 s within 20 % of a
core). Through pysnmp's `get_cmd`/`bulk_cmd` each varbind costs ~140 us of CPU: the request's
varbinds are built as pyasn1 objects (~27 us each) and encoded (~23 us) on every request, and
the response is decoded against the full SMI spec (~90 us: a SEQUENCE per varbind, its value a
CHOICE of CHOICEs, a dozen pyasn1 objects). So:
- pysnmp still does everything SNMP-the-protocol: its `SnmpDispatcher` owns the transport,
  request ids, timeouts and retries (`send_pdu`), pyasn1 encodes every message and decodes
  every response's header (version, community, PDU, request id, error status and index);
- a request's varbind list is encoded by pyasn1 once, for a given list of OIDs, and reused
  (`varbind_list`: the same instances every cycle);
- a response is decoded with a lean spec that leaves the varbind list as raw BER
  (`univ.Any`), and `read_varbinds` reads it: SNMP's BER uses definite lengths only
  (RFC 3417 §8) and a varbind is SEQUENCE { OBJECT IDENTIFIER, one primitive value }, so a
  short reader does it, decoding OIDs through a cache keyed by their bytes (the same ones
  come back every cycle).
The one pysnmp internal this relies on is `SnmpDispatcher._recv_callback` and its pending
request table (`_pendingReqs`), overridden in `LeanDispatcher`; pysnmp is pinned below 8 and
the snmpsim tier runs every request kind through it.

What it must not do: SNMPv3 (USM, engine discovery: `PysnmpClient` uses pysnmp's v3arch
engine for it), MIB resolution (OIDs are numeric), or raise for what a switch can send: a
malformed varbind list is a `Malformed` error value.

Worked example — a GetResponse carrying sysUpTime.0 = 4242 (TimeTicks):

>>> raw = bytes.fromhex("3010" "300e" "0608" "2b06010201010300" "4302" "1092")
>>> read_varbinds(raw)
[((1, 3, 6, 1, 2, 1, 1, 3, 0), Value(kind='timeticks', value=4242))]
>>> read_varbinds(bytes.fromhex("3006" "3004" "0600" "8100"))  # doctest: +ELLIPSIS
Malformed(reason='empty OBJECT IDENTIFIER ...')
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pyasn1.codec.ber import decoder, encoder
from pyasn1.error import PyAsn1Error
from pyasn1.type import namedtype, univ
from pysnmp.hlapi.v1arch.asyncio import SnmpDispatcher
from pysnmp.proto import errind, rfc1905
from pysnmp.proto.api import v2c

from switch_agents.snmp import Oid, Value, oid_text

# A response never carries more than this many OIDs worth caching; past it the cache is
# dropped whole (a switch whose ifIndex values churn must not grow the process forever).
OID_CACHE_MAX = 200_000


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def _pdu_type(name: str, pdu_tag: Any, second: str, third: str) -> type[univ.Sequence]:
    return type(name, (univ.Sequence,), {
        "tagSet": pdu_tag,
        "componentType": namedtype.NamedTypes(
            namedtype.NamedType("request-id", univ.Integer()),
            namedtype.NamedType(second, univ.Integer()),
            namedtype.NamedType(third, univ.Integer()),
            namedtype.NamedType("variable-bindings", univ.Any()),
        ),
    })


# RFC 3416's PDUs with the varbind list as raw BER (pysnmp's `set_pdu` places them in a
# message by tag, and pyasn1 encodes an untagged Any as its bytes).
LeanGetRequest = _pdu_type("LeanGetRequest", rfc1905.GetRequestPDU.tagSet, "error-status", "error-index")
LeanGetBulkRequest = _pdu_type("LeanGetBulkRequest", rfc1905.GetBulkRequestPDU.tagSet,
                               "non-repeaters", "max-repetitions")
LeanResponse = _pdu_type("LeanResponse", rfc1905.ResponsePDU.tagSet, "error-status", "error-index")


class LeanResponseMessage(univ.Sequence):  # type: ignore[misc]
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("version", univ.Integer()),
        namedtype.NamedType("community", univ.OctetString()),
        namedtype.NamedType("data", LeanResponse()),
    )


@lru_cache(maxsize=8192)
def varbind_list(oids: tuple[Oid, ...]) -> bytes:
    """The BER of a request's varbind list (each OID with a NULL value), encoded by pyasn1."""
    pdu = v2c.GetRequestPDU()
    v2c.apiPDU.set_varbinds(pdu, [(v2c.ObjectIdentifier(o), v2c.null) for o in oids])
    return bytes(encoder.encode(pdu.getComponentByPosition(3)))


def _length(buf: bytes, i: int) -> tuple[int, int]:
    """A definite BER length at `buf[i]`: (length, index of the contents)."""
    first = buf[i]
    if first < 0x80:
        return first, i + 1
    n = first & 0x7F
    if n == 0 or n > 4 or i + 1 + n > len(buf):
        raise ValueError("indefinite or oversized length")
    return int.from_bytes(buf[i + 1:i + 1 + n], "big"), i + 1 + n


def _decode_oid(content: bytes) -> Oid:
    if not content:
        raise ValueError("empty OBJECT IDENTIFIER")
    arcs: list[int] = []
    value = 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    if content[-1] & 0x80:
        raise ValueError("truncated OBJECT IDENTIFIER")
    first = arcs[0]
    head = (first // 40, first % 40) if first < 80 else (2, first - 80)
    return (*head, *arcs[1:])


_oids: dict[bytes, Oid] = {}


def _oid(content: bytes) -> Oid:
    got = _oids.get(content)
    if got is None:
        if len(_oids) >= OID_CACHE_MAX:
            _oids.clear()
        got = _oids[content] = _decode_oid(content)
    return got


_UNSIGNED = {0x41: "counter32", 0x42: "gauge32", 0x43: "timeticks", 0x46: "counter64"}
_ABSENT = {0x05, 0x80, 0x81, 0x82}  # NULL, noSuchObject, noSuchInstance, endOfMibView


def _value(tag: int, content: bytes) -> Value | None:
    kind = _UNSIGNED.get(tag)
    if kind is not None:
        return Value(kind, int.from_bytes(content, "big"))
    if tag in _ABSENT:
        return None
    if tag == 0x02:
        return Value("integer", int.from_bytes(content, "big", signed=True))
    if tag == 0x04:
        return Value("string", content.decode("utf-8", "replace"))
    if tag == 0x06:
        return Value("oid", oid_text(_decode_oid(content)))
    if tag == 0x40:
        return Value("string", ".".join(str(b) for b in content))
    return Value("string", "0x" + content.hex())  # Opaque and anything newer: as pysnmp prints it


def read_varbinds(raw: bytes) -> list[tuple[Oid, Value | None]] | Malformed:
    """A response's varbind list (its BER, SEQUENCE OF VarBind) as (OID, value) pairs, in order;
    the value is None for NULL and the v2c exceptions (noSuchObject, noSuchInstance,
    endOfMibView)."""
    out: list[tuple[Oid, Value | None]] = []
    try:
        if not raw or raw[0] != 0x30:
            return Malformed("varbind list is not a SEQUENCE")
        length, i = _length(raw, 1)
        end = i + length
        if end > len(raw):
            return Malformed("varbind list longer than the message")
        while i < end:
            if raw[i] != 0x30:
                return Malformed(f"varbind {len(out)} is not a SEQUENCE")
            length, j = _length(raw, i + 1)
            stop = j + length
            if stop > end or raw[j] != 0x06:
                return Malformed(f"varbind {len(out)} has no OBJECT IDENTIFIER")
            length, k = _length(raw, j + 1)
            name = _oid(raw[k:k + length])
            k += length
            if k >= stop:
                return Malformed(f"varbind {len(out)} has no value")
            tag = raw[k]
            length, m = _length(raw, k + 1)
            if m + length != stop:
                return Malformed(f"varbind {len(out)} has a value of the wrong length")
            out.append((name, _value(tag, raw[m:stop])))
            i = stop
    except (ValueError, IndexError) as exc:
        return Malformed(f"{exc} in varbind {len(out)}")
    return out


class LeanDispatcher(SnmpDispatcher):  # type: ignore[misc]
    """pysnmp's v1arch dispatcher, decoding responses with `LeanResponseMessage`."""

    def _recv_callback(self, snmpEngine: Any, transportDomain: Any, transportAddress: Any,
                       wholeMsg: bytes) -> bytes:
        while wholeMsg:
            try:
                message, wholeMsg = decoder.decode(wholeMsg, asn1Spec=LeanResponseMessage())
            except PyAsn1Error:
                return b""  # not a v2c response: dropped, as pysnmp drops what it cannot read
            pdu = message.getComponentByPosition(2)
            state = self._pendingReqs.pop(int(pdu.getComponentByPosition(0)), None)
            if state is None:
                continue  # a late answer to a request already retried or timed out
            self.transport_dispatcher.job_finished(id(self))
            if state["cbFun"]:
                state["cbFun"](self, int(pdu.getComponentByPosition(0)), None, pdu, state["cbCtx"])
        return wholeMsg


@dataclass(frozen=True, slots=True)
class LeanReply:
    error_indication: str | None = None
    error_status: int = 0
    error_status_name: str = ""
    error_index: int = 0
    varbinds: list[tuple[Oid, Value | None]] | None = None


def _error_name(status: int) -> str:
    try:
        return str(rfc1905.errorStatus.clone(status).prettyPrint())
    except PyAsn1Error:
        return str(status)


async def request(dispatcher: LeanDispatcher, auth: Any, transport: Any, oids: Sequence[Oid],
                  bulk_repetitions: int | None) -> LeanReply:
    """One GET (`bulk_repetitions` None) or GETBULK (non-repeaters 0) of `oids`."""
    pdu = LeanGetRequest() if bulk_repetitions is None else LeanGetBulkRequest()
    pdu.setComponentByPosition(0, v2c.getNextRequestID())
    pdu.setComponentByPosition(1, 0)
    pdu.setComponentByPosition(2, 0 if bulk_repetitions is None else bulk_repetitions)
    pdu.setComponentByPosition(3, univ.Any(varbind_list(tuple(oids))))
    future: asyncio.Future[LeanReply] = asyncio.get_running_loop().create_future()

    def answered(_dispatcher: Any, _request_id: Any, indication: Any, response: Any, _ctx: Any) -> None:
        if future.done():
            return
        if indication is not None:
            name = "RequestTimedOut" if isinstance(indication, errind.RequestTimedOut) else type(indication).__name__
            future.set_result(LeanReply(error_indication=f"{name}: {indication}"))
            return
        status = int(response.getComponentByPosition(1))
        index = int(response.getComponentByPosition(2))
        if status:
            future.set_result(LeanReply(error_status=status, error_status_name=_error_name(status), error_index=index))
            return
        binds = read_varbinds(response.getComponentByPosition(3).asOctets())
        if isinstance(binds, Malformed):
            future.set_result(LeanReply(error_indication=f"Malformed: {binds.reason}"))
            return
        future.set_result(LeanReply(varbinds=binds))

    dispatcher.send_pdu(auth, transport, pdu, cbFun=answered)
    return await future
