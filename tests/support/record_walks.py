"""Re-record `tests/data/snmp/<profile>.json`, the walks the agent's unit tests replay.

    .venv/bin/python -m tests.support.record_walks

Each vendor profile's recording is two polls, 2 s apart, of a switch that snmpsim serves from
the data files `tests.support.snmpsim` writes (the rates in `SWITCHES` below): snmpsim, not
vendor hardware, so they pin the agent's parsing of each MIB's layout, not a vendor's quirks.
The `linux` recording comes from Debian's snmpd with the pass_persist extension and is made
by the netns test tier (`tests/switch_agents/test_snmpd_netns.py --record`), not here.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from switch_agents.poller import TargetPlan, TargetPoller
from switch_agents.profiles import PROFILES
from switch_agents.recording import RecordingClient
from switch_agents.snmp import Credentials, PysnmpClient, Target
from tests.support.snmpsim import PortRates, Snmpsim, switch_records, write_switch

OUT = Path(__file__).resolve().parents[1] / "data" / "snmp"


def ports(prefix: str, step: int = 1) -> list[PortRates]:
    return [PortRates(i + 1, f"{prefix}{i * step}", tx_bytes=1e9 * (i + 1), rx_bytes=5e8 * (i + 1),
                      tx_pkts=1e6 * (i + 1), rx_pkts=5e5 * (i + 1), discards=2.0, pfc_rx={3: 100.0 * (i + 1)},
                      pfc_tx={3: 10.0, 4: 1.0}, ecn=5e4 * (i + 1), queue_drops=40.0) for i in range(3)]


SWITCHES = {  # profile -> (community, ports, Counter32 initial value); recorded in this order
    "ieee8021": ("ieee8021", ports("swp"), 2**32 - 600),  # the PFC Counter32s wrap between the polls
    "sonic": ("sonic", ports("Ethernet", 4), 0),
    "nexus": ("nexus", ports("Eth1/"), 0),
    "arista": ("arista", ports("Ethernet"), 0),
    "mellanox": ("mellanox", ports("Eth1/"), 0),
}


async def _record(sim: Snmpsim, profile: str, community: str) -> dict[str, object]:
    p = PROFILES[profile]
    plan = TargetPlan(community, Target(community, "127.0.0.1", sim.port, Credentials("2c", community=community),
                                       timeout_s=2.0, retries=1), p, ("*",), ())
    client = RecordingClient(PysnmpClient())
    poller = TargetPoller(plan, client, "rec")
    try:
        await poller.poll()
        await asyncio.sleep(2.0)
        await poller.poll()
    finally:
        await client.close()
    return client.document(community, profile)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="c4-record-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        for profile, (community, rates, c32) in SWITCHES.items():
            write_switch(data, community, switch_records(profile, community, rates, c32))
        sim = Snmpsim(data).start("ieee8021")
        try:
            for profile, (community, _, _) in SWITCHES.items():
                doc = asyncio.run(_record(sim, profile, community))
                (OUT / f"{profile}.json").write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
                print(f"recorded {profile}")
        finally:
            sim.stop()


if __name__ == "__main__":
    main()
