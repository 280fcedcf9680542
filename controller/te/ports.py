"""Source ports from the `c4-ref-v1` hash model: which RoCEv2 source port puts a flow on a path.

`ModelPorts` is the `PortSource` of model mode: for a pair of host ports it tries source
ports 49152.. in ascending order through `c4-ref-v1` and keeps the first port that lands on
each wanted path (deterministic: the same fabric gives the same ports). `HashCache` keeps the
hash values it computes, which depend only on (switch seed, addresses, port), never on the
fabric's state, so one cache serves every fabric revision. The probed-mode `PortSource` is
`probes.ProbeBook`. Pure: no I/O; the caches live as long as the caller keeps the objects.
"""

from __future__ import annotations

import threading
from hashlib import sha256
from typing import Protocol

import numpy as np
import numpy.typing as npt

from controller.domain.fabric import ROCE_DST_PORT, ROCE_SPORT_MAX, ROCE_SPORT_MIN, PortRef
from controller.topology.graph import FabricView, Path

MAX_SPORT_TRIES = 4096
U64Array = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]
IdxArray = npt.NDArray[np.intp]
TAILS = [b"%d|%d" % (sport, ROCE_DST_PORT) for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MAX + 1)]


class PortSource(Protocol):
    def sports(self, src_node: str, dst_node: str, paths: list[Path]) -> dict[Path, int]: ...


class HashCache:
    """`c4-ref-v1` hash values per (switch seed, src, dst) key and source port.

    A value depends on nothing else (not on links or next-hop sets), so one cache serves every
    fabric revision: after a link change only `h % len(next hops)` is evaluated again. Values
    are computed on demand for the source ports asked for. Bounded: cleared when it holds
    more than `max_keys` keys. Thread-safe (the service's link PATCHes and its planner worker
    share one): each key's values and done flags change together under a lock.
    """

    def __init__(self, max_keys: int = 100_000) -> None:
        self.max_keys = max_keys
        self._vals: dict[bytes, U64Array] = {}
        self._done: dict[bytes, BoolArray] = {}
        self._lock = threading.Lock()

    def store(self, prefix: bytes, first: U64Array) -> None:
        """Record the hashes of ports `ROCE_SPORT_MIN + 0..len(first)-1` computed elsewhere."""
        with self._lock:
            self._store(prefix, first)

    def _store(self, prefix: bytes, first: U64Array) -> None:
        vals = self._vals.get(prefix)
        if vals is not None and len(vals) >= len(first) and self._done[prefix][: len(first)].all():
            return
        if vals is None and len(self._vals) >= self.max_keys:
            self._vals.clear()
            self._done.clear()
        size = max(len(first), len(vals) if vals is not None else 0, 64)
        grown, done = np.zeros(size, np.uint64), np.zeros(size, np.bool_)
        if vals is not None:
            grown[: len(vals)], done[: len(vals)] = vals, self._done[prefix]
        grown[: len(first)], done[: len(first)] = first, True
        self._vals[prefix], self._done[prefix] = grown, done

    def values(self, prefix: bytes, offsets: IdxArray) -> U64Array:
        """Hashes of `prefix` + port for ports `ROCE_SPORT_MIN + offsets` (offsets ascending)."""
        with self._lock:
            return self._values(prefix, offsets)

    def _values(self, prefix: bytes, offsets: IdxArray) -> U64Array:
        vals = self._vals.get(prefix)
        need = int(offsets[-1]) + 1
        if vals is None or len(vals) < need:
            if vals is None and len(self._vals) >= self.max_keys:
                self._vals.clear()
                self._done.clear()
            size = max(need, 2 * len(vals) if vals is not None else 0, 64)
            grown, done = np.zeros(size, np.uint64), np.zeros(size, np.bool_)
            if vals is not None:
                grown[: len(vals)], done[: len(vals)] = vals, self._done[prefix]
            self._vals[prefix], self._done[prefix] = grown, done
            vals = grown
        done = self._done[prefix]
        miss = offsets[~done[offsets]]
        if miss.size:
            raw = b"".join([sha256(prefix + TAILS[i]).digest() for i in miss.tolist()])
            vals[miss] = np.frombuffer(raw, dtype=">u8")[::4]
            done[miss] = True
        return vals[offsets]


