"""GET <url>/healthz every 20 ms on one keep-alive connection, in a process of its own (so the
client that uploads a big body cannot delay the probe), until SIGTERM; then print one JSON list
of latencies in seconds. Run by bench.hardening: `python -m bench.hardening.probe URL`."""

from __future__ import annotations

import json
import signal
import sys
import time

import httpx


def main() -> None:
    url = sys.argv[1]
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    latencies: list[float] = []
    print("ready", flush=True)
    with httpx.Client(timeout=60) as http:
        while not stop:
            start = time.perf_counter()
            http.get(f"{url}/healthz").raise_for_status()
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    main()
