"""Closed-loop rebalancing: what to do about congested link directions. Pure: the congestion
detector's output, the planned jobs' assignments, the rebalancer's memory and `now` in;
new assignments and the new memory out. `services.rebalance` runs it and stores the plans
through the planner's `write` (validator, version bump, `job.replanned`).

Per congested link direction (`te.congestion.CongestedDirection`), an *episode*, two steps:

1. **Weights** (at once, the first round that sees the direction congested): every
   connection of a rebalancing job with flows on both sides (some crossing the direction,
   some not) moves `weight_cut` of its crossing flows' weight onto its other flows, in
   proportion to their weights (equal shares when they have none). Siblings that cross
   another congested direction take nothing; a connection whose flows all cross it is left
   to step 2. Sockets stay open: the node agent pushes the new weights to live connections.
2. **Moves** (when a sample newer than the weights step still shows the queue: its own
   interval's ECN fraction or PFC rate above the detector's *leave* threshold, the level the
   detector calls calm; the smoothed state would lag by its time constant): flows crossing the
   direction move to other routes of their port pair, largest demand first (fewest moves),
   each to the route whose hottest link direction is coolest with the flow on it, only onto
   routes with headroom (no link direction above `headroom` utilization with it) that cross
   no congested direction. The load counted is the planned flows' demand (API.md) plus, on
   every congested direction, its measured `background_gbps` (what the plan does not
   explain: another tenant, traffic routed around a failure). Moves stop once the direction's
   load is at most `target_utilization` of what it carried while marking (its measured
   rate, at most its capacity: the marks say that is the most it carries without a queue).
   Each moved flow is held (`hold_down_s`): not moved again by the rebalancer, and the
   planner's re-optimisation waits while holds last (`services.rebalance`). A connection
   none of whose flows crosses a congested direction any more gets its default weights back.
   The step repeats, once per newer sample that still shows the queue, while flows can move
   (the measured rate of a saturated direction is at most its capacity, so the background
   is estimated low and one round may move too few).

A **degraded** direction — congested while carrying less than `degraded_fraction` of its
capacity (a bad optic, a throttled port: the marks come from the link, not from load; judged
on the latest interval's rate when that interval still marks, as the smoothed rate lags) — is
treated like a link that lost capacity, as `te.failover` treats a dead one: step 1 solves the
weights of every live connection crossing a degraded direction with a linear program
(`te.weights.balance`: the highest utilization of any link direction minimised, paths and
ports kept, the other connections' load fixed) in which the degraded direction's capacity is
the rate it delivered while marking. Cutting its flows to zero instead piles its share onto
siblings the plan already has full (testbed, 2x2x2, one spine link at a quarter: the ring at
0.5 of its rate by a cut to zero at best, 0.58 by the program in a run where only the throttled
link was judged degraded, where the capacity left allows 0.62). A healthy link of the slowed
ring can mark above the enter threshold at half its capacity (on the testbed, a
packet-counting marker; elsewhere, bursts): judged degraded, it pulled weight back onto the
throttled link. So a direction whose planned load an earlier solution raised is judged
degraded only while its rate falls (`RebalanceConfig.degraded_fall`); any new degraded
judgment needs the queue building or the smoothed rate low too (`degraded_rise`: a sample
spanning a ring's slowdown shows healthy links at half rate with their line-rate marks); one not degraded
that carries no more than its weighted planned load is not answered (its marks are the price
the program chose). The first estimate may come from a sample spanning the throttle: it is
corrected once by a whole standing-queue sample `resolve_rise` under it, except in a round
where another direction gets its first solution (that one paces the collective then), and
never when it was read from the window that confirmed lost capacity or a later one (wholly
after the drop, `after_the_drop`: a lower rate then is pacing elsewhere, not the link).
The weights are solved again only if the delivered rate rises by `resolve_rise` (within the
hold-down such a solution raises no weight it lowered and no direction it unloaded: below) or
falls by `resolve_drop` (smaller drops while marking are bursts on a link that now carries less than
it can: re-solving on them ratcheted the estimate down). No moves follow for a direction whose
weights were solved: a moved flow's new source port cannot reach its live socket (the shim
then ignores the connection's later weights) and the plan would show paths the live sockets
are not on; new connections take the solved weights too (same ports, same paths). Where no
weights can be solved (no connection with a flow on each side), step 2 at the next sample,
whatever it shows, moves every movable flow off it. A degraded direction whose episode is
live is never a sibling for another direction's weights step, even when calm.

When a direction is no longer congested, its episode ends once `hold_down_s` has passed
since its weights step: the connections it lowered get equal weights back (unless a flow of
theirs crosses another congested direction or one with a live episode, or a flow of theirs
is still held, below). Before that nothing is undone, so load that swings faster than the
hold-down cannot make weights or flows go back and forth.

**Per-flow hold-down on weights.** A weight a round lowers (answering a direction, as a
sibling's side of a solution, or restoring equal weights) does not rise again for
`hold_down_s` while the flow keeps its path (`Decision.lowered`, kept by the service and passed
back as `capped`): the weights program gets it as an upper bound, a sibling step gives it
nothing, a restore of its connection waits. A direction whose planned load a round lowered
takes none back meanwhile (`Decision.lowered_directions`, passed back as `held_directions`),
nor does one with a live episode: the program bounds its load by what it carries now, sibling
steps and moves avoid it. No exception, a low first estimate included: it is corrected up
only after the hold-down (`bench/testbed/oscillating.py`: an upward correction re-solved a
link throttled again two minutes after its answer back to equal weights, 12 flaps by the
issue's count). Seen on the testbed before any of this (2x3x2): A throttled and answered; a
minute later A restored and B throttled, B was solved with A's held 12 Mbit/s estimate and
A's flows got weight back inside A's hold-down, 24 flaps by the issue's count in 10 minutes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.candidates import UNKNOWN, Candidates, DirectedLink, Nic, Route
from controller.te.congestion import CongestedDirection
from controller.te.weights import balance
from controller.topology.graph import FabricView

WEIGHTS = "weights"
MOVES = "moves"
RESTORED = "restored"

# A weight (or a direction's load, relative) that falls by less than this is not held: the
# weights program rounds to 1e-9 and a connection's last weight takes the rounding.
HELD_CHANGE = 1e-6

# (src_rank, dst_rank, channel): one NCCL connection, whose sockets (the channel's flows) share
# its bytes by weight in the shim. API.md's connection (src_rank, dst_rank) spans channels;
# moving weight inside a channel keeps its weights summing to 1.
Connection = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """The first four fields are `C4_REBALANCE_*` settings; hold-down and the enter, leave and
    packet-rate thresholds are the congestion detector's own `C4_CONGESTION_*` settings, passed
    through (`services.rebalance.rebalance_config`); the rest are fixed here, with their reasons
    beside them (defaults and reasons of the settings: README, Decisions)."""

    weight_cut: float = 0.5
    target_utilization: float = 0.9
    headroom: float = 1.0
    degraded_fraction: float = 0.5
    hold_down_s: float = 300.0
    ecn_leave_fraction: float = 0.01
    pfc_leave_per_s: float = 10.0
    # The detector's *enter* thresholds: a sample at or above one shows a standing queue, which
    # is what makes a direction carrying less than `degraded_fraction` of its capacity degraded.
    ecn_enter_fraction: float = 0.05
    pfc_enter_per_s: float = 100.0
    min_pkts_per_s: float = 1000.0
    # A direction that marks while carrying what its plan puts on it, within its capacity, with
    # no background above this fraction of its capacity, and not degraded, is left alone: its
    # marks are the transport's own control loop at line rate (TCP with classic ECN marks 5-20 %
    # of packets at a saturated port on the testbed; DCQCN does the same by design), the plan
    # is already at its bound there, and shifting load onto siblings only overloads them.
    self_load_margin: float = 0.1
    # A degraded direction's weights are solved again when its delivered rate while it still
    # marks rose above the rate its last solution used by more than `resolve_rise` of it (the
    # estimate was low) or fell below it by more than `resolve_drop` (the link got worse). Not
    # on smaller drops: once weights are lowered, a degraded direction carrying less than it
    # can may still mark a few % of packets (bursts; a packet-counting marker counts the small
    # slices the shim sends on low-weight sockets as full ones): seen on the testbed, re-solving
    # on those rates ratcheted a link throttled to 12 Mbit/s down to 7 Mbit/s in 4 rounds.
    resolve_rise: float = 0.15
    resolve_drop: float = 0.5
    # A direction whose planned load a degraded direction's solved weights raised is judged
    # degraded only while its rate falls: its latest interval's rate below `1 - degraded_fall`
    # of the smoothed rate. Marks on a direction the rebalancer itself loaded are no evidence
    # of lost capacity (testbed: a healthy uplink given the throttled link's share marked 2.3 %
    # at 23 of 50 Mbit/s, was solved with 23 as its capacity and pulled weight back onto the
    # throttled link); a link that loses capacity delivers less than it did.
    degraded_fall: float = 0.1
    # A direction no degraded episode holds yet is judged degraded only if its smoothed rate is
    # under `degraded_fraction` of its capacity too (slow for a while), or its latest interval's
    # marked fraction (or PFC rate) is at least `degraded_rise` times the smoothed one (its
    # queue is building). A sample spanning the moment a ring slowed shows every ring link's
    # rate halved with the marks of its line-rate part: healthy links so judged were solved
    # with 23 of 50 Mbit/s as their capacity (testbed 2x2x2, ring 0.33 where 0.62 is allowed).
    degraded_rise: float = 1.5


@dataclass(frozen=True, slots=True)
class JobInput:
    """A planned job as the rebalancer sees it."""

    flows: tuple[Flow, ...]
    assignments: Mapping[FlowKey, Assignment]
    rebalance: bool = True


@dataclass(frozen=True, slots=True)
class LatestSample:
    """A direction's latest interval, raw (not smoothed): when it ended and its signals."""

    t_us: int
    ecn_marked_fraction: float | None
    pfc_max_per_s: float
    gbps: float | None = None  # the interval's rate (bytes sent), raw

    def still_marking(self, config: RebalanceConfig) -> bool:
        """Above the detector's *leave* thresholds: the queue is still there."""
        return ((self.ecn_marked_fraction is not None and self.ecn_marked_fraction > config.ecn_leave_fraction)
                or self.pfc_max_per_s > config.pfc_leave_per_s)

    def queue_standing(self, config: RebalanceConfig) -> bool:
        """At or above the detector's *enter* thresholds: a standing queue, not bursts."""
        return ((self.ecn_marked_fraction is not None and self.ecn_marked_fraction >= config.ecn_enter_fraction)
                or self.pfc_max_per_s >= config.pfc_enter_per_s)


