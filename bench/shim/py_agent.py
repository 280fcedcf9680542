"""A minimal node agent for the set-up benchmark: answers every lookup with one flow on a port
derived from the connection index, using node_agent.shim_protocol (the codec the real agent
uses), so the measured lookup latency includes a Python agent's decode/encode. Not the node
agent: no controller, no telemetry batching. Usage: python py_agent.py <socket path>."""

from __future__ import annotations

import os
import socket
import sys

from node_agent.shim_protocol import Assign, Flow, Lookup, decode, encode


def main(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    print("ready", flush=True)
    while True:
        data, peer = sock.recvfrom(2048)
        msg = decode(data)
        if isinstance(msg, Lookup) and msg.req_id and peer:
            port = 42000 + msg.conn_index % 2000
            sock.sendto(encode(Assign.answer(msg, 1, (Flow(port, 1_000_000),))), peer)


if __name__ == "__main__":
    main(sys.argv[1])
