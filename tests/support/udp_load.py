"""Bounded ECN-capable UDP load between two namespaces, and a receiver that counts CE marks.

    python -m tests.support.udp_load send DST_ADDR PORT RATE_BYTES_PER_S SECONDS
    python -m tests.support.udp_load recv BIND_ADDR PORT SECONDS RESULT_JSON

The sender paces 1200-byte datagrams marked ECT(0) (like RoCEv2 traffic) at the given rate
for at most SECONDS. The receiver reads the IP TOS byte of every datagram (IP_RECVTOS) and
writes {"packets", "bytes", "ce"} when SECONDS have passed. Both stop on their own.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time

PAYLOAD = 1200
ECT0 = 0x02
CE = 0x03


def send(dst: str, port: int, rate_bytes_per_s: float, seconds: float) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
    data = b"\0" * PAYLOAD
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        due = (now - start) * rate_bytes_per_s
        while sent * PAYLOAD < due:
            with contextlib.suppress(OSError):  # a full socket buffer: the datagram is lost, as on a NIC
                s.sendto(data, (dst, port))
            sent += 1
        time.sleep(0.001)
    s.close()
    return sent


def recv(bind: str, port: int, seconds: float, result: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind((bind, port))
    s.settimeout(0.2)
    deadline = time.monotonic() + seconds
    packets = size = ce = 0
    while time.monotonic() < deadline:
        try:
            data, ancillary, _, _ = s.recvmsg(2048, socket.CMSG_SPACE(1))
        except TimeoutError:
            continue
        packets += 1
        size += len(data)
        for level, kind, value in ancillary:
            if level == socket.IPPROTO_IP and kind == socket.IP_TOS and value and value[0] & 0x03 == CE:
                ce += 1
    with open(result, "w") as out:
        json.dump({"packets": packets, "bytes": size, "ce": ce}, out)


def main(argv: list[str]) -> int:
    if argv[0] == "send":
        print(send(argv[1], int(argv[2]), float(argv[3]), float(argv[4])))
        return 0
    if argv[0] == "recv":
        recv(argv[1], int(argv[2]), float(argv[3]), argv[4])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
