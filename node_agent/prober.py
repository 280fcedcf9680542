"""Path probes: which hops does a flow's 5-tuple cross, for each candidate source port?

For a (source address, destination address) pair the controller names, this sends packets of
the data flows' own protocol and destination port (UDP to 4791 for RoCEv2, TCP SYNs to the
shim's port for the TCP transport), from each source port, with the IP TTL set to 1, 2, ...:
the switch where the TTL runs out answers with an ICMP time-exceeded whose source names it,
and the ICMP message quotes our packet's first bytes: its ports name the source port, and the
TTL is written into the packet too (a SYN's sequence number, a datagram's length), so a late
answer is never taken for the next TTL's. Switches hash the whole 5-tuple, so only such probes predict where data goes.

Packets are built here and sent on raw sockets (root or CAP_NET_RAW), so a probe leaves no
socket behind in the kernel: a SYN probe is not a connection, and the source ports the data
will bind are not held in TIME_WAIT. Sending is paced by a token bucket (``rate_pps``). All
ports are probed at one TTL at a time; a round ends when every port still travelling has an
answer, or after ``timeout_s``. A port is done when the answer comes from the destination
(TCP: its SYN-ACK or RST; UDP: ICMP port unreachable), or at ``max_ttl``. A TTL nobody
answered is reported as ``"*"``, which the controller cannot map, so the port's path stays
unknown rather than guessed.

IPv4 only (the fabric's host port addresses in every topology c4 ships).
"""

from __future__ import annotations

import errno
import random
import select
import socket
import struct
import time
from dataclasses import dataclass, field

ICMP_TIME_EXCEEDED, ICMP_UNREACH = 11, 3
NO_ANSWER = "*"


class ProbeError(Exception):
    """The probe could not run at all (no permission for raw sockets, a bad address)."""


@dataclass
class ProbeResult:
    src_address: str
    dst_address: str
    protocol: str
    dst_port: int
    hops: dict[int, list[str]] = field(default_factory=dict)  # sport -> hop per TTL
    reached: set[int] = field(default_factory=set)
    packets: int = 0
    seconds: float = 0.0

    def report(self, t_us: int) -> dict[str, object]:
        """The body of ``POST /v1/probes`` (API.md)."""
        return {"src_address": self.src_address, "dst_address": self.dst_address,
                "protocol": self.protocol, "dst_port": self.dst_port, "t_us": t_us,
                "results": [{"sport": s, "hops": h} for s, h in sorted(self.hops.items())]}


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_syn(src: str, dst: str, sport: int, dport: int, seq: int) -> bytes:
    """A TCP SYN header (no options) with its checksum over the IPv4 pseudo-header."""
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!xBH", 6, len(hdr))
    return hdr[:16] + struct.pack("!H", _checksum(pseudo + hdr)) + hdr[18:]