@dataclass(frozen=True, slots=True)
class Episode:
    """The rebalancer's memory of one congested direction: since when the detector holds it
    congested, when each step last acted, and the connections whose weights it lowered."""

    link: str
    direction: str
    since_us: int
    weights_at_us: int | None = None
    moves_at_us: int | None = None
    lowered: frozenset[tuple[str, Connection]] = frozenset()
    degraded: bool = False
    stuck: bool = False  # the last moves step found no flow it could move
    # Degraded: the delivered rate its weights were last solved with, its capacity there.
    capacity_gbps: float | None = None
    # Degraded: the directions whose planned load its solved weights raised.
    raised: frozenset[DirectedLink] = frozenset()
    # Degraded: a standing-queue sample newer than the first solution has been seen. Until then
    # a rate `resolve_rise` under the first estimate re-solves once (the first sample after a
    # throttle may span both rates: testbed, 15.2 Mbit/s for a link now at 12).
    confirmed: bool = False

    def last_action_us(self) -> int | None:
        return max((t for t in (self.weights_at_us, self.moves_at_us) if t is not None), default=None)


@dataclass(frozen=True, slots=True)
class Action:
    """What one round did to one job, for one direction (the timeline and the plan summary)."""

    job: str
    link: str
    direction: str
    step: str
    flows: int
    t_us: int
    congestion: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class WeightHold:
    """A flow whose weight the rebalancer lowered while on `path`, answering `link`/`direction`
    ("" where it answered none: a restore, a sibling's solved share): the weight does not rise
    again before `until_us` while the flow keeps that path (the per-flow hold-down; module
    docstring)."""

    until_us: int
    link: str = ""
    direction: str = ""
    path: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """New assignments (whole, per changed job), actions, the episodes to keep, new holds
    (flow key -> (until_us, reason, link, direction))."""

    plans: dict[str, dict[FlowKey, Assignment]] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    episodes: dict[DirectedLink, Episode] = field(default_factory=dict)
    holds: dict[Hashable, tuple[int, str, str, str]] = field(default_factory=dict)
    # Flows whose weight this round lowered (answering a direction, restoring equal weights, or
    # as a sibling in a solution): (job, FlowKey) -> the hold.
    lowered: dict[Hashable, WeightHold] = field(default_factory=dict)
    # Directions whose planned load (weights and paths) this round lowered -> hold end: no round
    # puts load back on them before it (weights program bound, sibling steps and moves avoid them).
    lowered_directions: dict[DirectedLink, int] = field(default_factory=dict)


