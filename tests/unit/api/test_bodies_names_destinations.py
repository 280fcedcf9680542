"""Pure parts of the hardening: the sliced JSON parser reads exactly what `json.loads` reads,
the name rule, the webhook destination policy and log escaping."""

from __future__ import annotations

import ipaddress
import json
import logging
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api.bodies import parse_sliced
from controller.domain import names
from controller.services import destinations, eventlog

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=30)


def _never() -> None:
    return None


@settings(max_examples=300, deadline=None, derandomize=True)
@given(JSON, st.sampled_from([None, 0, 2]), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_sliced_parsing_reads_what_json_loads_reads(value: Any, indent: int | None, separators: tuple[str, str]) -> None:
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=False)
    assert parse_sliced(f" {text}\n", _never) == json.loads(text)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet='{}[],:"0123456789 \n\tabtrueflsn\\.-', max_size=40))
def test_sliced_parsing_refuses_what_json_loads_refuses(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            parse_sliced(text, _never)
        return
    got = parse_sliced(text, _never)
    assert got == expected or (isinstance(expected, float) and math.isnan(expected))


def test_sliced_parsing_stops_at_a_checkpoint() -> None:
    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        parse_sliced(json.dumps({"records": list(range(1000))}), stop)


@pytest.mark.parametrize("bad", ["", ".", "..", "a b", "a\tb", "job\x00", "job\x1b[2J", "a\u202eb", "a\u2066b",
                                 "zero\u200bwidth", "bom\ufeff", "soft\u00adhyphen", "nbsp\u00a0", "pua\ue000",
                                 "tag\U000e0041", "x" * 101])
def test_the_name_rule_refuses(bad: str) -> None:
    assert names.problem(bad) is not None


@pytest.mark.parametrize("good", ["leaf0", "host-12", "Ethernet1/1", "gpt-22b_run7", "ноут", "東京-1", "a.b", "..."])
def test_the_name_rule_accepts(good: str) -> None:
    assert names.problem(good) is None


def test_path_segment_names_refuse_slash_and_colon() -> None:
    assert names.problem("a/b", path_segment=True) and names.problem("a:b", path_segment=True)
    assert names.problem("a/b") is None and names.problem("Ethernet1/1:2") is None


NONE: tuple[destinations.Network, ...] = ()


@pytest.mark.parametrize("url,why", [
    ("http://169.254.169.254/latest/meta-data", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1", "metadata"),
    ("http://localhost:8000/v1/topology", "loopback"),
    ("http://127.0.0.1:8000/v1/topology", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/hook", "private"),
    ("http://100.64.0.1/hook", "reserved"),  # shared address space (carrier NAT)
    ("http://[fe80::1]/hook", "link-local"),
    ("http://0.0.0.0/hook", "unspecified"),
    ("http://ops:hunter2@8.8.8.8/hook", "user or password"),
    ("ftp://8.8.8.8/hook", "scheme"),
])
def test_webhook_destinations_refused(url: str, why: str) -> None:
    with pytest.raises(destinations.Refused, match=why):
        destinations.check_url(url, NONE)


def test_an_allow_list_opens_private_networks_but_never_metadata() -> None:
    allowed = destinations.allowed_networks("10.0.0.0/8, 127.0.0.0/8")
    destinations.check_url("http://10.1.2.3/hook", allowed)
    destinations.check_url("http://localhost:9000/hook", allowed)
    with pytest.raises(destinations.Refused, match="metadata"):
        destinations.check_url("http://169.254.169.254/", destinations.allowed_networks("169.254.0.0/16"))
    with pytest.raises(ValueError, match="C4_WEBHOOK_ALLOW_NETWORKS"):
        destinations.allowed_networks("10.0.0.0/8,nonsense")


def test_delivery_checks_every_resolved_address_and_pins_the_checked_one(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [ipaddress.ip_address("8.8.8.8")]
    monkeypatch.setattr(destinations, "resolve", lambda host, port: list(answers))
    scheme, host, address = destinations.resolve_checked("https://hooks.example.com:8443/x?y=1", NONE)
    assert (scheme, host, str(address)) == ("https", "hooks.example.com", "8.8.8.8")
    assert destinations.pinned("https://hooks.example.com:8443/x?y=1", address) == "https://8.8.8.8:8443/x?y=1"
    answers.append(ipaddress.ip_address("127.0.0.1"))  # a rebinding name: one internal answer refuses it
    with pytest.raises(destinations.Refused, match="loopback"):
        destinations.resolve_checked("https://hooks.example.com/x", NONE)


def test_log_lines_escape_control_and_bidi_characters() -> None:
    hostile = "job\x1b[31m\nFAKE alarm.opened\u202egpj.exe"
    record = logging.LogRecord("c4.events", logging.INFO, __file__, 1, "x", None, None)
    record.c4_event, record.c4_fields = "job.planned", {"job": hostile}  # type: ignore[attr-defined]
    plain = logging.LogRecord("c4", logging.WARNING, __file__, 1, "refused %s", (hostile,), None)
    for formatter in (eventlog.TextFormatter(), eventlog.JsonFormatter()):
        for rec in (record, plain):
            line = formatter.format(rec)
            assert "\n" not in line and "\x1b" not in line and "\u202e" not in line, line
    assert eventlog.printable("leaf0 ok") == "leaf0 ok"