def udp_datagram(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    hdr = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!xBH", 17, 8 + len(payload))
    csum = _checksum(pseudo + hdr + payload) or 0xFFFF
    return hdr[:6] + struct.pack("!H", csum) + payload


@dataclass(frozen=True)
class Answer:
    sport: int
    ttl: int
    hop: str
    final: bool  # the destination itself answered


def parse_icmp(packet: bytes, src: str, dst: str, proto: int, dport: int,
               seq0: int) -> Answer | None:
    """An ICMP reply (IP header included, as a raw socket returns it) to one of our probes."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    hop = socket.inet_ntoa(packet[12:16])
    icmp = packet[ihl:]
    if len(icmp) < 8 + 20 + 4 or icmp[0] not in (ICMP_TIME_EXCEEDED, ICMP_UNREACH):
        return None
    inner = icmp[8:]
    qihl = (inner[0] & 0x0F) * 4
    if (inner[9] != proto or socket.inet_ntoa(inner[12:16]) != src or
            socket.inet_ntoa(inner[16:20]) != dst or len(inner) < qihl + 4):
        return None
    if len(inner) < qihl + 8:
        return None
    sport, qdport, word = struct.unpack_from("!HHI", inner, qihl)
    if qdport != dport:
        return None
    # TCP: the quoted sequence number is seq0 + TTL; UDP: the quoted length is 8 + TTL.
    ttl = (word - seq0) & 0xFFFFFFFF if proto == socket.IPPROTO_TCP else (word >> 16) - 8
    return Answer(sport, ttl, hop, icmp[0] == ICMP_UNREACH and hop == dst)


def parse_tcp_reply(packet: bytes, src: str, dst: str, dport: int, seq0: int) -> Answer | None:
    """The destination's SYN-ACK or RST to one of our SYNs (IP header included)."""
    if len(packet) < 40:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if socket.inet_ntoa(packet[12:16]) != dst or socket.inet_ntoa(packet[16:20]) != src:
        return None
    their, ours, _, ack, _, flags = struct.unpack_from("!HHIIBB", packet, ihl)
    if their != dport or not flags & 0x10:  # an ACK of our SYN (SYN-ACK, or RST-ACK)
        return None
    return Answer(ours, (ack - 1 - seq0) & 0xFFFFFFFF, dst, True)


class _Bucket:
    def __init__(self, rate: float) -> None:
        self.rate, self.tokens, self.t = rate, min(rate, 64.0), time.monotonic()

    def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(max(self.rate / 10, 1.0), self.tokens + (now - self.t) * self.rate)
            self.t = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            time.sleep((1 - self.tokens) / self.rate)


def probe(src: str, dst: str, protocol: str, dst_port: int, sports: list[int], max_ttl: int = 8,
          rate_pps: float = 2000.0, timeout_s: float = 0.3) -> ProbeResult:
    """Probe every port in `sports` from `src` to `dst` (blocking; run it off the loop)."""
    if protocol not in ("udp", "tcp"):
        raise ProbeError(f"protocol {protocol!r}: want udp or tcp")
    proto = socket.IPPROTO_TCP if protocol == "tcp" else socket.IPPROTO_UDP
    try:
        tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)
        rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except PermissionError as e:
        raise ProbeError("raw sockets need root or CAP_NET_RAW") from e
    except OSError as e:
        raise ProbeError(f"raw socket: {e}") from e
    result = ProbeResult(src, dst, protocol, dst_port)
    t0 = time.monotonic()
    try:
        try:
            tx.bind((src, 0))
        except OSError as e:
            raise ProbeError(f"{src} is not an address of this host ({e.strerror})") from e
        for s in (tx, rx):
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        bucket = _Bucket(rate_pps)
        travelling = list(dict.fromkeys(sports))
        for p in travelling:
            result.hops[p] = []
        seq0 = random.getrandbits(32)
        for ttl in range(1, max_ttl + 1):
            if not travelling:
                break
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
            for p in travelling:
                pkt = (tcp_syn(src, dst, p, dst_port, (seq0 + ttl) & 0xFFFFFFFF) if proto == 6
                       else udp_datagram(src, dst, p, dst_port, b"\xc4" * ttl))
                bucket.take()
                _send(tx, pkt, dst)
                result.packets += 1
            answers = _collect(tx, rx, proto, src, dst, dst_port, set(travelling), timeout_s,
                               seq0, ttl)
            done = []
            for p in travelling:
                a = answers.get(p)
                result.hops[p].append(a.hop if a else NO_ANSWER)
                if a and (a.final or a.hop == dst):
                    result.reached.add(p)
                    done.append(p)
            travelling = [p for p in travelling if p not in done]
    finally:
        tx.close()
        rx.close()
    result.seconds = time.monotonic() - t0
    return result


def _send(tx: socket.socket, pkt: bytes, dst: str) -> None:
    for _ in range(100):
        try:
            tx.sendto(pkt, (dst, 0))
            return
        except BlockingIOError:
            select.select([], [tx], [], 0.01)
        except OSError as e:
            if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                time.sleep(0.001)
                continue
            raise ProbeError(f"send to {dst}: {e}") from e


def _collect(tx: socket.socket, rx: socket.socket, proto: int, src: str, dst: str, dport: int,
             waiting: set[int], timeout_s: float, seq0: int, ttl: int) -> dict[int, Answer]:
    """Answers to this round's probes, first per port, until all came or `timeout_s`."""
    got: dict[int, Answer] = {}
    deadline = time.monotonic() + timeout_s
    socks = [rx, tx] if proto == socket.IPPROTO_TCP else [rx]
    while waiting - got.keys():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(socks, [], [], left)
        for s in ready:
            while True:
                try:
                    packet = s.recv(65535)
                except (BlockingIOError, InterruptedError):
                    break
                a = (parse_icmp(packet, src, dst, proto, dport, seq0) if s is rx
                     else parse_tcp_reply(packet, src, dst, dport, seq0))
                if a and a.ttl == ttl and a.sport in waiting and a.sport not in got:
                    got[a.sport] = a
    return got