def congestion_doc(c: CongestedDirection, step: str, now_us: int, degraded: bool) -> dict[str, Any]:
    """What a plan summary shows of the congestion it answered (`plan.congestion[]`)."""
    return {"link": c.link, "direction": c.direction, "step": step, "at_us": now_us, "since_us": c.since_us,
            "measured_gbps": _r(c.measured_gbps), "utilization": _r(c.utilization),
            "planned_gbps": _r(c.planned_gbps), "background_gbps": _r(c.background_gbps),
            "ecn_marked_fraction": _r(c.ecn_marked_fraction), "pfc_pauses_per_s": _r(c.pfc_pauses_per_s),
            "degraded": degraded, "reason": c.reason}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _connection(k: FlowKey) -> Connection:
    return (k.src_rank, k.dst_rank, k.channel)


class _Work:
    """The jobs' assignments being changed in one round, with the directed links of each
    assignment and the planned load per direction kept current."""

    def __init__(self, view: FabricView, jobs: Mapping[str, JobInput], demand: Mapping[Nic, float],
                 capped: Mapping[Hashable, WeightHold] | None = None, now_us: int = 0) -> None:
        self.view = view
        # Flows whose weight an earlier round lowered, hold-down not over: their weight does not rise.
        self.capped = {k: h for k, h in (capped or {}).items() if h.until_us > now_us}
        # Flows this round lowered, with the direction answered (`cause` when it was lowered).
        self.lowered: dict[tuple[str, FlowKey], DirectedLink | None] = {}
        self.cause: DirectedLink | None = None
        self.held_dirs: set[DirectedLink] = set()  # directions whose load may not rise (`decide`)
        self.jobs = jobs
        self.assigned: dict[str, dict[FlowKey, Assignment]] = {n: dict(j.assignments) for n, j in jobs.items()}
        self.src: dict[str, dict[FlowKey, Nic]] = {n: {f.key: f.src for f in j.flows} for n, j in jobs.items()}
        self.default_weight = {n: {f.key: 1.0 / f.flows_in_connection for f in j.flows} for n, j in jobs.items()}
        self.demand = demand
        self.changed: set[str] = set()
        self._hops: dict[tuple[str, ...], tuple[DirectedLink, ...]] = {}
        self.load: dict[DirectedLink, float] = defaultdict(float)
        self.crossing: dict[DirectedLink, list[tuple[str, FlowKey]]] = defaultdict(list)
        for n, assigned in self.assigned.items():
            for k, a in assigned.items():
                dem = demand.get(self.src[n].get(k, ("", "")), 0.0)
                for d in self.hops(a.path):
                    self.load[d] += dem
                    self.crossing[d].append((n, k))
        self.connections: dict[str, dict[Connection, list[FlowKey]]] = {}
        for n, assigned in self.assigned.items():
            by: dict[Connection, list[FlowKey]] = defaultdict(list)
            for k in sorted(assigned):
                by[_connection(k)].append(k)
            self.connections[n] = dict(by)

    def weighted_load(self) -> dict[DirectedLink, float]:
        """Per direction, the planned load with each connection's bytes split by its weights
        (`load` counts every flow at its NIC's whole per-flow demand, whatever its weight)."""
        out: dict[DirectedLink, float] = defaultdict(float)
        for job, by in self.connections.items():
            assigned = self.assigned[job]
            for keys in by.values():
                total = sum(assigned[k].weight for k in keys)
                dem = sum(self.demand.get(self.src[job].get(k, ("", "")), 0.0) for k in keys)
                if total <= 0:
                    continue
                for k in keys:
                    for d in self.hops(assigned[k].path):
                        out[d] += dem * assigned[k].weight / total
        return out

    def hops(self, path: tuple[str, ...]) -> tuple[DirectedLink, ...]:
        got = self._hops.get(path)
        if got is None:
            got = self._hops[path] = tuple(self.view.directed_links_of(path))
        return got

    def crosses(self, job: str, key: FlowKey, dirs: Iterable[DirectedLink]) -> bool:
        hops = set(self.hops(self.assigned[job][key].path))
        return any(d in hops for d in dirs)

    def set(self, job: str, a: Assignment) -> None:
        if a.weight < self.assigned[job][a.key].weight - HELD_CHANGE:
            self.lowered.setdefault((job, a.key), self.cause)
        self.assigned[job][a.key] = a
        self.changed.add(job)

    def is_capped(self, job: str, key: FlowKey) -> bool:
        """The flow's weight was lowered within the hold-down (by an earlier round, or by this
        one: its weight may not rise again now either) and it is still on the path it had then
        (a flow moved since may take its weight back: that puts nothing back where it was)."""
        if (job, key) in self.lowered:
            return True
        h = self.capped.get((job, key))
        return h is not None and (not h.path or h.path == self.assigned[job][key].path)

    def can_equalize(self, job: str, conn: Connection) -> bool:
        """Equal weights raise no flow whose weight is capped, and none crossing a held direction."""
        return not any(self.default_weight[job][k] > self.assigned[job][k].weight + 1e-12
                       and (self.is_capped(job, k) or self.crosses(job, k, self.held_dirs))
                       for k in self.connections[job][conn])

    def equalize(self, job: str, conn: Connection) -> bool:
        """Equal weights for the connection, unless that would raise a capped flow (then nothing)."""
        keys = self.connections[job][conn]
        if not self.can_equalize(job, conn):
            return False
        changed = False
        for k in keys:
            a = self.assigned[job][k]
            w = self.default_weight[job][k]
            if abs(a.weight - w) > 1e-12:
                self.set(job, replace(a, weight=w))
                changed = True
        return changed


