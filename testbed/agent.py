"""A static stand-in for the node agent: answers the shim's LOOKUPs from a fixed table and
records every telemetry datagram, for the hosts of one job (nccl_shim/FORMAT.md).

It is not c4's node agent (node_agent/, which asks the controller): it is what a testbed run
needs before that, and beside it for baselines: pinned source ports found by probing, K
ephemeral sockets per connection, or no answer at all. One process serves one Unix datagram
socket per host. The shim binds an abstract address, and abstract Unix addresses belong to a
network namespace, so each host's socket is created inside that host's namespace (`setns`
for the moment of `socket()`; `"netns": {host: "/run/netns/<prefix>-<host>"}` in the config);
the process itself runs in the testbed's `mgmt` namespace, so `down` stops it with the rest.

    python -m testbed.agent --config agent.json

`agent.json`: `{"sockets": {"host0": "/run/.../host0.sock"}, "record": "/run/.../telemetry.jsonl",
"table": [{"local": "10.1.0.2", "remote": "10.2.0.2", "conn_index": 0,
"flows": [[50021, 500000], [50022, 500000]]}], "default_flows": 0}`. A lookup whose key is not
in the table gets `default_flows` sockets on ephemeral ports (sport 0) with equal weights, or
`unknown` (the shim's default: one ephemeral socket) when that is 0. Each recorded line is
`{"host": ..., "t_us": ..., "msg": <shim_protocol.to_json>}`. Prints `ready` once every socket
is bound; SIGTERM or SIGINT ends it after flushing the record.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node_agent import shim_protocol as sp

Key = tuple[str, str, int]
CLONE_NEWNET = 0x40000000


@contextmanager
def in_netns(path: str | None) -> Iterator[None]:
    """Run the body in another network namespace (this thread), then come back."""
    if not path:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/ns/net") as home, open(path) as there:
        if libc.setns(there.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
        try:
            yield
        finally:
            if libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


class StaticAgent:
    def __init__(self, config: dict[str, Any]) -> None:
        self.table: dict[Key, tuple[sp.Flow, ...]] = {}
        for e in config.get("table", []):
            key = (e["local"], e["remote"], int(e["conn_index"]))
            self.table[key] = tuple(sp.Flow(int(s), int(w)) for s, w in e["flows"])
        self.default_flows = int(config.get("default_flows", 0))
        self.sockets: dict[str, socket.socket] = {}
        netns = config.get("netns", {})
        for host, path in config["sockets"].items():
            Path(path).unlink(missing_ok=True)
            with in_netns(netns.get(host)):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(path)
            s.setblocking(False)
            self.sockets[host] = s
        self.record = open(config["record"], "a", buffering=1) if config.get("record") else None  # noqa: SIM115
        self.lookups = self.malformed = 0

    def answer(self, req: sp.Lookup) -> sp.Assign:
        flows = self.table.get((req.local, req.remote, req.conn_index))
        if flows is None and self.default_flows > 0:
            ppm = sp.Assign.weights_to_ppm([1 / self.default_flows] * self.default_flows)
            flows = tuple(sp.Flow(0, w) for w in ppm)
        return sp.Assign.answer(req, version=1, flows=flows or ())

    def handle(self, host: str, data: bytes, addr: Any) -> None:
        if len(data) > 3 and data[3] == sp.T_BATCH:  # several records in one datagram
            parts = sp.split_batch(data)
            if parts is None:
                self.malformed += 1
            for part in parts or ():
                self.handle(host, part, addr)
            return
        msg = sp.decode(data)
        if isinstance(msg, sp.Malformed):
            self.malformed += 1
            return
        if isinstance(msg, sp.Lookup):
            self.lookups += 1
            if msg.req_id == 0 and (msg.local, msg.remote, msg.conn_index) not in self.table:
                return  # a refresh of a default connection: nothing to update
            with contextlib.suppress(OSError):  # the shim went away; it never waits on us
                self.sockets[host].sendto(sp.encode(self.answer(msg)), addr)
            return
        if self.record and isinstance(msg, sp.Coll | sp.Conn | sp.Stats):
            line = {"host": host, "t_us": time.time_ns() // 1000, "msg": sp.to_json(msg)}
            self.record.write(json.dumps(line) + "\n")

    def serve(self, stop_after_s: float) -> None:
        sel = selectors.DefaultSelector()
        for host, s in self.sockets.items():
            sel.register(s, selectors.EVENT_READ, host)
        running = True

        def stop(*_: Any) -> None:
            nonlocal running
            running = False

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print("ready", flush=True)
        deadline = time.monotonic() + stop_after_s
        while running and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.2):
                s = self.sockets[key.data]
                while True:
                    try:
                        data, addr = s.recvfrom(8192)  # datagrams are 8192 bytes at most (a BATCH)
                    except BlockingIOError:
                        break
                    self.handle(key.data, data, addr)
        for sock in self.sockets.values():
            path = sock.getsockname()
            sock.close()
            if isinstance(path, str) and path:
                Path(path).unlink(missing_ok=True)
        if self.record:
            self.record.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--max-s", type=float, default=3600.0, help="stop after this long whatever happens")
    a = ap.parse_args()
    config = json.loads(Path(a.config).read_text())
    os.umask(0o000)  # shims in any namespace, as any user, may write to the sockets
    StaticAgent(config).serve(a.max_s)


if __name__ == "__main__":
    main()
