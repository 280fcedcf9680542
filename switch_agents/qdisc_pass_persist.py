"""net-snmp `pass_persist` extension: each interface's ECN marks and egress queue drops.

Linux switches (the testbed's namespaces) run Debian's snmpd, whose IF-MIB has octets,
packets and discards but nothing on ECN. This program, started by snmpd, serves a small table
under net-snmp's playpen subtree (`1.3.6.1.4.1.8072.9999.9999.13`, the `linux` profile's
`C4_QDISC_BASE`), indexed by ifIndex (net-snmp's ifIndex on Linux is the kernel's):

    BASE.1.1.1.<ifIndex>  c4QdiscIfName     STRING     the interface's name
    BASE.1.1.2.<ifIndex>  c4QdiscKind       STRING     its root qdisc's kind ("htb", "noqueue", ...)
    BASE.1.1.3.<ifIndex>  c4QdiscEcnMarked  Counter64  packets marked CE on the way out
    BASE.1.1.4.<ifIndex>  c4QdiscDrops      Counter64  packets its root qdisc dropped
    BASE.1.1.5.<ifIndex>  c4QdiscBacklog    Gauge32    bytes queued in its root qdisc now
    BASE.1.1.6.<ifIndex>  c4QdiscTxOctets   Counter64  bytes sent (the kernel's own counter, now)
    BASE.1.1.7.<ifIndex>  c4QdiscTxPkts     Counter64  packets sent (the kernel's own counter, now)

Why columns 6 and 7 repeat IF-MIB's ifHCOutOctets and ifHCOutUcastPkts: snmpd refreshes its
interface table only every few seconds (net-snmp's cache), while this table is read fresh;
with a poll every second most samples saw marks but no new packets, and the next one three
seconds' packets at once, so the marked fraction and the rate of a sample were noise (seen on
the testbed: a link throttled to a quarter measured at 0.08 of its capacity, so "degraded").
Read from `ip -s -j link` at the same moment as the marks, they make a sample's fraction and
rate consistent; the `linux` profile takes its `tx_bytes` and `tx_pkts` from here.

ECN marks come from two kernel sources, summed per interface:
- qdiscs that mark (`tc -s -j qdisc show`): RED and CHOKe report `marked`; CoDel, FQ-CoDel,
  PIE, FQ-PIE, DualPI2 and CAKE (per tin) `ecn_mark`; FQ `ce_mark`;
- nftables rules that set CE (`nft -j list ruleset`): a rule matching `oifname` that mangles
  `ip ecn` / `ip6 ecn` to `ce` with a counter after the mangle (inline, or a named counter
  object) counts the packets it marked, e.g. `oifname "swp1" ip ecn ect0 limit rate over
  100 mbytes/second ip ecn set ce counter` — a phantom-queue marker, CE above a rate, for
  kernels built without sch_red or codel; the testbed's markers are of this kind.
Reading nftables needs CAP_NET_ADMIN (run snmpd as root, as the testbed does); qdisc stats do
not. Values are cached for `--cache-s` (default 1 s), as snmpd walks ask once per row.

snmpd.conf::

    pass_persist .1.3.6.1.4.1.8072.9999.9999.13 /usr/bin/python3 /path/to/qdisc_pass_persist.py

Standard library only, so any python3 runs it (also installed as `c4-qdisc-pass-persist`).
`--dump` prints the table once and exits.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

BASE = (1, 3, 6, 1, 4, 1, 8072, 9999, 9999, 13)
BASE_TEXT = ".".join(map(str, BASE))
ENTRY = (*BASE, 1, 1)
MARK_KEYS = ("marked", "ecn_mark", "ce_mark")
Row = tuple[tuple[int, ...], str, str]


def _marks(node: Any) -> int:
    """Sum of the ECN-mark counters anywhere in a qdisc's JSON (CAKE nests them per tin)."""
    if isinstance(node, dict):
        total = sum(int(v) for k, v in node.items() if k in MARK_KEYS and isinstance(v, int))
        return total + sum(_marks(v) for k, v in node.items() if isinstance(v, (dict, list)) and k != "options")
    if isinstance(node, list):
        return sum(_marks(v) for v in node)
    return 0


def parse_tc(text: str) -> dict[str, dict[str, Any]]:
    """`tc -s -j qdisc show` → per device: root kind, marks (all its qdiscs), drops and
    backlog (its root qdisc, which counts its children's drops too)."""
    out: dict[str, dict[str, Any]] = {}
    for q in json.loads(text or "[]"):
        dev = q.get("dev")
        if not dev:
            continue
        row = out.setdefault(dev, {"kind": "", "marked": 0, "drops": 0, "backlog": 0})
        row["marked"] += _marks(q)
        if q.get("root"):
            row["kind"] = str(q.get("kind", ""))
            row["drops"] = int(q.get("drops", 0))
            row["backlog"] = int(q.get("backlog", 0))
    return out


def _oifnames(right: Any) -> list[str]:
    if isinstance(right, str):
        return [right]
    if isinstance(right, dict) and "set" in right:
        return [x for x in right["set"] if isinstance(x, str)]
    return []


