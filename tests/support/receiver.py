"""A real HTTP server on loopback that records webhook deliveries (the scheduler's side)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Answers 500 to the first `fail_first` requests, then 204; records every request."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    failing = len(receiver.requests) <= receiver.fail_first
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(body) for _, body in self.requests]

    def wait_for(self, event: str, count: int = 1, timeout_s: float = 15.0) -> list[tuple[dict[str, str], bytes]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                hits = [(h, b) for h, b in self.requests if json.loads(b)["event"] == event]
            if len(hits) >= count:
                return hits
            time.sleep(0.05)
        raise AssertionError(f"no {event} delivery within {timeout_s} s; got {self.events()}")
