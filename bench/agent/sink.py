"""A stand-in controller for bench/agent: serves a job list with many jobs whose ranks are on
the benchmark's host, their assignments, and swallows telemetry posts, counting records.

It exists so that the agent, not the controller, is what the benchmark measures: the real
controller's own ingest rate is bench/diagnosis/ingest.py's figure. Standard library only,
one asyncio process, HTTP/1.1 keep-alive. `GET /bench/stats` tells the counts.

    python -m bench.agent.sink --port P --jobs 1000 --ranks 8 --channels 4 --qps 2 [--json-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

HOST = "benchhost"


PACKED_TYPE = "application/x-c4-collectives"  # controller.domain.coll_packed


def packed_records(body: bytes) -> int:
    """Records in a packed batch (docs/telemetry-packed.md): walked by their lengths only."""
    off, n = 12 + int.from_bytes(body[8:12], "little"), 0
    while off < len(body):
        off += 2 + int.from_bytes(body[off + 6:off + 8], "little")
        n += 1
    return n


class Sink:
    def __init__(self, jobs: int, ranks: int, channels: int, qps: int, packed: bool = True) -> None:
        self.jobs, self.ranks, self.channels, self.qps = jobs, ranks, channels, qps
        self.packed = packed
        self.records = self.posts = 0
        self.first_us = self.last_us = 0
        job_list = []
        for j in range(jobs):
            rk = [{"rank": r, "host": HOST if r < ranks else "remote", "nic": "mlx5_0"}
                  for r in range(2 * ranks)]
            job_list.append({"name": f"bjob{j}", "status": "planned", "version": 1, "ranks": rk})
        self.job_list = json.dumps({"jobs": job_list}).encode()
        self.openapi = json.dumps({"components": {"schemas": {
            "PeerCreate": {"properties": {"net_us": {}}},
            "FlowCreate": {"properties": {"net_us": {}}},
            "CollectiveBatch": {"properties": {"records": {"minItems": 0}}}}},
            "paths": {"/v1/telemetry/collectives": {"post": {"requestBody": {"content": {
                "application/json": {}, **({PACKED_TYPE: {}} if packed else {})}}}}}}).encode()

    def assignments(self, job: str) -> bytes:
        out = []
        for src in range(self.ranks):
            for ch in range(self.channels):
                for q in range(self.qps):
                    out.append({"src_rank": src, "dst_rank": src + self.ranks, "channel": ch,
                                "qp": q, "udp_sport": 49152 + (src * self.channels + ch) * self.qps + q,
                                "weight": 1 / self.qps, "src_address": "10.0.0.2",
                                "dst_address": "10.0.0.3"})
        return json.dumps({"job": job, "version": 1, "status": "planned",
                           "assignments": out}).encode()

    async def answer(self, method: str, target: str, body: bytes) -> tuple[int, bytes]:
        path, _, query = target.partition("?")
        if method == "POST" and path == "/v1/telemetry/collectives":
            if body[:4] == b"C4CP":
                if not self.packed:
                    return 415, b'{"error": {"code": "unsupported_media_type"}}'
                n = packed_records(body)
            else:
                n = body.count(b'"seq":')
            now = time.time_ns() // 1000
            if n and not self.first_us:
                self.first_us = now
            self.records += n
            self.posts += 1
            self.last_us = now
            return 202, b'{"accepted": %d}' % n
        if path == "/v1/jobs":
            return 200, self.job_list
        if path.startswith("/v1/jobs/") and path.endswith("/assignments"):
            if "after_version" in query:  # nothing ever changes here: hold the long-poll
                wait = float(dict(p.split("=", 1) for p in query.split("&")).get("wait_s", 0))
                await asyncio.sleep(min(wait, 25))
            return 200, self.assignments(path.split("/")[3])
        if path == "/openapi.json":
            return 200, self.openapi
        if path == "/v1/probes/requests":
            return 200, b'{"requests": []}'
        if path == "/bench/stats":
            return 200, json.dumps({"records": self.records, "posts": self.posts,
                                    "first_us": self.first_us, "last_us": self.last_us}).encode()
        return 404, b'{"error": {"code": "not_found"}}'

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                length = 0
                for h in lines[1:]:
                    k, _, v = h.partition(":")
                    if k.lower() == "content-length":
                        length = int(v)
                body = await reader.readexactly(length) if length else b""
                status, data = await self.answer(method, target, body)
                writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (status, len(data), data))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def main(args: Any) -> None:
    sink = Sink(args.jobs, args.ranks, args.channels, args.qps, not args.json_only)
    server = await asyncio.start_server(sink.serve, "127.0.0.1", args.port, limit=1 << 24)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--qps", type=int, default=2)
    p.add_argument("--json-only", action="store_true", help="a controller without the packed form")
    asyncio.run(main(p.parse_args()))