def parse_nft(text: str) -> dict[str, int]:
    """`nft -j list ruleset` → per output interface: packets that rules marked CE. A rule's
    counter after its CE mangle counts them, inline (`counter`) or named (`counter name X`,
    as the testbed's markers do)."""
    items = [i for i in json.loads(text or "{}").get("nftables", []) if isinstance(i, dict)]
    named = {(c.get("family"), c.get("table"), c.get("name")): int(c.get("packets", 0))
             for c in (i.get("counter") for i in items) if isinstance(c, dict)}
    out: dict[str, int] = {}
    for item in items:
        rule = item.get("rule")
        if not rule:
            continue
        devices: list[str] = []
        marking = False
        counted = 0
        for e in rule.get("expr", []):
            match = e.get("match")
            if match and match.get("op", "==") == "==" and match.get("left", {}).get("meta", {}).get("key") == "oifname":
                devices += _oifnames(match.get("right"))
            mangle = e.get("mangle")
            if mangle:
                payload = mangle.get("key", {}).get("payload", {})
                if payload.get("field") == "ecn" and payload.get("protocol") in ("ip", "ip6") \
                        and mangle.get("value") in ("ce", 3):
                    marking = True
            counter = e.get("counter")
            if marking and isinstance(counter, dict):
                counted += int(counter.get("packets", 0))
            elif marking and isinstance(counter, str):
                counted += named.get((rule.get("family"), rule.get("table"), counter), 0)
        if marking and devices:
            for dev in devices:
                out[dev] = out.get(dev, 0) + counted
    return out


def parse_link(text: str) -> dict[str, tuple[int, int]]:
    """`ip -s -j link show` → per interface: (bytes, packets) sent."""
    out: dict[str, tuple[int, int]] = {}
    for item in json.loads(text or "[]"):
        tx = (item.get("stats64") or item.get("stats") or {}).get("tx") if isinstance(item, dict) else None
        if isinstance(tx, dict) and item.get("ifname"):
            out[str(item["ifname"])] = (int(tx.get("bytes", 0)), int(tx.get("packets", 0)))
    return out


def build_table(tc: dict[str, dict[str, Any]], nft: dict[str, int],
                index_of: Callable[[str], int | None],
                link: dict[str, tuple[int, int]] | None = None) -> list[Row]:
    """The table's rows, sorted by OID (what GETNEXT walks)."""
    rows: list[Row] = []
    link = link or {}
    for dev in sorted(set(tc) | set(nft) | set(link)):
        index = index_of(dev)
        if index is None:
            continue
        q = tc.get(dev, {"kind": "", "marked": 0, "drops": 0, "backlog": 0})
        marked = int(q["marked"]) + nft.get(dev, 0)
        rows += [((*ENTRY, 1, index), "string", dev), ((*ENTRY, 2, index), "string", q["kind"] or "none"),
                 ((*ENTRY, 3, index), "counter64", str(marked)),
                 ((*ENTRY, 4, index), "counter64", str(int(q["drops"]))),
                 ((*ENTRY, 5, index), "gauge", str(min(int(q["backlog"]), 2**32 - 1)))]
        if dev in link:
            rows += [((*ENTRY, 6, index), "counter64", str(link[dev][0])),
                     ((*ENTRY, 7, index), "counter64", str(link[dev][1]))]
    rows.sort(key=lambda r: r[0])
    return rows


def _index(dev: str) -> int | None:
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        return None


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def read_table() -> list[Row]:
    tc = parse_tc(_run(["tc", "-s", "-j", "qdisc", "show"]))
    try:
        nft = parse_nft(_run(["nft", "-j", "list", "ruleset"]))
    except (ValueError, AttributeError):
        nft = {}
    try:
        link = parse_link(_run(["ip", "-s", "-j", "link", "show"]))
    except (ValueError, AttributeError, TypeError):
        link = {}
    return build_table(tc, nft, _index, link)


def _oid(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.strip().strip(".").split(".") if x)


def answer(rows: list[Row], command: str, oid_text: str) -> list[str]:
    """The lines pass_persist answers a `get` or `getnext` with."""
    try:
        wanted = _oid(oid_text)
    except ValueError:
        return ["NONE"]
    found: Row | None = None
    if command == "get":
        found = next((r for r in rows if r[0] == wanted), None)
    else:
        found = next((r for r in rows if r[0] > wanted), None)
    if found is None:
        return ["NONE"]
    return ["." + ".".join(map(str, found[0])), found[1], found[2]]


def serve(stdin: IO[str], stdout: IO[str], table: Callable[[], list[Row]], cache_s: float,
          clock: Callable[[], float] = time.monotonic) -> None:
    cached: list[Row] = []
    cached_at: float | None = None

    def rows() -> list[Row]:
        nonlocal cached, cached_at
        now = clock()
        if cached_at is None or now - cached_at >= cache_s:
            cached, cached_at = table(), now
        return cached

    lines: Iterable[str] = iter(stdin.readline, "")
    for line in lines:
        command = line.strip().lower()
        if command == "ping":
            out = ["PONG"]
        elif command in ("get", "getnext"):
            out = answer(rows(), command, stdin.readline())
        elif command == "set":
            stdin.readline()
            stdin.readline()
            out = ["not-writable"]
        elif command == "":
            continue
        else:
            out = ["NONE"]
        stdout.write("\n".join(out) + "\n")
        stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-s", type=float, default=1.0, help="Seconds to reuse a reading of tc and nft.")
    parser.add_argument("--dump", action="store_true", help="Print the table once and exit.")
    args = parser.parse_args(argv)
    if args.dump:
        for o, kind, value in read_table():
            print("." + ".".join(map(str, o)), kind, value)
        return 0
    serve(sys.stdin, sys.stdout, read_table, args.cache_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
