"""The prober's packets and the parsing of what comes back (the probing itself runs in real
namespaces: tests/agent)."""

from __future__ import annotations

import socket
import struct

from node_agent import prober


def ip_header(src: str, dst: str, proto: int, payload_len: int, ttl: int = 64) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, 0, 0, ttl, proto, 0,
                       socket.inet_aton(src), socket.inet_aton(dst))


def verify_checksum(src: str, dst: str, proto: int, segment: bytes) -> bool:
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!xBH", proto, len(segment))
    return prober._checksum(pseudo + segment) == 0


def icmp(kind: int, hop: str, quoted: bytes) -> bytes:
    body = struct.pack("!BBHI", kind, 0, 0, 0) + quoted
    return ip_header(hop, "10.1.0.2", 1, len(body)) + body


def test_syn_and_datagram_carry_valid_checksums() -> None:
    syn = prober.tcp_syn("10.1.0.2", "10.3.0.2", 50000, 4792, 123)
    assert struct.unpack("!HHIIBB", syn[:14]) == (50000, 4792, 123, 0, 0x50, 0x02)
    assert verify_checksum("10.1.0.2", "10.3.0.2", 6, syn)
    dgram = prober.udp_datagram("10.1.0.2", "10.3.0.2", 50001, 4791, b"\xc4" * 3)
    assert struct.unpack("!HHH", dgram[:6]) == (50001, 4791, 11)
    assert verify_checksum("10.1.0.2", "10.3.0.2", 17, dgram)


def test_time_exceeded_names_the_port_and_the_ttl_it_answers() -> None:
    seq0 = 1000
    syn = prober.tcp_syn("10.1.0.2", "10.3.0.2", 50007, 4792, seq0 + 3)
    quoted = ip_header("10.1.0.2", "10.3.0.2", 6, len(syn), ttl=0) + syn[:8]
    a = prober.parse_icmp(icmp(11, "100.64.0.5", quoted), "10.1.0.2", "10.3.0.2", 6, 4792, seq0)
    assert a == prober.Answer(50007, 3, "100.64.0.5", False)
    # another destination port, another flow: not ours
    assert prober.parse_icmp(icmp(11, "100.64.0.5", quoted), "10.1.0.2", "10.3.0.2", 6, 4791,
                             seq0) is None
    dg = prober.udp_datagram("10.1.0.2", "10.3.0.2", 50009, 4791, b"\xc4" * 2)
    quoted = ip_header("10.1.0.2", "10.3.0.2", 17, len(dg), ttl=0) + dg[:8]
    a = prober.parse_icmp(icmp(11, "198.18.0.3", quoted), "10.1.0.2", "10.3.0.2", 17, 4791, 0)
    assert a == prober.Answer(50009, 2, "198.18.0.3", False)
    # port unreachable from the destination itself: reached
    a = prober.parse_icmp(icmp(3, "10.3.0.2", quoted), "10.1.0.2", "10.3.0.2", 17, 4791, 0)
    assert a is not None and a.final
    assert prober.parse_icmp(b"\x45" + b"\0" * 10, "a", "b", 6, 1, 0) is None


def test_the_destinations_syn_ack_ends_the_port() -> None:
    seq0 = 77
    seg = struct.pack("!HHIIBBHHH", 4792, 50007, 5, seq0 + 4 + 1, 0x50, 0x12, 0, 0, 0)
    pkt = ip_header("10.3.0.2", "10.1.0.2", 6, len(seg)) + seg
    a = prober.parse_tcp_reply(pkt, "10.1.0.2", "10.3.0.2", 4792, seq0)
    assert a == prober.Answer(50007, 4, "10.3.0.2", True)
    other = ip_header("10.9.9.9", "10.1.0.2", 6, len(seg)) + seg
    assert prober.parse_tcp_reply(other, "10.1.0.2", "10.3.0.2", 4792, seq0) is None


def test_a_report_is_the_api_body() -> None:
    r = prober.ProbeResult("10.1.0.2", "10.3.0.2", "tcp", 4792,
                           {50001: ["198.18.0.2", "*"], 50000: ["198.18.0.2", "100.64.0.1"]})
    body = r.report(5)
    assert body["results"] == [{"sport": 50000, "hops": ["198.18.0.2", "100.64.0.1"]},
                               {"sport": 50001, "hops": ["198.18.0.2", "*"]}]
    assert (body["protocol"], body["dst_port"], body["t_us"]) == ("tcp", 4792, 5)
