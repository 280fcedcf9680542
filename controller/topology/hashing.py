"""The `c4-ref-v1` ECMP hash model of API.md, and the path it gives a flow.

At a switch S with equal-cost next-hop set N (see `graph.FabricView.next_hops`), a packet
from `src` to `dst` with UDP source port `sport` takes `N[h % len(N)]` where
`h = int.from_bytes(sha256(f"{S.ecmp_seed}|{src}|{dst}|17|{sport}|4791".encode()).digest()[:8], "big")`.
A host port sends to its own leaf; the last leaf delivers to the destination port.
"""

from __future__ import annotations

from hashlib import sha256

from controller.domain.fabric import ROCE_DST_PORT
from controller.topology.graph import FabricView, Path

UDP = 17


def ref_v1_hash(ecmp_seed: int, src: str, dst: str, sport: int) -> int:
    """The 64-bit hash value of one flow at a switch with the given seed."""
    key = f"{ecmp_seed}|{src}|{dst}|{UDP}|{sport}|{ROCE_DST_PORT}".encode()
    return int.from_bytes(sha256(key).digest()[:8], "big")


def ref_v1_path(view: FabricView, src_node: str, dst_node: str, sport: int) -> Path | None:
    """The path `c4-ref-v1` gives a flow between two host ports, or None if it has none."""
    src, dst = view.ports[src_node], view.ports[dst_node]
    if not (view.port_up(src_node) and view.port_up(dst_node)):
        return None
    path = [src_node, src.switch]
    here = src.switch
    while here != dst.switch:
        hops = view.next_hops(here, dst.switch)
        if not hops:
            return None
        seed = view.switches[here].ecmp_seed
        here = hops[ref_v1_hash(seed, src.address, dst.address, sport) % len(hops)]
        path.append(here)
    path.append(dst_node)
    return tuple(path)
