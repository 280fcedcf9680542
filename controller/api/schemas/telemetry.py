"""Request schemas of telemetry ingest; a batch with any invalid record fails whole."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from controller.api.schemas.common import Name, Strict
from controller.domain import coll_packed

# A batch's total work is bounded, not only each list: peers over all records, flows over all
# peers, ports over all samples (the body limit of the route bounds the bytes: api.limits). The
# collective limits live with the packed form (domain.coll_packed), which the node agent shares.
MAX_BATCH_RECORDS = coll_packed.MAX_RECORDS
MAX_BATCH_PEERS = coll_packed.MAX_BATCH_PEERS
MAX_BATCH_FLOWS = coll_packed.MAX_BATCH_FLOWS
MAX_BATCH_PORTS = 16_384
RANK_MAX = 2**31 - 1
US = Field(ge=0, lt=2**62)


MAX_FLOWS_PER_PEER = 64
NET_US_DOC = ("Microseconds during which at least one chunk was handed to the network and not yet "
              "completed, overlaps counted once (optional; up to the report time while in flight).")


class FlowCreate(Strict):
    """One flow (QP or TCP socket) of the connection, by its source port (the assignment's
    `udp_sport`): bytes it sent (on a `send` entry) or received (on a `recv` entry) so far."""

    sport: int = Field(ge=0, le=65535)
    bytes: int = Field(ge=0, lt=2**62)
    t_last_us: int | None = US
    net_us: int | None = Field(None, ge=0, lt=2**62, description=NET_US_DOC)


class PeerCreate(Strict):
    peer: int = Field(ge=0, le=RANK_MAX)
    dir: Literal["send", "recv"]
    bytes: int = Field(ge=0, lt=2**62)
    t_first_us: int | None = US
    t_last_us: int | None = US
    done: bool
    net_us: int | None = Field(None, ge=0, lt=2**62, description=NET_US_DOC)
    flows: list[FlowCreate] = Field(default_factory=list, max_length=MAX_FLOWS_PER_PEER,
                                    description="Optional per-flow progress of this connection.")

    @model_validator(mode="after")
    def _times(self) -> PeerCreate:
        if (self.t_first_us is None) != (self.t_last_us is None):
            raise ValueError("t_first_us and t_last_us are both null (no byte moved yet) or both set")
        if self.t_first_us is not None and self.t_last_us is not None and self.t_last_us < self.t_first_us:
            raise ValueError("t_last_us is before t_first_us")
        if len({f.sport for f in self.flows}) != len(self.flows):
            raise ValueError("two flows with the same sport")
        return self


class CollectiveCreate(Strict):
    """`rank` and each `peer` are ranks of the job (as in its `ranks`), so a record of a
    sub-communicator names the same ranks the planner and the detectors know; `nranks` is
    the communicator's size."""

    job: Name
    comm: str = Field(min_length=1, max_length=64)
    rank: int = Field(ge=0, le=RANK_MAX, description="The job rank that reports (not the rank within the communicator).")
    nranks: int = Field(ge=1, le=1_000_000, description="Ranks in the communicator.")
    op: str = Field(min_length=1, max_length=64)
    seq: int = Field(ge=0, lt=2**62)
    bytes: int = Field(ge=0, lt=2**62)
    t_start_us: int = Field(gt=0, lt=2**62)
    t_end_us: int | None = US
    peers: list[PeerCreate] = Field(default_factory=list, max_length=4096)

    @model_validator(mode="after")
    def _consistent(self) -> CollectiveCreate:
        if self.t_end_us is not None and self.t_end_us < self.t_start_us:
            raise ValueError("t_end_us is before t_start_us")
        for p in self.peers:
            if p.peer == self.rank:
                raise ValueError(f"peer {p.peer} is the reporting rank itself")
        return self


class CollectiveBatch(Strict):
    """An empty `records` list is a heartbeat: the host's agent is alive with nothing to report
    (a host silent for `C4_TELEMETRY_GAP_S` is in a telemetry gap)."""

    host: Name
    records: list[CollectiveCreate] = Field(max_length=MAX_BATCH_RECORDS)

    @model_validator(mode="after")
    def _bounded(self) -> CollectiveBatch:
        peers = sum(len(r.peers) for r in self.records)
        if peers > MAX_BATCH_PEERS:
            raise ValueError(f"the batch holds {peers} peer entries; at most {MAX_BATCH_PEERS} per batch")
        flows = sum(len(p.flows) for r in self.records for p in r.peers)
        if flows > MAX_BATCH_FLOWS:
            raise ValueError(f"the batch holds {flows} flow entries; at most {MAX_BATCH_FLOWS} per batch")
        return self


