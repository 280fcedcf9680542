"""The host's fixed data port: accept, read the hello, hand the socket to its NCCL process.

Switches hash the whole 5-tuple, so every data flow's destination port must be one port the
controller knows (API.md: the fabric's ``hashing.dst_port``), however many NCCL processes a
host runs. The agent therefore owns that port (``--shim-port``, default 4792) on every
address of the host. Each new socket starts with the sender's 48-byte hello (FORMAT.md
"Hello"), which names the receiving process by its key; the agent reads the hello and passes
the socket, with a HANDOFF datagram carrying the hello, to that process's abstract Unix
address ``c4-shim-<key>`` (SCM_RIGHTS). The process then answers the sender itself
("C4OK"). When the process is gone, or the hello is not one, the agent answers "C4NO" and
closes; the sender then connects to the process's own port instead.

At most `MAX_PENDING` sockets wait for their hello; beyond that the listening socket is not
read, so new connections wait in the kernel's backlog instead of being closed. A hello must
arrive within `HELLO_TIMEOUT_S`.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import logging
import socket
import time
from dataclasses import dataclass, field

from node_agent.metrics import AgentMetrics
from node_agent.shim_protocol import HELLO_LEN, VERDICT_NO, Handoff, Malformed, decode_hello, encode

log = logging.getLogger("c4.agent.handoff")
MAX_PENDING = 4096
HELLO_TIMEOUT_S = 10.0
RETRY_S = 0.005  # the process's queue was full: try again this soon ...
RETRY_FOR_S = 0.5  # ... for this long


@dataclass
class _Pending:
    sock: socket.socket
    since: float
    buf: bytearray = field(default_factory=bytearray)


def listen_socket(port: int) -> socket.socket:
    """A listener on `port` of every address: dual-stack where IPv6 exists, else IPv4."""
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        addr: tuple[str, int] = ("::", port)
    except OSError:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        addr = ("0.0.0.0", port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(addr)
    except OSError:
        if s.family != socket.AF_INET6:
            s.close()
            raise
        s.close()  # IPv6 present but unusable (disabled): IPv4 only
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
    s.listen(4096)
    s.setblocking(False)
    return s


class HandoffAcceptor:
    def __init__(self, listener: socket.socket, shim_sock: socket.socket,
                 metrics: AgentMetrics) -> None:
        self.listener, self.shim_sock, self.metrics = listener, shim_sock, metrics
        self.pending: dict[int, _Pending] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._sweeper: asyncio.TimerHandle | None = None
        self._handed = metrics.handoffs.labels("handed")
        self._refused = metrics.handoffs.labels("refused")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._listen(True)
        self._sweeper = loop.call_later(1.0, self._sweep)

    def stop(self) -> None:
        self._listen(False)
        if self._sweeper:
            self._sweeper.cancel()
        for p in self.pending.values():
            p.sock.close()
        self.pending.clear()
        self.listener.close()

    def _listen(self, on: bool) -> None:
        assert self._loop is not None
        if on and not self._reading:
            self._loop.add_reader(self.listener.fileno(), self._accept)
        elif not on and self._reading:
            self._loop.remove_reader(self.listener.fileno())
        self._reading = on

    def _accept(self) -> None:
        assert self._loop is not None
        while len(self.pending) < MAX_PENDING:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("accept: %s", e)
                return
            conn.setblocking(False)
            self.pending[conn.fileno()] = _Pending(conn, time.monotonic())
            self._loop.add_reader(conn.fileno(), self._read, conn.fileno())
        self._listen(False)  # full: the rest wait in the kernel's backlog

    def _forget(self, fd: int) -> _Pending | None:
        p = self.pending.pop(fd, None)
        if p is not None and self._loop is not None:
            self._loop.remove_reader(fd)
            if not self._reading and len(self.pending) < MAX_PENDING:
                self._listen(True)
        return p

    def _read(self, fd: int) -> None:
        p = self.pending.get(fd)
        if p is None:
            return
        try:
            data = p.sock.recv(HELLO_LEN - len(p.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._forget(fd)
            p.sock.close()
            return
        p.buf += data
        if len(p.buf) < HELLO_LEN:
            return
        self._forget(fd)
        hello = decode_hello(bytes(p.buf))
        if isinstance(hello, Malformed):
            self._refuse(p.sock, hello.reason)
            return
        self._hand(p.sock, hello, time.monotonic())

    def _hand(self, sock: socket.socket, hello: Handoff, first: float) -> None:
        try:
            # sendmsg, not socket.send_fds: Python 3.11's send_fds drops its address argument.
            self.shim_sock.sendmsg([encode(hello)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                      array.array("i", [sock.fileno()]))],
                                   0, hello.socket_name)
        except (BlockingIOError, InterruptedError):
            if time.monotonic() - first < RETRY_FOR_S and self._loop is not None:
                self._loop.call_later(RETRY_S, self._hand, sock, hello, first)
                return
            self._refuse(sock, "the process does not read its socket")
            return
        except OSError as e:
            reason = "no such process" if e.errno in (errno.ECONNREFUSED, errno.ENOENT) else str(e)
            self._refuse(sock, reason)
            return
        sock.close()  # the process holds its own copy now
        self._handed.inc()

    def _refuse(self, sock: socket.socket, why: str) -> None:
        log.debug("refusing a data socket: %s", why)
        with contextlib.suppress(OSError):
            sock.send(VERDICT_NO)
        sock.close()
        self._refused.inc()

    def _sweep(self) -> None:
        now = time.monotonic()
        for fd, p in list(self.pending.items()):
            if now - p.since > HELLO_TIMEOUT_S:
                self._forget(fd)
                p.sock.close()
        if self._loop is not None:
            self._sweeper = self._loop.call_later(1.0, self._sweep)
