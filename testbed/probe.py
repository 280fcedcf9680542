"""TTL-limited TCP SYN probes: which switch does a flow's 5-tuple reach at hop N?

Run in a host's namespace (root, raw sockets)::

    ip netns exec c4tb-host0 python -m testbed.probe --src 10.1.0.2 --dst 10.3.0.2 \
        --dport 4792 --ttl 2 --sports 50000-50063

prints `{"50000": "100.64.0.5", ...}`: the source address of the ICMP time-exceeded reply to
the SYN from that source port, i.e. the hop that packet reached when its TTL ran out. The SYN
carries the data flows' own protocol and destination port (the shim's listen port), so the
kernels hash it exactly as they hash the data. Standard library only; every sport is probed
once, then those without a reply once more; bounded by `--timeout-s` per round.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import time

from testbed.reach import checksum

TIME_EXCEEDED = 11


def syn(src: str, dst: str, sport: int, dport: int, seq: int) -> bytes:
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 65535, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(hdr))
    return hdr[:16] + struct.pack("!H", checksum(pseudo + hdr)) + hdr[18:]


def probe(src: str, dst: str, dport: int, ttl: int, sports: list[int],
          timeout_s: float = 1.0) -> dict[int, str | None]:
    tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
    tx.bind((src, 0))
    rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    rx.bind((src, 0))
    hops: dict[int, str | None] = {}
    todo = list(sports)
    for _ in range(2):
        want = set(todo)
        for sport in todo:
            tx.sendto(syn(src, dst, sport, dport, 0x63340000 + sport), (dst, 0))
        deadline = time.monotonic() + timeout_s
        while want and time.monotonic() < deadline:
            ready, _, _ = select.select([rx], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            pkt, (hop, _) = rx.recvfrom(2048)
            ihl = (pkt[0] & 0x0F) * 4
            if len(pkt) < ihl + 8 + 20 + 4 or pkt[ihl] != TIME_EXCEEDED:
                continue
            inner = pkt[ihl + 8:]
            iihl = (inner[0] & 0x0F) * 4
            if socket.inet_ntoa(inner[16:20]) != dst or inner[9] != socket.IPPROTO_TCP:
                continue
            sport, dp = struct.unpack("!HH", inner[iihl:iihl + 4])
            if dp == dport and sport in want:
                hops[sport] = hop
                want.discard(sport)
        todo = sorted(want)
        if not todo:
            break
    tx.close()
    rx.close()
    return {s: hops.get(s) for s in sports}


def parse_ports(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--dport", type=int, required=True)
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--sports", required=True, help="e.g. 50000-50063,50100")
    ap.add_argument("--timeout-s", type=float, default=1.0)
    a = ap.parse_args()
    result = probe(a.src, a.dst, a.dport, a.ttl, parse_ports(a.sports), a.timeout_s)
    print(json.dumps({str(k): v for k, v in result.items()}))


if __name__ == "__main__":
    main()
