"""The lean SNMPv2c codec against pysnmp's own: what pyasn1 encodes from pysnmp's types,
`read_varbinds` must read exactly as pysnmp's full decoder + `_convert` does; the request
messages it sends must be byte for byte the ones pysnmp's `get_cmd`/`bulk_cmd` send; and
no damaged response may raise."""

from __future__ import annotations

import doctest
import random

from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import rfc1902, rfc1905
from pysnmp.proto.api import v2c

from switch_agents import lean_v2c
from switch_agents.lean_v2c import (
    LeanGetBulkRequest,
    LeanGetRequest,
    LeanResponseMessage,
    Malformed,
    read_varbinds,
    varbind_list,
)
from switch_agents.snmp import _convert


def test_docstring_examples() -> None:
    result = doctest.testmod(lean_v2c)
    assert result.attempted >= 2 and result.failed == 0


def random_varbinds(rng: random.Random, n: int) -> list[tuple[tuple[int, ...], object]]:
    makers = [
        lambda: rfc1902.Counter64(rng.choice([0, 1, 127, 128, 255, 2**31, 2**63, 2**64 - 1, rng.getrandbits(64)])),
        lambda: rfc1902.Counter32(rng.choice([0, 2**31, 2**32 - 1, rng.getrandbits(32)])),
        lambda: rfc1902.Gauge32(rng.getrandbits(32)),
        lambda: rfc1902.TimeTicks(rng.getrandbits(32)),
        lambda: rfc1902.Integer32(rng.randint(-2**31, 2**31 - 1)),
        lambda: rfc1902.OctetString(rng.choice([b"", b"Ethernet12", b"Eth1/1", b"x" * rng.randint(100, 300)])),
        lambda: rfc1902.ObjectIdentifier((1, 3, 6, 1, 4, 1, rng.randint(0, 2**32 - 1), rng.randint(0, 200))),
        lambda: rfc1902.IpAddress(".".join(str(rng.randint(0, 255)) for _ in range(4))),
        lambda: rfc1905.noSuchInstance,
        lambda: rfc1905.noSuchObject,
        lambda: rfc1905.endOfMibView,
    ]
    out = []
    for _ in range(n):
        name = (1, 3, 6, 1, rng.choice([2, 4]), 1, *(rng.randint(0, 2**28) for _ in range(rng.randint(1, 8))))
        out.append((name, rng.choice(makers)()))
    return out


def response_bytes(varbinds: list[tuple[tuple[int, ...], object]], request_id: int = 77) -> bytes:
    pdu = v2c.ResponsePDU()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, request_id)
    v2c.apiPDU.set_varbinds(pdu, [(v2c.ObjectIdentifier(n), v) for n, v in varbinds])
    msg = v2c.Message()
    v2c.apiMessage.set_defaults(msg)
    v2c.apiMessage.set_community(msg, "c4")
    v2c.apiMessage.set_pdu(msg, pdu)
    return bytes(encoder.encode(msg))


def test_reads_what_pysnmp_reads() -> None:
    rng = random.Random(13)
    for n in (1, 3, 60, 400):  # 400 varbinds: multi-byte lengths everywhere
        raw = response_bytes(random_varbinds(rng, n))
        full, rest = decoder.decode(raw, asn1Spec=v2c.Message())
        assert rest == b""
        expected = [(tuple(name.asTuple()), _convert(val)) for name, val in v2c.apiPDU.get_varbinds(v2c.apiMessage.get_pdu(full))]
        lean, rest = decoder.decode(raw, asn1Spec=LeanResponseMessage())
        assert rest == b""
        pdu = lean.getComponentByPosition(2)
        assert int(pdu.getComponentByPosition(0)) == 77
        assert read_varbinds(pdu.getComponentByPosition(3).asOctets()) == expected


def test_damaged_responses_are_malformed_values_never_exceptions() -> None:
    rng = random.Random(7)
    raw = response_bytes(random_varbinds(rng, 20))
    lean, _ = decoder.decode(raw, asn1Spec=LeanResponseMessage())
    good = lean.getComponentByPosition(2).getComponentByPosition(3).asOctets()
    assert isinstance(read_varbinds(good), list)
    for cut in range(len(good)):
        assert isinstance(read_varbinds(good[:cut]), Malformed), cut
    for i in range(len(good)):  # one byte changed anywhere: a value or Malformed, never a crash
        damaged = bytearray(good)
        damaged[i] ^= 0xFF
        got = read_varbinds(bytes(damaged))
        assert isinstance(got, (list, Malformed))
    assert isinstance(read_varbinds(bytes.fromhex("3080" "3004" "0602" "2b06" "0500" "0000")), Malformed)  # indefinite
    assert read_varbinds(bytes.fromhex("3000")) == []


def test_requests_are_the_bytes_pysnmp_sends() -> None:
    oids = [(1, 3, 6, 1, 4, 1, 9, 9, 813, 1, 2, 1, 3, i, 3) for i in range(1, 61)]
    for lean_type, full_type, third in ((LeanGetRequest, v2c.GetRequestPDU, 0), (LeanGetBulkRequest, v2c.GetBulkRequestPDU, 25)):
        full = full_type()
        v2c.apiPDU.set_defaults(full)
        v2c.apiPDU.set_request_id(full, 4242)
        if full_type is v2c.GetBulkRequestPDU:
            v2c.apiBulkPDU.set_non_repeaters(full, 0)
            v2c.apiBulkPDU.set_max_repetitions(full, third)
        v2c.apiPDU.set_varbinds(full, [(v2c.ObjectIdentifier(o), v2c.null) for o in oids])
        lean = lean_type()
        for position, value in enumerate((4242, 0, third)):
            lean.setComponentByPosition(position, value)
        lean.setComponentByPosition(3, lean_v2c.univ.Any(varbind_list(tuple(oids))))
        wire = []
        for pdu in (full, lean):
            msg = v2c.Message()
            v2c.apiMessage.set_defaults(msg)
            v2c.apiMessage.set_community(msg, "sw000")
            v2c.apiMessage.set_pdu(msg, pdu)  # what SnmpDispatcher.send_pdu does
            wire.append(bytes(encoder.encode(msg)))
        assert wire[0] == wire[1]