def _cut_weights(work: _Work, job: str, conn: Connection, d: DirectedLink, hot: set[DirectedLink],
                 cut: float) -> bool:
    """Move `cut` of the weight of the connection's flows crossing `d` onto its flows that
    cross no congested direction. False if nothing could move."""
    keys = work.connections[job][conn]
    assigned = work.assigned[job]
    on = [k for k in keys if work.crosses(job, k, (d,))]
    free = [k for k in keys if not work.crosses(job, k, hot) and not work.is_capped(job, k)]
    if not on or not free:
        return False
    taken = sum(assigned[k].weight * cut for k in on)
    if taken <= 1e-9:
        return False
    base = sum(assigned[k].weight for k in free)
    new: dict[FlowKey, float] = {k: assigned[k].weight for k in keys}
    for k in on:
        new[k] = assigned[k].weight * (1.0 - cut)
    for k in free:
        share = assigned[k].weight / base if base > 1e-12 else 1.0 / len(free)
        new[k] = assigned[k].weight + taken * share
    had, total = sum(assigned[k].weight for k in keys), sum(new.values())
    for k in keys:  # the channel's share of its connection stays exactly what it was
        w = min(1.0, max(0.0, new[k] * had / total))
        if abs(w - assigned[k].weight) > 1e-12:
            work.set(job, replace(assigned[k], weight=w))
    return True


def _best_route(work: _Work, cands: Candidates, a: Assignment, dem: float, caps: Mapping[DirectedLink, float],
                avoid: set[DirectedLink], headroom: float) -> Route | None:
    """The route of the flow's port pair (not its own path) whose hottest direction is coolest
    with the flow on it, among those crossing no `avoid` direction and staying within `headroom`."""
    own = set(work.hops(a.path))
    best: tuple[float, tuple[str, ...]] | None = None
    chosen = None
    for r in cands.port_routes(a.src_node, a.dst_node):
        if r.path == a.path or any(d in avoid for d in r.directed):
            continue
        worst = max(((work.load[d] + (0.0 if d in own else dem)) / caps[d] if caps.get(d) else float("inf"))
                    for d in r.directed)
        if worst > headroom + 1e-9:
            continue
        if best is None or (worst, r.path) < best:
            best, chosen = (worst, r.path), r
    if chosen is not None and chosen.sport == UNKNOWN:
        sport = cands.sport_for(chosen)
        chosen = None if sport is None else chosen._replace(sport=sport)
    return chosen


# The latest sample is the confirming one when their times are at most this far apart. Both
# are the same poll's integer microseconds today; the margin keeps the match when one of them
# took a float on its way (a time via float seconds, int(5.35 * 1e6) = 5349999; a document store
# giving a number back as a float). No two samples of one direction come this close: a switch
# agent's polls and re-polls are 0.2 s apart or more (its `repoll_after_s`, `MIN_WINDOW_S`).
SAME_SAMPLE_US = 1000


def confirmed_now(c: CongestedDirection, sample: LatestSample | None) -> bool:
    """The latest sample is the one whose windows confirmed lost capacity (`te.congestion`, 5):
    together they showed a standing queue under half the capacity, so it counts as showing the
    queue even when its own window does not mark. Testbed: the packet-counting marker left
    0.37 s re-poll windows of a throttled link at 0-0.9 % while the 0.7 s they confirmed marked
    5-7 %; judged on that window alone, the answer waited for the next periodic round (1 s).
    Matched within `SAME_SAMPLE_US`, not by equality."""
    if c.lost_capacity is not True or sample is None or c.lost_confirmed_us is None:
        return False
    return abs(round(sample.t_us) - round(c.lost_confirmed_us)) <= SAME_SAMPLE_US


def after_the_drop(c: CongestedDirection, sample: LatestSample | None) -> bool:
    """The latest sample is the one that confirmed lost capacity or a later one: its window lies
    wholly after the detector's first lost-capacity sample (`te.congestion`, 5), so a rate read
    from it is the link's new rate, not a mix of the old and the new one (the spanning sample
    the first-estimate correction is for). A first estimate from such a window is not corrected
    down: testbed, 2 s polls, a throttled direction solved with 11.9 Mbit/s from its confirming
    window was "corrected" to 7.4 a second later, its rate then paced by its twin, not yet
    answered (no round gave the twin its first solution yet: the guard for that did not apply);
    the ring stayed at 0.51 of ideal where 0.62 is allowed."""
    if c.lost_capacity is not True or c.lost_confirmed_us is None or sample is None:
        return False
    return round(sample.t_us) >= round(c.lost_confirmed_us) - SAME_SAMPLE_US


