"""Both sides of FORMAT.md against its one example: the agent's `sample_doc` writes it, the
controller's schema reads it."""

from __future__ import annotations

import json
from pathlib import Path

from controller.api.schemas.telemetry import SwitchBatch
from switch_agents.samples import sample_doc

EXAMPLE = Path(__file__).resolve().parents[3] / "switch_agents" / "example_post.json"


def test_the_controller_reads_the_example() -> None:
    doc = json.loads(EXAMPLE.read_text())
    batch = SwitchBatch.model_validate(doc)
    first = batch.samples[0]
    assert first.counter_epoch == "7f3a9c01.0"
    assert first.ports[0].flat() == {"rx_bytes": 456, "rx_discards": 0, "rx_pkts": 3, "tx_bytes": 123,
                                     "tx_discards": 1, "tx_pkts": 7, "ecn_marked_pkts": 0, "queue_drops": 0,
                                     "pfc_rx_pause.3": 0, "pfc_tx_pause.3": 2}
    assert [p.oper_status for p in first.ports] == ["up", "down"]
    assert batch.samples[1].ports[0].oper_status is None  # optional: absent when not polled


def test_the_agent_writes_the_example() -> None:
    doc = json.loads(EXAMPLE.read_text())
    for sample in doc["samples"]:
        ports = {}
        oper = {p["port"]: p["oper_status"] for p in sample["ports"] if "oper_status" in p}
        for p in sample["ports"]:
            flat = {k: v for k, v in p.items() if isinstance(v, int)}
            for counter in ("pfc_rx_pause", "pfc_tx_pause"):
                flat.update({f"{counter}.{prio}": n for prio, n in p.get(counter, {}).items()})
            ports[p["port"]] = flat
        assert sample_doc(sample["switch"], sample["t_us"], sample["counter_epoch"], ports, oper) == sample
