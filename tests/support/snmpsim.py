"""snmpsim for the switch agent's tests and benchmark: data files whose counters grow at
known rates (and Counter32s that wrap), and the simulator as a subprocess.

snmpsim (LeXtudio, same pysnmp 7 as the agent) serves one `.snmprec` file per community
(the file's base name; for SNMPv3 it is the context name). A counter written as
`OID|70:numeric|rate=R,initial=I` reads `I + R * (seconds since the simulator started)`, so
the rate the agent must measure is `R` per second; `65:numeric|...,wrap=1,max=4294967296`
is a Counter32 that wraps exactly at 2**32. Restarting the simulator restarts sysUpTime
and every counter: a switch reboot.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

V3_USER, V3_AUTH, V3_PRIV = "c4test", "c4-auth-key-1", "c4-priv-key-1"


@dataclass(frozen=True)
class PortRates:
    """Per-second growth of one interface's counters (bytes, packets, events)."""

    index: int
    name: str
    tx_bytes: float = 0.0
    rx_bytes: float = 0.0
    tx_pkts: float = 0.0
    rx_pkts: float = 0.0
    discards: float = 0.0
    pfc_rx: dict[int, float] = field(default_factory=dict)  # priority -> pause frames received/s
    pfc_tx: dict[int, float] = field(default_factory=dict)
    ecn: float = 0.0  # marked packets/s (arista: split over two egress queues)
    queue_drops: float = 0.0  # mellanox: WRED discards/s (split over two traffic classes)


def _c64(oid: str, rate: float, initial: int = 1000) -> str:
    return f"{oid}|70:numeric|rate={rate:g},initial={initial}"


def _c32(oid: str, rate: float, initial: int = 0) -> str:
    return f"{oid}|65:numeric|rate={rate:g},initial={initial},wrap=1,max=4294967296"


def switch_records(profile: str, name: str, ports: Iterable[PortRates], c32_initial: int = 0) -> list[str]:
    """Every record of one simulated switch of `profile` (sonic, nexus, arista, mellanox,
    ieee8021, ifmib), sorted by OID as snmpsim requires."""
    recs = ["1.3.6.1.2.1.1.1.0|4|c4 test switch " + name, "1.3.6.1.2.1.1.3.0|67:numeric|rate=100,initial=0",
            "1.3.6.1.2.1.1.5.0|4|" + name]
    for p in ports:
        i = p.index
        recs += [f"1.3.6.1.2.1.2.2.1.2.{i}|4|{p.name}", f"1.3.6.1.2.1.31.1.1.1.1.{i}|4|{p.name}",
                 _c64(f"1.3.6.1.2.1.31.1.1.1.6.{i}", p.rx_bytes), _c64(f"1.3.6.1.2.1.31.1.1.1.10.{i}", p.tx_bytes),
                 _c64(f"1.3.6.1.2.1.31.1.1.1.7.{i}", p.rx_pkts), _c64(f"1.3.6.1.2.1.31.1.1.1.11.{i}", p.tx_pkts),
                 _c32(f"1.3.6.1.2.1.2.2.1.13.{i}", p.discards), _c32(f"1.3.6.1.2.1.2.2.1.19.{i}", p.discards)]
        if profile in ("sonic", "nexus"):
            for prio in range(8):
                recs += [_c64(f"1.3.6.1.4.1.9.9.813.1.2.1.2.{i}.{prio}", p.pfc_tx.get(prio, 0.0), 0),
                         _c64(f"1.3.6.1.4.1.9.9.813.1.2.1.3.{i}.{prio}", p.pfc_rx.get(prio, 0.0), 0)]
        elif profile == "arista":
            for prio in range(8):
                recs += [_c64(f"1.3.6.1.4.1.30065.3.11.1.1.1.3.{i}.{prio}", p.pfc_tx.get(prio, 0.0), 0),
                         _c64(f"1.3.6.1.4.1.30065.3.11.1.1.1.4.{i}.{prio}", p.pfc_rx.get(prio, 0.0), 0)]
            for queue in (0, 3):
                recs.append(_c64(f"1.3.6.1.4.1.30065.3.13.1.9.1.4.{i}.{queue}", p.ecn / 2, 0))
        elif profile == "mellanox":
            for prio in range(8):
                recs += [_c64(f"1.3.6.1.4.1.33049.15.1.2.1.3.{i}.{prio}", p.pfc_rx.get(prio, 0.0), 0),
                         _c64(f"1.3.6.1.4.1.33049.15.1.2.1.5.{i}.{prio}", p.pfc_tx.get(prio, 0.0), 0)]
            for tc in (0, 3):
                recs.append(_c64(f"1.3.6.1.4.1.33049.15.1.4.1.9.{i}.{tc}", p.queue_drops / 2, 0))
        elif profile == "ieee8021":
            # Counter32, per port: start near the top so they wrap within seconds.
            recs += [_c32(f"1.3.111.2.802.1.1.21.1.1.1.2.{i}", sum(p.pfc_tx.values()), c32_initial),
                     _c32(f"1.3.111.2.802.1.1.21.1.1.1.3.{i}", sum(p.pfc_rx.values()), c32_initial)]
    recs.sort(key=lambda r: tuple(int(x) for x in r.split("|", 1)[0].split(".")))
    return recs


def write_switch(data_dir: Path, community: str, records: list[str]) -> None:
    (data_dir / f"{community}.snmprec").write_text("\n".join(records) + "\n")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def responder() -> str | None:
    """The snmpsim command responder next to this Python, or on PATH."""
    here = Path(sys.executable).parent / "snmpsim-command-responder"
    return str(here) if here.exists() else shutil.which("snmpsim-command-responder")


class Snmpsim:
    """One snmpsim process on 127.0.0.1:`port` serving every file in `data_dir`."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_udp_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.cache_dir = data_dir.parent / f"{data_dir.name}-cache"
        self.started_at = 0.0

    def start(self, community_probe: str, timeout_s: float = 30.0) -> Snmpsim:
        exe = responder()
        if exe is None:
            raise RuntimeError("snmpsim-command-responder is not installed (pip install snmpsim pysmi)")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}
        self.proc = subprocess.Popen(
            [exe, f"--data-dir={self.data_dir}", f"--cache-dir={self.cache_dir}",
             f"--agent-udpv4-endpoint=127.0.0.1:{self.port}", "--log-level=error",
             f"--v3-user={V3_USER}", f"--v3-auth-key={V3_AUTH}", "--v3-auth-proto=SHA",
             f"--v3-priv-key={V3_PRIV}", "--v3-priv-proto=AES"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.started_at = time.time()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"snmpsim exited at start: {err[-2000:]}")
            if self.answers(community_probe):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"snmpsim did not answer on port {self.port} within {timeout_s} s")

    def answers(self, community: str) -> bool:
        """net-snmp's snmpget (Debian's `snmp` package) got an answer for sysUpTime.0."""
        done = subprocess.run(["snmpget", "-v2c", "-c", community, "-t", "0.5", "-r", "0", "-On",
                               f"127.0.0.1:{self.port}", "1.3.6.1.2.1.1.3.0"],
                              capture_output=True, text=True, check=False)
        return done.returncode == 0 and "Timeticks" in done.stdout

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def cpu_s(self) -> float:
        """User + system CPU seconds the simulator has used (Linux /proc)."""
        if self.proc is None:
            return 0.0
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