def delivered_gbps(c: CongestedDirection, sample: LatestSample | None, config: RebalanceConfig) -> float | None:
    """What the direction carries with a queue: the latest raw interval's rate when that
    interval shows a standing queue (the smoothed rate lags a throttle by its time constant:
    2 s after a link fell to a quarter it still read half), else the detector's smoothed rate."""
    if sample is not None and sample.gbps is not None and (sample.queue_standing(config) or confirmed_now(c, sample)):
        return sample.gbps if c.measured_gbps is None else min(sample.gbps, c.measured_gbps)
    return c.measured_gbps


def is_degraded(c: CongestedDirection, rate: float | None, config: RebalanceConfig,
                sample: LatestSample | None = None) -> bool:
    """Carrying less than `degraded_fraction` of its capacity with a standing queue in its
    latest sample (when there is one). Marks above the leave threshold alone are not enough:
    on the testbed healthy links of a ring slowed elsewhere (or still ramping up) carried 0.3-0.5
    of their capacity while bursts marked 0.6-1.8 % of packets, inside the detector's
    hysteresis; called degraded, their "capacity" went into the weights program and a ring
    re-weighted before any throttle ran at 0.13 of ideal after it."""
    if sample is not None and not sample.queue_standing(config) and not confirmed_now(c, sample):
        return False
    return rate is not None and c.capacity_gbps > 0 and rate < config.degraded_fraction * c.capacity_gbps


def falling(c: CongestedDirection, sample: LatestSample | None, config: RebalanceConfig) -> bool:
    """The latest interval's rate is below `1 - degraded_fall` of the smoothed rate (which
    includes it): the direction delivers less than it did. Unknown (no raw rate): False."""
    if sample is None or sample.gbps is None or c.measured_gbps is None:
        return False
    return sample.gbps < (1 - config.degraded_fall) * c.measured_gbps


def judged_degraded(c: CongestedDirection, rate: float | None, config: RebalanceConfig,
                    sample: LatestSample | None, episodes: Mapping[DirectedLink, Episode]) -> bool:
    """`is_degraded`, and for a direction that no degraded episode holds yet but whose planned
    load an earlier solution raised, only while its rate falls (`RebalanceConfig.degraded_fall`).
    A direction no degraded episode holds is newly degraded only if slow for a while (its
    smoothed rate under `degraded_fraction` too) or with its queue building, and either way,
    where the detector says, with lost capacity confirmed (`CongestedDirection.lost_capacity`:
    windows spanning `fast_confirm_span_s` after the first sample). One sample cannot tell a
    link that lost capacity from a healthy one, congested at line rate, whose traffic ended
    inside the interval with a marking tail: solved as degraded with that partial rate, its
    weights would stay cut for the hold-down. Slow for a while is no exception (testbed, j13d:
    a healthy uplink of a ring slowed for one iteration by CPU, 23.7 of 50 Mbit/s smoothed and
    marking 3.5 %, was solved as degraded on it 1.4 s before any throttle)."""
    if not is_degraded(c, rate, config, sample):
        return False
    d = (c.link, c.direction)
    ep = episodes.get(d)
    if ep is not None and ep.degraded:
        return True
    if not ((_slow_for_a_while(c, config) or _queue_building(c, sample, config) or confirmed_now(c, sample))
            and c.lost_capacity is not False):
        return False
    raised = any(d in e.raised for e in episodes.values() if e.degraded)
    return not raised or falling(c, sample, config)


def _slow_for_a_while(c: CongestedDirection, config: RebalanceConfig) -> bool:
    return c.measured_gbps is not None and c.measured_gbps < config.degraded_fraction * c.capacity_gbps


def _queue_building(c: CongestedDirection, sample: LatestSample | None, config: RebalanceConfig) -> bool:
    """The latest interval marks (or pauses) `degraded_rise` times the smoothed level or more.
    Without a latest sample (a caller that has none): True."""
    if sample is None:
        return True
    if sample.ecn_marked_fraction is not None and c.ecn_marked_fraction is not None:
        if sample.ecn_marked_fraction >= config.degraded_rise * c.ecn_marked_fraction:
            return True
    elif sample.ecn_marked_fraction is not None and sample.ecn_marked_fraction >= config.ecn_enter_fraction:
        return True
    return sample.pfc_max_per_s >= max(config.pfc_enter_per_s, config.degraded_rise * c.pfc_pauses_per_s)


def at_planned_load(c: CongestedDirection, config: RebalanceConfig, rate: float | None = None,
                    sample: LatestSample | None = None, degraded: bool | None = None) -> bool:
    """Marking only because it runs at the load the plan gives it, within capacity (see
    `RebalanceConfig.self_load_margin`): nothing to answer. `rate`: what it delivers
    (`delivered_gbps`; default the smoothed rate)."""
    rate = c.measured_gbps if rate is None else rate
    if c.capacity_gbps <= 0 or rate is None:
        return False
    if is_degraded(c, rate, config, sample) if degraded is None else degraded:
        return False  # degraded: the link, not the load
    return (c.planned_gbps <= c.capacity_gbps * (1 + 1e-9)
            and (c.background_gbps or 0.0) <= config.self_load_margin * c.capacity_gbps)


def _calm_now(c: CongestedDirection, latest: Mapping[DirectedLink, LatestSample], config: RebalanceConfig) -> bool:
    """The latest sample shows no queue (a fraction at or below the leave threshold, no PFC):
    the detector still holds the direction congested (its leave hysteresis), but nothing there
    needs answering now. Seen on the testbed: when a throttled link slowed a ring, the ring's
    other links carried a quarter of their capacity, still in hysteresis, and looked degraded;
    counted as congested, they left the throttled link's flows no sibling to shift weight to."""
    s = latest.get((c.link, c.direction))
    return (s is not None and s.ecn_marked_fraction is not None and not s.still_marking(config)
            and not confirmed_now(c, s))


