"""A closed-loop rebalancing scenario on the real controller (app, database, planner,
rebalancer), with switch counters synthesized from c4's own load model and posted through
`POST /v1/telemetry/switches`; simulated time (`now`) so ten minutes run in seconds.

**Physics (c4's own model, not a fabric's):** a link direction carries a fixed background
(another tenant, Gb/s) plus, for each planned flow crossing it, its NIC's per-flow demand
(API.md) scaled by the flow's weight relative to its default (`weight * flows_in_connection`:
the shim splits a channel's bytes by weight). The measured rate is `min(offered, capacity)`;
the ECN-marked fraction of its packets is 20 % when offered exceeds the capacity (a degraded
direction's `capacity` is what it really carries, below the fabric's figure), 3 % when it is
within 2 % below it (a standing queue, neither hot nor calm for the detector), else 0. Only
the transmitting switch port of each watched direction is polled, every `poll_s`.

Used by `tests/integration/test_rebalance_scenario.py` (behaviour) and `bench.rebalance`
(the figures: poll intervals from congestion to new weights and to moved flows; flaps).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.domain.fabric import Fabric
from controller.services.clock import now_us
from controller.services.rebalance import Rebalancer, RoundResult
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.topology.graph import FabricView

TOKEN = "bench-rebalance-admin"
PKTS_PER_GBIT = 1e9 / 8 / 4096  # packets/s per Gb/s at 4 KiB RoCE MTU
HOT, WARM = 0.20, 0.03
Direction = tuple[str, str]


@dataclass
class Change:
    """One observed change of one flow between two rounds."""

    t_s: float
    job: str
    key: tuple[int, int, int, int]
    kind: str  # "path" or "weight"
    before: Any
    after: Any
    path: tuple[str, ...] = ()  # the flow's path after the change


@dataclass
class Scenario:
    database_url: str | None = None
    poll_s: float = 10.0
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="c4-rebalance-")
        url = self.database_url or f"sqlite:///{Path(self._tmp.name) / 'c4.db'}"
        upgrade(url)
        self.rt = Runtime.from_settings(Settings(database_url=url, data_dir=Path(self._tmp.name), admin_token=TOKEN,
                                                 **dict(self.settings)))
        self.app = create_app(runtime=self.rt, start_workers=False)
        self.client = TestClient(self.app, headers={"Authorization": f"Bearer {TOKEN}"})
        self.client.__enter__()
        self.rebalancer: Rebalancer = self.app.state.rebalancer
        self.planner = self.rebalancer.planner
        self.t0_us = now_us() - 3_600_000_000  # simulated time starts an hour ago: all samples are "past"
        self.background: dict[Direction, float] = {}
        self.capacity: dict[Direction, float] = {}  # what a degraded direction really carries
        self.counters: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.last_poll_s: float | None = None
        self.changes: list[Change] = []
        self._seen: dict[str, dict[tuple[int, int, int, int], tuple[Any, float]]] = {}
        self.rounds: list[tuple[float, RoundResult]] = []
        self.last_round_ms = 0.0

    def close(self) -> None:
        self.client.__exit__(None, None, None)
        self.rt.engine.dispose()
        self._tmp.cleanup()

    # --- set-up -----------------------------------------------------------------------------

    def generate(self, **body: Any) -> Fabric:
        r = self.client.post("/v1/topology/generate", json=body)
        assert r.status_code == 201, r.text
        return self.fabric()

    def fabric(self) -> Fabric:
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
        assert got is not None
        return got[1]

    def post_job(self, doc: Mapping[str, Any]) -> None:
        r = self.client.post("/v1/jobs", json=dict(doc))
        assert r.status_code == 202, r.text

    def plan(self) -> None:
        for _ in range(5):
            self.planner.step()
            if all(j["status"] != "pending" for j in self.jobs()):
                break
        self._observe(0.0)

    # --- reading ----------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.client.get("/v1/jobs").json()["jobs"])

    def job(self, name: str) -> dict[str, Any]:
        r = self.client.get(f"/v1/jobs/{name}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def assignments(self, name: str) -> list[dict[str, Any]]:
        return list(self.client.get(f"/v1/jobs/{name}/assignments").json()["assignments"])

    def directions_of(self, a: Mapping[str, Any]) -> list[Direction]:
        view = FabricView(self.fabric())
        return list(view.directed_links_of(tuple(a["path"])))

    # --- the synthetic fabric -----------------------------------------------------------------

    def offered_gbps(self) -> dict[Direction, float]:
        """Offered load per watched direction: background + the planned flows' weighted demand."""
        out = dict(self.background)
        nic_flows: dict[tuple[str, str], int] = defaultdict(int)
        per_job = {j["name"]: self.assignments(j["name"]) for j in self.jobs() if j["status"] == "planned"}
        for flows in per_job.values():
            for a in flows:
                nic_flows[(a["src_host"], a["src_nic"])] += 1
        fabric = self.fabric()
        nic_cap = {(h.name, n.name): n.capacity_gbps for h in fabric.hosts for n in h.nics}
        conn: dict[tuple[str, int, int, int], int] = defaultdict(int)
        for name, flows in per_job.items():
            for a in flows:
                conn[(name, a["src_rank"], a["dst_rank"], a["channel"])] += 1
        view = FabricView(fabric)
        channels: dict[tuple[str, int, int], set[int]] = defaultdict(set)
        for name, flows in per_job.items():
            for a in flows:
                channels[(name, a["src_rank"], a["dst_rank"])].add(a["channel"])
        for name, flows in per_job.items():
            for a in flows:
                nic = (a["src_host"], a["src_nic"])
                demand = nic_cap[nic] / nic_flows[nic]
                in_conn = conn[(name, a["src_rank"], a["dst_rank"], a["channel"])] * len(
                    channels[(name, a["src_rank"], a["dst_rank"])])
                share = a["weight"] * in_conn  # 1.0 at the default weight
                for d in view.directed_links_of(tuple(a["path"])):
                    if d in out:
                        out[d] += demand * share
        return out

    def transmitter(self, d: Direction) -> tuple[str, str]:
        link = next(x for x in self.fabric().links if x.name == d[0])
        return (link.a, link.a_port) if d[1] == "ab" else (link.b, link.b_port)

    def poll(self, t_s: float) -> None:
        """Every watched direction's transmitter port polled at `t_s` (counters grown over the
        interval since the last poll at the rates the model gives now)."""
        fabric = {x.name: x for x in self.fabric().links}
        offered = self.offered_gbps()
        dt = 0.0 if self.last_poll_s is None else t_s - self.last_poll_s
        by_switch: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for d, gbps in sorted(offered.items()):
            cap = self.capacity.get(d, fabric[d[0]].capacity_gbps)
            rate = min(gbps, cap)
            marked = HOT if gbps > cap + 1e-9 else WARM if gbps > 0.98 * cap else 0.0
            switch, port = self.transmitter(d)
            c = self.counters[(switch, port)]
            c["tx_bytes"] += rate * 1e9 / 8 * dt
            c["tx_pkts"] += rate * PKTS_PER_GBIT * dt
            c["ecn_marked_pkts"] += rate * PKTS_PER_GBIT * dt * marked
            by_switch[switch].append({"port": port, **{k: int(v) for k, v in c.items()}})
        samples = [{"switch": s, "t_us": self.t0_us + int(t_s * 1e6), "counter_epoch": "e1", "ports": ports}
                    for s, ports in sorted(by_switch.items())]
        r = self.client.post("/v1/telemetry/switches", json={"samples": samples})
        assert r.status_code == 202, r.text
        self.last_poll_s = t_s

    def round(self, t_s: float, reoptimize: bool = False) -> RoundResult:
        """The leader's work at `t_s`: a rebalancer round, then a planner step (summary
        refreshes; with `reoptimize`, the periodic re-optimisation falls due)."""
        t = time.perf_counter()
        result = self.rebalancer.step(now=self.t0_us + int(t_s * 1e6))
        self.last_round_ms = (time.perf_counter() - t) * 1000  # the rebalancer's round alone
        if reoptimize:
            self.planner.memory.reopt_due = True
        self.planner.step()
        self.rounds.append((t_s, result))
        self._observe(t_s)
        return result

    def _observe(self, t_s: float) -> None:
        for j in self.jobs():
            if j["status"] != "planned":
                continue
            seen = self._seen.setdefault(j["name"], {})
            for a in self.assignments(j["name"]):
                key = (a["src_rank"], a["dst_rank"], a["channel"], a["qp"])
                now = (tuple(a["path"]), round(a["weight"], 9))
                before = seen.get(key)
                if before is not None and before[0] != now:
                    if before[0][0] != now[0]:
                        self.changes.append(Change(t_s, j["name"], key, "path", before[0][0], now[0], now[0]))
                    if before[0][1] != now[1]:
                        self.changes.append(Change(t_s, j["name"], key, "weight", before[0][1], now[1], now[0]))
                seen[key] = (now, t_s)

    def flaps(self, hold_down_s: float) -> list[tuple[Change, Change, Direction]]:
        """`flaps` over this scenario's changes and every direction congested at some round."""
        hot = {(c.link, c.direction) for _, r in self.rounds for c in r.congested}
        view = FabricView(self.fabric())
        return flaps(self.changes, hot, view.directed_links_of, hold_down_s)


