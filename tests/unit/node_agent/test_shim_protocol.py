"""The node agent's side of the shim protocol, tested on the example files the C suite reads.

Each ``nccl_shim/examples/<name>.hex`` is what the C encoder produces (the C test checks that
byte for byte); ``<name>.json`` is the same message written out by hand from FORMAT.md. Here
the Python codec must decode every .hex to its .json, re-encode it to the same bytes, and
reject every ``bad_*``/``truncated`` file the C decoder rejects.
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import node_agent.shim_protocol as sp

EXAMPLES = Path(__file__).resolve().parents[3] / "nccl_shim" / "examples"
GOOD = sorted(
    p.stem
    for p in EXAMPLES.glob("*.hex")
    if not p.stem.startswith(("bad_", "truncated")) and p.stem != "batch"
)
BAD = sorted(p.stem for p in EXAMPLES.glob("*.hex") if p.stem.startswith(("bad_", "truncated")))


def read_hex(name: str) -> bytes:
    lines = (EXAMPLES / f"{name}.hex").read_text().splitlines()
    return bytes.fromhex("".join(line for line in lines if not line.startswith("#")))


def test_examples_exist() -> None:
    assert set(GOOD) | {"batch"} == {
        "assign",
        "assign_unknown",
        "coll",
        "coll_inflight",
        "conn",
        "lookup",
        "stats",
        "handoff",
        "batch",
    }
    assert set(BAD) == {
        "bad_length",
        "bad_magic",
        "bad_nflows",
        "bad_weight",
        "truncated",
        "bad_version",
    }


def test_batch_example_holds_the_coll_and_conn_examples() -> None:
    data = read_hex("batch")
    parts = sp.split_batch(data)
    assert parts == [read_hex("coll"), read_hex("conn")]
    want = json.loads((EXAMPLES / "batch.json").read_text())
    assert want["type"] == "batch"
    assert [sp.to_json(sp.decode(p)) for p in parts] == want["messages"]  # type: ignore[arg-type]
    assert sp.encode_batch(parts) == data
    assert isinstance(sp.decode(data), sp.Malformed)  # a batch is split, not decoded whole
    for cut in range(len(data)):
        assert sp.split_batch(data[:cut]) is None, cut
    inner_short = bytearray(data)
    inner_short[8 + 4] -= 1  # the first message's length no longer tiles the batch
    assert sp.split_batch(bytes(inner_short)) is None
    with_lookup = sp.encode_batch([read_hex("coll")])[:8] + read_hex("lookup")
    fixed = bytearray(with_lookup)
    fixed[4:6] = len(fixed).to_bytes(2, "little")
    assert sp.split_batch(bytes(fixed)) is None  # only COLL and CONN travel in batches
    with pytest.raises(ValueError):
        sp.encode_batch([read_hex("coll")] * 50)


@pytest.mark.parametrize("name", GOOD)
def test_decodes_to_the_json_rendering(name: str) -> None:
    msg = sp.decode(read_hex(name))
    assert not isinstance(msg, sp.Malformed), msg
    assert sp.to_json(msg) == json.loads((EXAMPLES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", GOOD)
def test_reencodes_byte_for_byte(name: str) -> None:
    data = read_hex(name)
    msg = sp.decode(data)
    assert not isinstance(msg, sp.Malformed)
    assert sp.encode(msg) == data


@pytest.mark.parametrize("name", BAD)
def test_malformed_examples_are_values_not_exceptions(name: str) -> None:
    result = sp.decode(read_hex(name))
    assert isinstance(result, sp.Malformed)
    assert result.reason


@pytest.mark.parametrize("name", GOOD)
def test_every_truncation_is_rejected(name: str) -> None:
    data = read_hex(name)
    for cut in range(len(data)):
        assert isinstance(sp.decode(data[:cut]), sp.Malformed), cut


def test_reply_answers_the_lookup_it_was_asked() -> None:
    req = sp.decode(read_hex("lookup"))
    assert isinstance(req, sp.Lookup)
    weights = sp.Assign.weights_to_ppm([0.75, 0.25])
    flows = (
        sp.Flow(50021, weights[0], "10.0.0.2", "10.0.1.2"),
        sp.Flow(50022, weights[1], "10.0.128.2", "10.0.129.2"),
    )
    reply = sp.Assign.answer(req, 12, flows)
    assert sp.encode(reply) == read_hex("assign")
    unknown = sp.Assign.answer(req, 0, ())
    assert unknown.status == "unknown" and unknown.req_id == req.req_id


def test_weights_to_ppm_sums_exactly() -> None:
    for ws in ([1 / 3] * 3, [0.1, 0.2, 0.7], [1.0], [0.25] * 4):
        assert sum(sp.Assign.weights_to_ppm(ws)) == sp.PPM


def test_collective_record_matches_api_shape() -> None:
    coll = sp.decode(read_hex("coll"))
    assert isinstance(coll, sp.Coll)
    want = json.loads((EXAMPLES / "coll.api.json").read_text())
    assert sp.collective_record(coll, "gpt-22b-run7") == want


def test_inflight_record_uses_nulls() -> None:
    coll = sp.decode(read_hex("coll_inflight"))
    assert isinstance(coll, sp.Coll) and coll.inflight
    rec = sp.collective_record(coll, "j", peer_ranks={4: 12})
    assert rec["t_end_us"] is None
    assert rec["peers"][0]["t_first_us"] is None and rec["peers"][0]["done"] is False
    assert rec["peers"][0]["peer"] == 12 and "net_us" not in rec["peers"][0]


def test_hello_round_trip_and_refusals() -> None:
    h = sp.decode(read_hex("handoff"))
    assert isinstance(h, sp.Handoff)
    raw = sp.encode_hello(h)
    assert len(raw) == sp.HELLO_LEN and sp.decode_hello(raw) == h
    assert h.socket_name == b"\0c4-shim-5eed5eed5eed5eed"
    bad = sp.Handoff(3, 3, 0, 1, 2, 0, 0, 0)  # socket index out of range
    assert isinstance(sp.decode_hello(sp.encode_hello(bad)), sp.Malformed)
    assert isinstance(sp.decode_hello(raw[:-1]), sp.Malformed)
    assert isinstance(sp.decode_hello(b"XXXX" + raw[4:]), sp.Malformed)


def test_job_names_must_fit_and_be_padded() -> None:
    req = sp.decode(read_hex("lookup"))
    assert isinstance(req, sp.Lookup) and req.job == "gpt-22b-run7"
    data = bytearray(read_hex("lookup"))
    data[8 + 72 + 20] = ord("x")  # a byte after the name's terminating NUL
    assert isinstance(sp.decode(bytes(data)), sp.Malformed)
    with pytest.raises(ValueError):
        sp.encode(sp.Lookup(1, 1, 1, "10.0.0.1", "10.0.0.2", 4792, 0, job="j" * 65))


def test_ipv6_addresses_round_trip() -> None:
    msg = sp.Lookup(1, 2, 3, "fd00::2", "fd00::1:2", 4792, 0, "roce", 1)
    assert sp.decode(sp.encode(msg)) == msg


def test_encoder_refuses_what_the_format_cannot_carry() -> None:
    too_many = tuple(sp.Flow(50000 + i, 1) for i in range(sp.MAX_FLOWS + 1))
    with pytest.raises(ValueError):
        sp.encode(sp.Assign(1, 1, 1, "10.0.0.1", "10.0.0.2", 0, "ok", too_many))


def test_module_docstring_example() -> None:
    result = doctest.testmod(sp)
    assert result.attempted > 0 and result.failed == 0


def test_weights_to_ppm_keeps_proportions_of_a_channel() -> None:
    # One channel of a two-channel connection carries half the connection's weight: its
    # sockets' shares are in proportion, not the rest dumped on the largest.
    assert sp.Assign.weights_to_ppm([0.25, 0.25]) == [500_000, 500_000]
    assert sp.Assign.weights_to_ppm([0.125, 0.375]) == [250_000, 750_000]
    assert sum(sp.Assign.weights_to_ppm([0.0, 0.0])) == sp.PPM
