"""The inbox codec: what an owner decodes is what the receiving replica validated, whether the
receiver encoded the API's request models (the route) or domain records (the demo traffic)."""

from __future__ import annotations

from controller.api.schemas.telemetry import CollectiveBatch
from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress
from controller.services import telemetry_codec


def _batch() -> CollectiveBatch:
    peer = {"peer": 4, "dir": "send", "bytes": 7, "t_first_us": 10, "t_last_us": 20, "done": True,
            "net_us": 9, "flows": [{"sport": 49152, "bytes": 5, "t_last_us": 20, "net_us": 3},
                                   {"sport": 49153, "bytes": 2, "t_last_us": None}]}
    rec = {"job": "j", "comm": "0x1", "rank": 3, "nranks": 8, "op": "AllReduce", "seq": 5, "bytes": 64,
           "t_start_us": 1, "t_end_us": None,
           "peers": [peer, {"peer": 2, "dir": "recv", "bytes": 0, "t_first_us": None, "t_last_us": None,
                            "done": False}]}
    return CollectiveBatch.model_validate({"host": "host3", "records": [rec, {**rec, "seq": 6, "peers": []}]})


def test_request_models_round_trip_to_the_records_the_route_would_build() -> None:
    batch = _batch()
    want = telemetry_codec.records(batch.records, batch.host)
    assert want[0] == CollectiveRecord(
        "j", "0x1", 3, 8, "AllReduce", 5, 64, 1, None,
        (PeerProgress(4, "send", 7, 10, 20, True, (FlowProgress(49152, 5, 20, 3), FlowProgress(49153, 2, None, None)), 9),
         PeerProgress(2, "recv", 0, None, None, False, (), None)),
        "host3")
    assert telemetry_codec.decode(telemetry_codec.encode(batch.records, batch.host)) == want


def test_domain_records_keep_their_own_host() -> None:
    rec = telemetry_codec.records(_batch().records, "host7")
    assert all(a is b for a, b in zip(telemetry_codec.records(rec, "other"), rec, strict=True))  # not rebuilt
    assert [r.host for r in telemetry_codec.decode(telemetry_codec.encode(rec, "other"))] == ["host7", "host7"]