def flaps(changes: list[Change], hot: set[Direction], directed: Callable[[tuple[str, ...]], Iterable[Direction]],
          hold_down_s: float) -> list[tuple[Change, Change, Direction]]:
    """Load sent back onto a congested direction within the hold-down: a flow's load taken
    off a direction that was congested at some time (`hot`; weight lowered while crossing it,
    or moved off it), then put back on it (weight raised while crossing it, or moved onto it)
    less than `hold_down_s` later. A moved flow getting its default weight on its new path,
    or a sibling giving back the weight it took, sends nothing back to the hot direction.
    `directed`: a path's (link, direction) hops (`FabricView.directed_links_of`)."""
    signs: dict[tuple[str, tuple[int, int, int, int], Direction], list[tuple[int, Change]]] = defaultdict(list)
    for c in changes:
        if c.kind == "path":
            old, new = set(directed(c.before)), set(directed(c.after))
            moves = [(d, -1) for d in old - new] + [(d, +1) for d in new - old]
        else:
            up = 1 if c.after > c.before else -1
            moves = [(d, up) for d in directed(c.path)]
        for d, sign in moves:
            if d in hot:
                signs[(c.job, c.key, d)].append((sign, c))
    out = []
    for (_, _, d), seq in signs.items():
        for i, (sign, later) in enumerate(seq):
            if sign > 0 and any(s < 0 and later.t_s - c.t_s < hold_down_s for s, c in seq[:i]):
                earlier = next(c for s, c in seq[:i] if s < 0 and later.t_s - c.t_s < hold_down_s)
                out.append((earlier, later, d))
    return out


