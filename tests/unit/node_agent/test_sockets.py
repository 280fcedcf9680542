"""The agent's two sockets with real kernel sockets on this host: the shim's datagram socket
(lookups, pushes, telemetry) and the host's fixed data port (the hand-off). No root needed."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from node_agent.cache import AssignmentCache
from node_agent.handoff import HandoffAcceptor, listen_socket
from node_agent.metrics import AgentMetrics
from node_agent.shim_protocol import (
    VERDICT_NO,
    Assign,
    Coll,
    Handoff,
    Lookup,
    Peer,
    decode,
    encode,
    encode_batch,
    encode_hello,
)
from node_agent.shim_server import ShimServer, bind_socket
from node_agent.telemetry import Mapper

RANKS = {0: ("host0", "m"), 1: ("host1", "m")}


def plan(version: int, w0: float) -> dict[str, Any]:
    return {"version": version, "assignments": [
        {"src_rank": 0, "dst_rank": 1, "channel": 0, "qp": q, "udp_sport": 50000 + q,
         "weight": w, "src_address": "10.0.0.2", "dst_address": "10.0.1.2"}
        for q, w in ((0, w0), (1, 1 - w0))]}


def shim_socket() -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(f"\0t11-test-{os.getpid()}-{time.monotonic_ns()}".encode())
    s.settimeout(2)
    return s


async def _serve(tmp_path: Path, body: Any) -> None:
    cache = AssignmentCache("host0")
    cache.update("j", RANKS, plan(1, 0.5))
    metrics = AgentMetrics()
    emitted: list[dict[str, Any]] = []
    server = ShimServer(bind_socket(str(tmp_path / "shim.sock"), 0o666), cache,
                        Mapper(cache.job_for, 0), metrics,
                        lambda recs: emitted.extend(json.loads(r) for r in recs))
    server.start(asyncio.get_running_loop())
    try:
        await body(server, cache, metrics, emitted, str(tmp_path / "shim.sock"))
    finally:
        server.stop()


async def _recv(s: socket.socket) -> Any:
    data = await asyncio.to_thread(s.recv, 4096)
    return decode(data)


def test_lookups_refreshes_and_pushes(tmp_path: Path) -> None:
    async def body(server: ShimServer, cache: AssignmentCache, metrics: AgentMetrics,
                   emitted: list[dict[str, Any]], path: str) -> None:
        shim = shim_socket()
        look = Lookup(5, os.getpid(), 9, "10.0.0.2", "10.0.1.2", 4792, 0, src_rank=0,
                      dst_rank=1, job="j")
        shim.sendto(encode(look), path)
        a = await _recv(shim)
        assert isinstance(a, Assign) and a.req_id == 5 and a.version == 1
        assert [(f.sport, f.weight_ppm) for f in a.flows] == [(50000, 500_000), (50001, 500_000)]
        # the controller moves weights: the live connection hears at once, with req_id 0
        cache.update("j", None, plan(2, 0.8))
        assert server.push_job("j") == 1
        p = await _recv(shim)
        assert isinstance(p, Assign) and p.req_id == 0 and p.version == 2
        assert [f.weight_ppm for f in p.flows] == [800_000, 200_000]
        assert server.push_job("j") == 0  # nothing new
        # a refresh on the current version gets no answer; one on an older version does
        shim.sendto(encode(Lookup(0, os.getpid(), 9, "10.0.0.2", "10.0.1.2", 4792, 0,
                                  version=2, src_rank=0, dst_rank=1, job="j")), path)
        cache.update("j", None, plan(3, 0.1))
        shim.sendto(encode(Lookup(0, os.getpid(), 9, "10.0.0.2", "10.0.1.2", 4792, 0,
                                  version=2, src_rank=0, dst_rank=1, job="j")), path)
        r = await _recv(shim)
        assert isinstance(r, Assign) and r.version == 3 and r.flows[0].weight_ppm == 100_000
        assert metrics.lookups.labels("hit")._value.get() == 1
        assert metrics.pushes._value.get() == 1

    asyncio.run(_serve(tmp_path, body))


def test_telemetry_goes_out_mapped_and_garbage_is_counted(tmp_path: Path) -> None:
    async def body(server: ShimServer, cache: AssignmentCache, metrics: AgentMetrics,
                   emitted: list[dict[str, Any]], path: str) -> None:
        shim = shim_socket()
        c = Coll(0xAB, 3, 100, 10, 20, 0, 2, os.getpid(), "AllReduce",
                 peers=(Peer(1, "send", True, 100, 11, 19, 1),), job_rank=0)
        shim.sendto(encode(c), path)
        shim.sendto(b"C4 nonsense", path)
        # a busy shim batches its records: each message of a BATCH counts as itself
        batch = encode_batch([encode(replace(c, seq=4)), encode(replace(c, seq=5))])
        shim.sendto(batch, path)
        shim.sendto(batch[:-1], path)  # a batch cut short is malformed, wholly
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(emitted) == 3 and server.counts["malformed"] == 2:
                break
        assert [(r["seq"], r["rank"], r["peers"][0]["peer"]) for r in emitted] == [
            (3, 0, 1), (4, 0, 1), (5, 0, 1)]
        server.sync_metrics()
        assert metrics.malformed._value.get() == 2
        assert server.counts["batch"] == 1 and server.counts["coll"] == 3

    asyncio.run(_serve(tmp_path, body))


def test_the_fixed_port_hands_sockets_to_the_process_named_in_the_hello(tmp_path: Path) -> None:
    async def main() -> None:
        key = int.from_bytes(os.urandom(8), "little") | 1
        proc = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # the NCCL process's socket
        proc.bind(f"\0c4-shim-{key:016x}".encode())
        proc.settimeout(5)
        agent_sock = bind_socket(str(tmp_path / "shim.sock"), 0o666)
        listener = listen_socket(0)
        port = listener.getsockname()[1]
        acc = HandoffAcceptor(listener, agent_sock, AgentMetrics())
        acc.start(asyncio.get_running_loop())
        try:
            hello = Handoff(0, 1, 2, uuid=77, key=key, job_rank=3, comm_rank=1, comm_id=9)
            sender = socket.create_connection(("127.0.0.1", port))
            sender.sendall(encode_hello(hello))
            data, fds, _, _ = await asyncio.to_thread(socket.recv_fds, proc, 4096, 1)
            assert decode(data) == hello and len(fds) == 1
            handed = socket.socket(fileno=fds[0])
            handed.sendall(b"C4OK")  # the process answers the sender itself
            assert sender.recv(4) == b"C4OK"
            sender.sendall(b"data")
            assert handed.recv(4) == b"data"
            # a hello naming no process here, and a hello that is not one: refused
            for bad in (encode_hello(Handoff(0, 1, 0, 1, key ^ 2, 0, 0, 0)), b"x" * 48):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(bad)
                s.settimeout(2)
                got = await asyncio.to_thread(s.recv, 8)
                assert got == VERDICT_NO
                s.close()
            handed.close()
            sender.close()
        finally:
            acc.stop()
            agent_sock.close()
            proc.close()

    asyncio.run(main())