def _degraded_weights(work: _Work, hot_list: list[CongestedDirection], rate: Mapping[DirectedLink, float | None],
                      latest: Mapping[DirectedLink, LatestSample], episodes: Mapping[DirectedLink, Episode],
                      out_episodes: dict[DirectedLink, Episode], actions: list[Action], movable: set[str],
                      caps: Mapping[DirectedLink, float], now_us: int, config: RebalanceConfig,
                      degraded: set[DirectedLink], held_dirs: set[DirectedLink]) -> None:
    """Step 1 for degraded directions: the weights of every live connection crossing one are
    solved by `te.weights.balance` (paths and ports kept: the sockets stay open), each degraded
    direction's delivered rate standing for its capacity, the other jobs' and connections'
    load fixed, the measured background of the other answered directions counted. Cutting a
    degraded direction's weights to zero instead overloads the siblings (the plan has them at
    full utilization): on the testbed's 2x2x2 fabric with one spine link at a quarter the ring
    then runs at 0.5 of its rate where the capacity left allows 0.62; the program finds that."""
    need: dict[DirectedLink, tuple[CongestedDirection, float]] = {}
    firsts: set[DirectedLink] = set()
    whole: set[DirectedLink] = set()  # first estimates from a window wholly after the drop
    confirm: dict[DirectedLink, tuple[CongestedDirection, float]] = {}
    for c in hot_list:
        d = (c.link, c.direction)
        r = rate.get(d)
        sample = latest.get(d)
        if r is None or d not in degraded:
            continue
        ep = episodes.get(d)
        first = ep is None or ep.weights_at_us is None or ep.capacity_gbps is None
        if first:
            need[d] = (c, r)
            if after_the_drop(c, sample):
                whole.add(d)
            if ep is None or ep.weights_at_us is None:  # (not one that had nothing to solve)
                firsts.add(d)
            continue
        if ep is None or ep.capacity_gbps is None or sample is None or sample.t_us <= (ep.last_action_us() or 0) or not sample.queue_standing(config):
            continue
        if r > (1 + config.resolve_rise) * ep.capacity_gbps or r < (1 - config.resolve_drop) * ep.capacity_gbps:
            need[d] = (c, r)
        elif not ep.confirmed and r < (1 - config.resolve_rise) * ep.capacity_gbps:
            confirm[d] = (c, r)
    # A first estimate is corrected only in a round where no other direction gets its first
    # solution: that one paces the collective now, so this one's rate says nothing of its
    # capacity (testbed: one direction re-solved from 11.9 to 6.1 Mbit/s while its twin,
    # entering, paced the ring).
    for d, pending in confirm.items():
        if not firsts - {d}:
            need[d] = pending
    if not need:
        return
    capacity = dict(caps)
    for d, ep in episodes.items():  # earlier degraded directions keep the rate they were solved with
        if ep.degraded and ep.capacity_gbps is not None:
            capacity[d] = min(capacity.get(d, ep.capacity_gbps), ep.capacity_gbps)
    for d, (_, r) in need.items():
        capacity[d] = max(r, 1e-9)
    reduced = {d for d in capacity if capacity[d] < caps.get(d, 0.0)}
    background: dict[DirectedLink, float] = defaultdict(float)
    for c in hot_list:
        if (c.link, c.direction) not in need:
            background[(c.link, c.direction)] += c.background_gbps or 0.0
    conns: dict[tuple[str, Connection], list[tuple[str, FlowKey]]] = {}
    share: dict[tuple[str, Connection], float] = {}
    terms: dict[DirectedLink, list[tuple[float, tuple[str, FlowKey]]]] = defaultdict(list)
    for job, by in work.connections.items():
        assigned = work.assigned[job]
        for conn, keys in by.items():
            total = sum(assigned[k].weight for k in keys)
            dem = sum(work.demand.get(work.src[job].get(k, ("", "")), 0.0) for k in keys)
            x = dem / total if total > 0 else 0.0
            free = job in movable and len(keys) > 1 and any(work.crosses(job, k, reduced) for k in keys)
            if free:
                conns[(job, conn)] = [(job, k) for k in keys]
                share[(job, conn)] = total
            for k in keys:
                for d in work.hops(assigned[k].path):
                    if free:
                        terms[d].append((x, (job, k)))
                    else:
                        background[d] += x * assigned[k].weight
    upper = {(job, k): work.assigned[job][k].weight for members in conns.values() for job, k in members
             if work.is_capped(job, k)}
    # Directions an earlier round answered (live episodes) or took load off (held) take none back,
    # a held one answered now included: its estimate may exceed what it carries after the earlier
    # round (testbed: a link throttled again 56 s after a restore lowered its load got 0.23 of a
    # connection back from its own first solution).
    limit = {d: background.get(d, 0.0) + sum(x * work.assigned[job][k].weight for x, (job, k) in terms.get(d, ()))
             for d in (set(episodes) - set(need)) | held_dirs}
    got = balance(conns, share, terms, background, capacity, upper=upper, limit=limit) if conns else None
    if got is None:
        return  # nothing to solve (or no optimum): the moves step acts on these directions
    changed: set[tuple[str, Connection]] = set()
    delta: dict[DirectedLink, float] = defaultdict(float)  # planned load change per direction
    for (job, conn), members in conns.items():
        total = sum(work.assigned[job][k].weight for _, k in members)
        dem = sum(work.demand.get(work.src[job].get(k, ("", "")), 0.0) for _, k in members)
        x = dem / total if total > 0 else 0.0
        for _, k in members:
            a = work.assigned[job][k]
            w = float(got.weights[(job, k)])
            if abs(w - a.weight) > 1e-9:
                for h in work.hops(a.path):
                    delta[h] += x * (w - a.weight)
                work.cause = next((d for d in need if work.crosses(job, k, (d,))), None)
                work.set(job, replace(a, weight=w))
                changed.add((job, conn))
    raised = frozenset(h for h, v in delta.items() if v > 1e-9)
    for d, (c, r) in need.items():
        if not any(work.crosses(job, k, (d,)) for (job, _), members in conns.items()
                   for _, k in members):
            continue  # no connection here has weights to solve: the moves step drains it
        ep = episodes.get(d) or Episode(c.link, c.direction, c.since_us)
        mine = {(job, conn) for job, conn in changed
                if any(work.crosses(job, k, (d,)) for k in work.connections[job][conn])}
        per_job: dict[str, int] = defaultdict(int)
        for job, conn in sorted(mine):
            per_job[job] += len(work.connections[job][conn])
        for job, n in sorted(per_job.items()):
            doc = congestion_doc(c, WEIGHTS, now_us, True)
            doc["capacity_used_gbps"] = _r(r)
            doc["max_utilization_after"] = _r(got.max_utilization)
            actions.append(Action(job, c.link, c.direction, WEIGHTS, n, now_us, doc))
        out_episodes[d] = replace(ep, since_us=c.since_us, degraded=True, weights_at_us=now_us, capacity_gbps=r,
                                  lowered=frozenset(set(ep.lowered) | mine), raised=ep.raised | (raised - {d}),
                                  confirmed=ep.capacity_gbps is not None or d in whole)