def ring_job(name: str, hosts: list[str], nic: str = "mlx5_0", channels: int = 2, qps: int = 2,
             rebalance: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "ranks": [{"rank": i, "host": h, "nic": nic} for i, h in enumerate(hosts)],
                           "traffic": [{"pattern": "ring", "ranks": list(range(len(hosts))), "channels": channels,
                                        "qps_per_connection": qps}]}
    if not rebalance:
        doc["rebalance"] = False
    return doc


def weighable_direction(sc: Scenario, job: str, skip: tuple[Direction, ...] = (),
                        crossed_by: str | None = None) -> Direction:
    """A fabric (switch-to-switch) direction one of the job's flows crosses while a sibling of
    its channel does not: where the weights step can act (not one of `skip`; one a flow of job
    `crossed_by` crosses too, if given)."""
    flows = sc.assignments(job)
    other = ({d for a in sc.assignments(crossed_by) for d in sc.directions_of(a)} if crossed_by is not None
             else None)
    by_chan: dict[tuple[int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for a in flows:
        by_chan[(a["src_rank"], a["dst_rank"], a["channel"])].append(a)
    host_links = {x.name for x in sc.fabric().links if x.is_host_link}
    for chan in sorted(by_chan):
        sibs = by_chan[chan]
        for a in sibs:
            for d in sc.directions_of(a):
                if d[0] in host_links or d in skip or (other is not None and d not in other):
                    continue
                if any(d not in sc.directions_of(b) for b in sibs if b is not a):
                    return d
    raise AssertionError(f"job {job}: no channel with flows on different paths")
