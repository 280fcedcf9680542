"""Thin wrappers over iproute2, tc, nft and /proc: the only module that changes the kernel.

Everything here takes explicit namespace names; nothing guesses. Namespaces are found by
their files in /run/netns, and the processes inside a namespace by comparing each process's
`/proc/<pid>/ns/net` with that file (what `ip netns pids` does, in one scan for many
namespaces). Errors from the tools are raised as `KernelError` carrying the tool's message.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/run/netns")


class KernelError(RuntimeError):
    pass


def run(argv: Sequence[str], stdin: str | None = None, check: bool = True,
        timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if check and proc.returncode != 0:
        shown = " ".join(argv)
        raise KernelError(f"{shown} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[:2000]}")
    return proc


def ip_batch(lines: Iterable[str], netns: str | None = None) -> None:
    text = "\n".join(lines) + "\n"
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    run(argv, stdin=text)


def tc_batch(lines: Iterable[str], netns: str) -> None:
    text = "\n".join(lines) + "\n"
    if text.strip():
        run(["tc", "-n", netns, "-batch", "-"], stdin=text)


def netns_exec(netns: str, argv: Sequence[str], stdin: str | None = None,
               check: bool = True, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return run(["ip", "netns", "exec", netns, *argv], stdin=stdin, check=check, timeout_s=timeout_s)


def sysctl(netns: str, settings: Sequence[str]) -> None:
    netns_exec(netns, ["sysctl", "-q", "-w", *settings])


def sysctl_exists(netns: str, key: str) -> bool:
    proc = netns_exec(netns, ["test", "-e", "/proc/sys/" + key.replace(".", "/")], check=False)
    return proc.returncode == 0


def nft_load(netns: str, ruleset: str) -> None:
    netns_exec(netns, ["nft", "-f", "-"], stdin=ruleset)


def parallel(fn: Any, items: Sequence[Any], workers: int = 4) -> list[Any]:
    """Run fn over items on a small thread pool (the work is in subprocesses); first error wins."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(fn, items))


def namespaces(prefix: str) -> list[str]:
    """Every network namespace named `<prefix>-...`, sorted."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix + "-"))


def _ns_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_in(netns_names: Iterable[str]) -> dict[str, list[int]]:
    """Processes whose network namespace is one of the given ones (one scan of /proc)."""
    keys = {}
    for name in netns_names:
        key = _ns_key(str(NETNS_DIR / name))
        if key:
            keys[key] = name
    out: dict[str, list[int]] = {name: [] for name in keys.values()}
    if not keys:
        return out
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        key = _ns_key(f"/proc/{entry}/ns/net")
        if key in keys:
            out[keys[key]].append(int(entry))
    return out


def kill_all(pids: Iterable[int], grace_s: float = 1.0) -> list[int]:
    """SIGTERM, wait up to grace_s, then SIGKILL what is left. Returns the pids signalled."""
    pids = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            break
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if _alive(p)]
            time.sleep(0.02)
        pids = alive
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] not in ("Z", "X")
    except OSError:
        return False


def link_exists(ifname: str, netns: str | None = None) -> bool:
    argv = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", ifname]
    return run(argv, check=False).returncode == 0


def links_json(netns: str, stats: bool = False) -> list[dict[str, Any]]:
    argv = ["ip", "-n", netns, "-j"] + (["-s"] if stats else []) + ["link", "show"]
    return _json_list(run(argv).stdout)


def addrs_json(netns: str) -> list[dict[str, Any]]:
    return _json_list(run(["ip", "-n", netns, "-j", "-4", "address", "show"]).stdout)


def qdisc_json(netns: str) -> list[dict[str, Any]]:
    return _json_list(run(["tc", "-n", netns, "-s", "-j", "qdisc", "show"]).stdout)


def _json_list(text: str) -> list[dict[str, Any]]:
    value = json.loads(text or "[]")
    if not isinstance(value, list):
        raise KernelError(f"expected a JSON list from the tool, got {type(value).__name__}")
    return value


def htb_rate_mbit(netns: str, ifname: str) -> float | None:
    """The rate of HTB class 1:1 on an interface (tc prints classes as text even with -j)."""
    out = run(["tc", "-n", netns, "class", "show", "dev", ifname], check=False).stdout
    m = re.search(r"class htb 1:1 .*?\brate (\d+(?:\.\d+)?)([KMG]?)bit", out)
    if not m:
        return None
    return float(m.group(1)) * {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[m.group(2)]


def nft_counters(netns: str, table: str) -> dict[str, int]:
    """Named counters of one table: name -> packets (empty when the table is absent)."""
    proc = netns_exec(netns, ["nft", "-j", "list", "counters", "table", "ip", table], check=False)
    if proc.returncode != 0:
        return {}
    out = {}
    for item in json.loads(proc.stdout).get("nftables", []):
        c = item.get("counter")
        if c:
            out[c["name"]] = int(c.get("packets", 0))
    return out
