"""Reachability inside one host namespace: ICMP echo from each of the host's port addresses to
every given destination, answered by the destination kernels themselves.

Run in a host's namespace (as root, raw sockets)::

    ip netns exec c4tb-host0 python -m testbed.reach --src 10.1.0.2 --dst 10.2.0.2,10.3.0.2

prints one JSON object `{src: {dst: rtt_ms or null}}`. Each source address gets its own socket
bound to it, so the host's policy routing sends the echo out of that port. Standard library
only; bounded: one echo per pair (and one retry for pairs with no answer), `--timeout-s` each round.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import time

ECHO_REQUEST, ECHO_REPLY = 8, 0


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return int(~total & 0xFFFF)


def echo(ident: int, seq: int) -> bytes:
    body = struct.pack("!d", time.monotonic())
    hdr = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(hdr + body), ident, seq) + body


def _round(socks: dict[str, socket.socket], todo: list[tuple[str, str]], timeout_s: float,
           ident: int) -> dict[tuple[str, str], float]:
    sent: dict[tuple[str, int], tuple[str, float]] = {}
    for seq, (src, dst) in enumerate(todo):
        socks[src].sendto(echo(ident, seq), (dst, 0))
        sent[(src, seq)] = (dst, time.monotonic())
    got: dict[tuple[str, str], float] = {}
    deadline = time.monotonic() + timeout_s
    by_fd = {s.fileno(): src for src, s in socks.items()}
    while len(got) < len(todo) and time.monotonic() < deadline:
        ready, _, _ = select.select(list(socks.values()), [], [], max(0.0, deadline - time.monotonic()))
        for s in ready:
            pkt, (peer, _) = s.recvfrom(2048)
            ihl = (pkt[0] & 0x0F) * 4
            if len(pkt) < ihl + 8:
                continue
            typ, _, _, rid, seq = struct.unpack("!BBHHH", pkt[ihl:ihl + 8])
            src = by_fd[s.fileno()]
            if typ != ECHO_REPLY or rid != ident or (src, seq) not in sent:
                continue
            dst, t0 = sent[(src, seq)]
            if peer == dst:
                got[(src, dst)] = round((time.monotonic() - t0) * 1000, 3)
    return got


def reach(sources: list[str], destinations: list[str], timeout_s: float = 1.0) -> dict[str, dict[str, float | None]]:
    socks = {}
    for src in sources:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.bind((src, 0))
        socks[src] = s
    pairs = [(s, d) for s in sources for d in destinations if s != d]
    ident = os.getpid() & 0xFFFF
    got = _round(socks, pairs, timeout_s, ident)
    missing = [p for p in pairs if p not in got]
    if missing:  # one retry: a first packet may wait on ARP resolution
        got.update(_round(socks, missing, timeout_s, ident))
    for s in socks.values():
        s.close()
    return {src: {dst: got.get((src, dst)) for dst in destinations if dst != src} for src in sources}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="comma-separated local addresses")
    ap.add_argument("--dst", required=True, help="comma-separated destinations")
    ap.add_argument("--timeout-s", type=float, default=1.0)
    a = ap.parse_args()
    print(json.dumps(reach(a.src.split(","), a.dst.split(","), a.timeout_s)))


if __name__ == "__main__":
    main()
