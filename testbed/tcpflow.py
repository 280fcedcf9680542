"""One TCP flow with a chosen 5-tuple, for tests and scenarios (standard library only).

    python -m testbed.tcpflow sink --bind 10.2.0.2 --port 5201 --timeout-s 10
    python -m testbed.tcpflow send --src 10.1.0.2 --sport 50001 --dst 10.2.0.2 --port 5201 --seconds 2

The sink prints `listening` once bound, then, when the sender closes, one JSON line
`{"bytes": ..., "seconds": ..., "mbit_s": ...}` timed from the first byte received to the
last. The sender binds its source port (so the kernels' ECMP hash sees a known 5-tuple) and
sends for `--seconds` or `--bytes`, whichever comes first. Both stop at their timeouts.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time


def sink(bind: str, port: int, timeout_s: float) -> dict[str, float]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(timeout_s)
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(timeout_s)
    total, first, last = 0, 0.0, 0.0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        now = time.monotonic()
        if not first:
            first = now
        last = now
        total += len(data)
    conn.close()
    srv.close()
    secs = max(last - first, 1e-9)
    return {"bytes": total, "seconds": round(secs, 4), "mbit_s": round(total * 8 / secs / 1e6, 3)}


def send(src: str, sport: int, dst: str, port: int, seconds: float, nbytes: int) -> dict[str, float]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((src, sport))
    s.settimeout(max(seconds, 1.0) + 10)
    s.connect((dst, port))
    buf = b"\x5a" * (1 << 16)
    sent, t0 = 0, time.monotonic()
    while sent < nbytes and time.monotonic() - t0 < seconds:
        sent += s.send(buf[: min(len(buf), nbytes - sent)])
    s.close()
    return {"bytes": sent, "seconds": round(time.monotonic() - t0, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    k = sub.add_parser("sink")
    k.add_argument("--bind", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--timeout-s", type=float, default=30.0)
    s = sub.add_parser("send")
    s.add_argument("--src", required=True)
    s.add_argument("--sport", type=int, default=0)
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--seconds", type=float, default=2.0)
    s.add_argument("--bytes", type=int, default=1 << 40)
    a = ap.parse_args()
    if a.mode == "sink":
        out = sink(a.bind, a.port, a.timeout_s)
    else:
        out = send(a.src, a.sport, a.dst, a.port, a.seconds, a.bytes)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