class ModelPorts:
    """Source ports from the `c4-ref-v1` hash model, cached per (src, dst) port pair."""

    def __init__(self, view: FabricView, max_tries: int = MAX_SPORT_TRIES, hashes: HashCache | None = None) -> None:
        self.view = view
        self.max_tries = max_tries
        self.hashes = hashes if hashes is not None else HashCache()
        self._cache: dict[tuple[str, str], dict[Path, int]] = {}

    def sports(self, src_node: str, dst_node: str, paths: list[Path]) -> dict[Path, int]:
        key = (src_node, dst_node)
        found = self._cache.get(key)
        if found is None:
            found = self.first_ports(src_node, dst_node, set(paths), blocks=False)
            self._cache[key] = found
        return found

    def first_port(self, src_node: str, dst_node: str, path: Path) -> int | None:
        """The first port of 49152.. that puts the flow on `path` (an equal-cost path), or None
        within `max_tries`: the same port `first_ports` finds for it, for one path only. Hashes
        only where the path's switch has a choice, and stops at the first hop a port misses
        (a 16-path pair: ~20 hashes)."""
        view = self.view
        src, dst = view.ports[src_node], view.ports[dst_node]
        stem = f"|{src.address}|{dst.address}|17|"
        choices: list[tuple[str, bytes, tuple[str, ...]]] = []
        for i in range(1, len(path) - 2):
            hops = view.next_hops(path[i], dst.switch)
            if len(hops) > 1:
                choices.append((path[i + 1], f"{view.switches[path[i]].ecmp_seed}{stem}".encode(), hops))
        if not choices:
            return ROCE_SPORT_MIN
        last = min(ROCE_SPORT_MAX, ROCE_SPORT_MIN + self.max_tries - 1)
        for sport in range(ROCE_SPORT_MIN, last + 1):
            tail = TAILS[sport - ROCE_SPORT_MIN]
            for nxt, prefix, hops in choices:
                if hops[int.from_bytes(sha256(prefix + tail).digest()[:8], "big") % len(hops)] != nxt:
                    break
            else:
                return sport
        return None

    def first_ports(self, src_node: str, dst_node: str, wanted: set[Path], blocks: bool = True) -> dict[Path, int]:
        """The first port of 49152.. that `hashing.ref_v1_path` puts on each wanted path.

        Same result as trying the ports one by one through the reference (a unit test holds
        them equal), computed a block of ports at a time: at each switch the block's ports are
        split by next hop, and only branches toward a still-missing wanted path go on, over
        `hashes` (kept across revisions). `blocks=False`: one port at a time, faster for a
        first sampling of every path of a pair (cold hashes, exact stop); it leaves the source
        leaf's hashes in `hashes`.
        """
        view = self.view
        src, dst = view.ports[src_node], view.ports[dst_node]
        found: dict[Path, int] = {}
        if not wanted:
            return found
        table: dict[str, tuple[tuple[str, ...], bytes]] = {}
        for p in wanted:
            for here in p[1:-2]:
                if here not in table:
                    seed = view.switches[here].ecmp_seed
                    table[here] = (view.next_hops(here, dst.switch), f"{seed}|{src.address}|{dst.address}|17|".encode())
        if not blocks:
            return self._sample_scalar(src, dst_node, wanted, table)
        end, hashes = dst.switch, self.hashes
        limit = min(ROCE_SPORT_MAX - ROCE_SPORT_MIN + 1, self.max_tries)
        start, block = 0, min(limit, max(64, 4 * len(wanted)))
        while start < limit:
            missing = wanted.difference(found)
            heads = {p[1:k] for p in missing for k in range(2, len(p))}
            stack: list[tuple[str, IdxArray, tuple[str, ...]]] = [
                (src.switch, np.arange(start, min(limit, start + block)), (src.switch,))]
            while stack:
                here, ids, nodes = stack.pop()
                if here == end:
                    path = (src_node, *nodes, dst_node)
                    if path in missing:
                        found[path] = ROCE_SPORT_MIN + int(ids[0])
                    continue
                hops, prefix = table[here]
                while len(hops) == 1:  # no choice here: follow the only next hop
                    here, nodes = hops[0], (*nodes, hops[0])
                    if here == end or nodes not in heads:
                        break
                    hops, prefix = table[here]
                if here == end:
                    stack.append((here, ids, nodes))
                    continue
                if len(hops) <= 1 or nodes not in heads:
                    continue
                choice = hashes.values(prefix, ids) % np.uint64(len(hops))
                for j, nxt in enumerate(hops):
                    if (*nodes, nxt) in heads:
                        sub = ids[choice == j]
                        if sub.size:
                            stack.append((nxt, sub, (*nodes, nxt)))
            if len(found) == len(wanted):
                break
            start += block
            block = max(32, 4 * (len(wanted) - len(found)))
        return found

    def _sample_scalar(self, src: PortRef, dst_node: str, wanted: set[Path],
                       table: dict[str, tuple[tuple[str, ...], bytes]]) -> dict[Path, int]:
        """`first_ports` one port at a time, stopping at the exact port that completes the set:
        faster than blocks for many paths over cold hashes (a first plan), no cache."""
        found: dict[Path, int] = {}
        end = self.view.ports[dst_node].switch
        last = min(ROCE_SPORT_MAX, ROCE_SPORT_MIN + self.max_tries - 1)
        first = table.get(src.switch)
        if first is None or len(first[0]) < 2:
            first = None
        # The source leaf's hash of every port tried, kept in `hashes` for later samplings
        # (a re-plan after a link change samples the same pairs again, mostly from the leaf).
        at_leaf: list[int] = []
        for sport in range(ROCE_SPORT_MIN, last + 1):
            tail = TAILS[sport - ROCE_SPORT_MIN]
            nodes = [src.node, src.switch]
            if first is not None:
                h = int.from_bytes(sha256(first[1] + tail).digest()[:8], "big")
                at_leaf.append(h)
                here = first[0][h % len(first[0])]
                nodes.append(here)
            else:
                here = src.switch
            while here != end:
                step = table.get(here)
                if step is None or not step[0]:
                    break
                hops, prefix = step
                here = hops[0] if len(hops) == 1 else hops[int.from_bytes(sha256(prefix + tail).digest()[:8], "big") % len(hops)]
                nodes.append(here)
            nodes.append(dst_node)
            path = tuple(nodes)
            if path in wanted and path not in found:
                found[path] = sport
                if len(found) == len(wanted):
                    break
        if first is not None and at_leaf:
            self.hashes.store(first[1], np.array(at_leaf, dtype=np.uint64))
        return found