class ShapePeerCreate(Strict):
    """A peer entry of a packed batch's shape (docs/telemetry-packed.md): a JSON peer entry
    without its counters; `net`: the record's `net_us` for this peer is reported."""

    peer: int = Field(ge=0, le=RANK_MAX)
    dir: Literal["send", "recv"]
    done: bool
    net: bool = False
    flows: list[FlowCreate] = Field(default_factory=list, max_length=MAX_FLOWS_PER_PEER)

    @model_validator(mode="after")
    def _flows(self) -> ShapePeerCreate:
        if len({f.sport for f in self.flows}) != len(self.flows):
            raise ValueError("two flows with the same sport")
        return self


class CollectiveShape(Strict):
    """A record of a packed batch without its counters: what `CollectiveCreate` holds besides
    `seq`, `bytes`, the times and the peers' counters. At most 8 peers (the shim's limit);
    `truncated`: the reporting side left peers out."""

    job: Name
    comm: str = Field(min_length=1, max_length=64)
    rank: int = Field(ge=0, le=RANK_MAX)
    nranks: int = Field(ge=1, le=1_000_000)
    op: str = Field(min_length=1, max_length=64)
    peers: list[ShapePeerCreate] = Field(default_factory=list, max_length=8)
    truncated: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> CollectiveShape:
        for p in self.peers:
            if p.peer == self.rank:
                raise ValueError(f"peer {p.peer} is the reporting rank itself")
        return self


class PackedHeader(Strict):
    """The JSON header of a packed batch (`application/x-c4-collectives`)."""

    host: Name
    shapes: list[CollectiveShape] = Field(max_length=MAX_BATCH_RECORDS)


Counter = Annotated[int, Field(ge=0, lt=2**64)]
PfcCounters = dict[Annotated[str, StringConstraints(pattern=r"^[0-7]$")], Counter]


OperStatus = Literal["up", "down", "testing", "unknown", "dormant", "notPresent", "lowerLayerDown"]


class PortCounters(Strict):
    port: Name
    oper_status: OperStatus | None = Field(
        None, description="IF-MIB ifOperStatus as the switch reports it (an extension to API.md). A fabric "
                          "link with an end reported anything but `up` in a fresh sample is reported down: "
                          "C4D names it first for a hang whose stuck flows cross it.")
    tx_bytes: Counter | None = None
    rx_bytes: Counter | None = None
    tx_pkts: Counter | None = None
    rx_pkts: Counter | None = None
    ecn_marked_pkts: Counter | None = None
    rx_discards: Counter | None = None
    tx_discards: Counter | None = None
    queue_drops: Counter | None = Field(None, description="Packets dropped by the egress queue (e.g. a Linux qdisc).")
    pfc_rx_pause: PfcCounters = Field(default_factory=dict, description="per priority, keys '0'..'7'")
    pfc_tx_pause: PfcCounters = Field(default_factory=dict, description="per priority, keys '0'..'7'")

    def flat(self) -> dict[str, int]:
        """Counters as one mapping: `tx_bytes`, ..., `pfc_rx_pause.3`."""
        out = {k: v for k, v in self.model_dump(exclude={"port", "oper_status", "pfc_rx_pause", "pfc_tx_pause"}).items()
               if v is not None}
        out.update({f"pfc_rx_pause.{p}": v for p, v in self.pfc_rx_pause.items()})
        out.update({f"pfc_tx_pause.{p}": v for p, v in self.pfc_tx_pause.items()})
        return out


class SwitchSample(Strict):
    switch: Name
    t_us: int = Field(gt=0, lt=2**62)
    ports: list[PortCounters] = Field(max_length=1024)
    counter_epoch: str | None = Field(
        None, min_length=1, max_length=64,
        description="Opaque; changes when the counters restarted (switch or agent restart). Two polls of a "
                    "port with different epochs give no rate for the interval between them.")


class SwitchBatch(Strict):
    samples: list[SwitchSample] = Field(min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _bounded(self) -> SwitchBatch:
        ports = sum(len(s.ports) for s in self.samples)
        if ports > MAX_BATCH_PORTS:
            raise ValueError(f"the batch holds {ports} port entries; at most {MAX_BATCH_PORTS} per batch")
        return self