def decide(view: FabricView, cands: Candidates, jobs: Mapping[str, JobInput], demand: Mapping[Nic, float],
           congested: Iterable[CongestedDirection], latest: Mapping[DirectedLink, LatestSample],
           episodes: Mapping[DirectedLink, Episode], held: Mapping[Hashable, int], now_us: int,
           config: RebalanceConfig = RebalanceConfig(), enabled: bool = True,
           capped: Mapping[Hashable, WeightHold] | None = None,
           held_directions: Mapping[DirectedLink, int] | None = None) -> Decision:
    """One round (see the module docstring). `jobs`: every planned job (those with
    `rebalance=False` are load, never changed); `demand`: per-flow demand per NIC over all
    active jobs; `latest`: each congested direction's latest raw sample; `held`: flow keys
    `(job, FlowKey)` -> hold-down end (µs); `capped`: flows whose weight an earlier round
    lowered (`Decision.lowered`, kept until they end); `held_directions`: directions whose
    load an earlier round lowered -> hold end (`Decision.lowered_directions`); `enabled=False`
    (rebalancing off for the fabric): episodes are still tracked and ended, nothing is changed."""
    caps = {(link.name, d): link.capacity_gbps for link in view.fabric.links for d in ("ab", "ba")}
    congested = list(congested)
    rate = {(c.link, c.direction): delivered_gbps(c, latest.get((c.link, c.direction)), config) for c in congested}
    degraded_now = {(c.link, c.direction) for c in congested
                    if judged_degraded(c, rate[(c.link, c.direction)], config, latest.get((c.link, c.direction)),
                                       episodes)}
    # Directions a degraded direction's solved weights loaded, not degraded themselves and
    # with no background: the program put that load there knowingly (their highest utilization
    # is what it minimised), so their marks are its expected price. Answering them (a cut, then
    # moves) undoes the solution and moves live sockets' flows (testbed 2x3x2: healthy uplinks
    # at 0.87 of capacity marking 2 % were cut and moved; the ring fell from 0.95 to 0.83).
    # (Background here: measured above the weighted planned load; `c.planned_gbps` counts
    # every flow at its whole demand, whatever its weight.)
    loaded = {d for ep in episodes.values() if ep.degraded for d in ep.raised} - degraded_now
    work = _Work(view, jobs, demand, capped, now_us)
    before = work.weighted_load()
    held_dirs = {d for d, until in (held_directions or {}).items() if until > now_us}
    work.held_dirs = held_dirs
    wload = before if loaded else {}
    hot_list = [c for c in congested
                if not at_planned_load(c, config, rate[(c.link, c.direction)], latest.get((c.link, c.direction)),
                                       (c.link, c.direction) in degraded_now)
                and not _calm_now(c, latest, config)
                and not ((c.link, c.direction) in loaded
                         and (c.measured_gbps or 0.0) - wload.get((c.link, c.direction), 0.0)
                         <= config.self_load_margin * c.capacity_gbps)]
    hot = {(c.link, c.direction) for c in hot_list}
    out_episodes: dict[DirectedLink, Episode] = {}
    actions: list[Action] = []
    holds: dict[Hashable, tuple[int, str, str, str]] = {}
    for c in hot_list:  # the detector's order: most utilized first
        work.load[(c.link, c.direction)] += c.background_gbps or 0.0
    movable = {n for n, j in jobs.items() if j.rebalance}
    if enabled:
        _degraded_weights(work, hot_list, rate, latest, episodes, out_episodes, actions, movable, caps, now_us,
                          config, degraded_now, held_dirs)
    # Directions no flow should take load onto: the congested ones answered now, and every one
    # with a live episode even when its latest sample is calm (it is calm because its load was
    # taken off; a sibling step or a move onto it would put it back within the hold-down: a flap).
    avoid = hot | set(episodes) | set(out_episodes) | held_dirs
    for c in hot_list:
        d = (c.link, c.direction)
        if d in out_episodes:
            continue  # a degraded direction whose weights were solved in this round
        ep = episodes.get(d)
        degraded = d in degraded_now
        # A direction that left and entered congestion again before its episode ended (the
        # hold-down after its weights step) keeps its episode: no second cut, moves as before.
        ep = (Episode(c.link, c.direction, c.since_us, degraded=degraded) if ep is None
              else replace(ep, since_us=c.since_us, degraded=degraded))
        if not enabled:
            out_episodes[d] = ep
            continue
        if ep.weights_at_us is None and not degraded:
            cut = config.weight_cut
            lowered = set(ep.lowered)
            per_job: dict[str, int] = defaultdict(int)
            for job, key in sorted(set(work.crossing[d])):
                if job not in movable:
                    continue
                conn = _connection(key)
                if (job, conn) in lowered:
                    continue
                work.cause = d
                if _cut_weights(work, job, conn, d, avoid, cut):
                    lowered.add((job, conn))
                    per_job[job] += len(work.connections[job][conn])
            for job, n in sorted(per_job.items()):
                actions.append(Action(job, c.link, c.direction, WEIGHTS, n, now_us,
                                      congestion_doc(c, WEIGHTS, now_us, degraded)))
            out_episodes[d] = replace(ep, weights_at_us=now_us, lowered=frozenset(lowered))
            continue
        sample = latest.get(d)
        last = ep.last_action_us() or 0
        if degraded and ep.weights_at_us is None:
            ep = replace(ep, weights_at_us=now_us)  # no weights could be solved: moves next
        if degraded and ep.capacity_gbps is not None:
            now_rate = rate[d]
            if (not ep.confirmed and sample is not None and sample.t_us > last and sample.queue_standing(config)
                    and now_rate is not None and now_rate >= (1 - config.resolve_rise) * ep.capacity_gbps):
                ep = replace(ep, confirmed=True)  # a whole standing-queue sample agreed with it
            # Its weights were solved with what it delivers: no moves. A move gives a flow a new
            # source port, which a live socket cannot take (the shim then ignores every later
            # weight for that connection), while the plan would show it off the link: the next
            # solution would be made on paths the live sockets are not on. New connections take
            # the solved weights too (same ports, same paths).
            out_episodes[d] = ep
            continue
        # A degraded direction is drained at the next sample whatever it shows (its flows
        # may carry nothing after a zero weight, yet stay pinned to it).
        if sample is None or sample.t_us <= last or not (degraded or sample.still_marking(config)):
            out_episodes[d] = ep
            continue
        # Step 2: moves.
        carried = min(c.capacity_gbps, c.measured_gbps) if c.measured_gbps is not None else c.capacity_gbps
        target = 0.0 if degraded else config.target_utilization * carried
        flows = [(demand.get(work.src[job][key], 0.0), job, key) for job, key in set(work.crossing[d])
                 if job in movable and work.crosses(job, key, (d,)) and held.get((job, key), 0) <= now_us]
        flows.sort(key=lambda x: (-x[0], x[1], x[2]))
        per_job_moved: dict[str, int] = defaultdict(int)
        moved_conns: set[tuple[str, Connection]] = set()
        for dem, job, key in flows:
            if work.load[d] <= target + 1e-9:
                break
            a = work.assigned[job][key]
            r = _best_route(work, cands, a, dem, caps, avoid, config.headroom)
            if r is None:
                continue
            for x in work.hops(a.path):
                work.load[x] -= dem
            for x in r.directed:
                work.load[x] += dem
            work.set(job, Assignment(key, r.src_node, r.dst_node, r.sport, a.weight, r.path, r.links))
            per_job_moved[job] += 1
            moved_conns.add((job, _connection(key)))
            holds[(job, key)] = (now_us + int(config.hold_down_s * 1e6), f"moved off {c.link} {c.direction}",
                                 c.link, c.direction)
        work.cause = None
        for job, conn in sorted(moved_conns):  # connections now clear of congestion: default weights
            if not any(work.crosses(job, k, avoid) for k in work.connections[job][conn]):
                work.equalize(job, conn)
        for job, n in sorted(per_job_moved.items()):
            actions.append(Action(job, c.link, c.direction, MOVES, n, now_us,
                                  congestion_doc(c, MOVES, now_us, degraded)))
        out_episodes[d] = replace(ep, moves_at_us=now_us, stuck=not per_job_moved)
    # Episodes of directions no longer congested: end after the hold-down, restoring weights.
    # A direction the detector still holds congested but that is not answered now (calm at
    # this sample, or at its planned load) keeps its episode: its queue may be calm because
    # the cut worked, and restoring then would flap (cut, calm, restore, mark, cut).
    held_congested = {(c.link, c.direction) for c in congested}
    ending: list[DirectedLink] = []
    for d, ep in episodes.items():
        if d in hot:
            continue
        if d in held_congested or (ep.weights_at_us is not None
                                   and now_us - ep.weights_at_us < config.hold_down_s * 1e6):
            out_episodes[d] = ep
            continue
        ending.append(d)
    live = hot | set(out_episodes)  # what a restored connection may not cross: the episodes going on
    for d in ending:
        ep = episodes[d]
        restored: dict[str, int] = defaultdict(int)
        waiting: set[tuple[str, Connection]] = set()
        work.cause = None
        for job, conn in sorted(ep.lowered):
            if job not in work.connections or conn not in work.connections[job] or job not in movable:
                continue
            if any(work.crosses(job, k, live) for k in work.connections[job][conn]):
                continue
            if not work.can_equalize(job, conn):
                waiting.add((job, conn))  # a flow of it lowered later, or a direction it would load held: not yet
                continue
            if work.equalize(job, conn):
                restored[job] += len(work.connections[job][conn])
        if waiting:
            out_episodes[d] = replace(ep, lowered=frozenset(waiting))
        for job, n in sorted(restored.items()):
            actions.append(Action(job, ep.link, ep.direction, RESTORED, n, now_us,
                                  {"link": ep.link, "direction": ep.direction, "step": RESTORED, "at_us": now_us,
                                   "since_us": ep.since_us}))
    plans = {n: work.assigned[n] for n in sorted(work.changed)
             if any(work.assigned[n][k] != a for k, a in jobs[n].assignments.items())}
    until = now_us + int(config.hold_down_s * 1e6)
    weight_holds: dict[Hashable, WeightHold] = {
        (job, k): WeightHold(until, *(cause or ("", "")), plans[job][k].path) for (job, k), cause in work.lowered.items()
        if job in plans and plans[job][k].weight < jobs[job].assignments[k].weight - HELD_CHANGE}
    after = work.weighted_load() if plans else before
    fell = {d: until for d, x in before.items() if after.get(d, 0.0) < x - HELD_CHANGE * max(1.0, x)}
    return Decision(plans, actions, out_episodes, holds, weight_holds, fell)
