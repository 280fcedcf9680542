"""Every bad fabric is refused with the field path that broke the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from controller.api.schemas.topology import TopologyCreate
from controller.topology.validate import problems
from tests.unit.topology.fabrics import tiny_document

Doc = dict[str, Any]


def _set(path: list[Any], value: Any) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        target = doc
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


def _append(path: list[Any], value: Any) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        target = doc
        for part in path:
            target = target[part]
        target.append(value)
    return mutate


def _drop_links_of(switch: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        doc["links"] = [link for link in doc["links"] if switch not in (link["a"], link["b"])]
    return mutate


RULES = [
    ("unknown switch in a link", _set(["links", 3, "b"], "spine9"), "links[3].b"),
    ("duplicate switch name", _set(["switches", 4, "name"], "spine0"), "switches[4].name"),
    ("duplicate host name", _set(["hosts", 1, "name"], "host0"), "hosts[1].name"),
    ("duplicate host address", _set(["hosts", 1, "nics", 0, "ports", 0, "address"], "10.0.0.2"),
     "hosts[1].nics[0].ports[0].address"),
    ("duplicate link address", _set(["links", 1, "a_address"], "10.1.0.2"), "links[1].a_address"),
    ("address that is not an address", _set(["hosts", 0, "nics", 0, "ports", 0, "address"], "10.0.0.999"),
     "hosts[0].nics[0].ports[0].address"),
    ("host port on a spine", _set(["hosts", 1, "nics", 0, "ports", 1, "switch"], "spine1"),
     "hosts[1].nics[0].ports[1].switch"),
    ("host port on an unknown switch", _set(["hosts", 1, "nics", 0, "ports", 1, "switch"], "leaf7"),
     "hosts[1].nics[0].ports[1].switch"),
    ("switch port used twice", _set(["hosts", 1, "nics", 0, "ports", 0, "switch_port"], "Ethernet32"),
     "hosts[1].nics[0].ports[0].switch_port"),
    ("duplicate link name", lambda d: (d["links"][0].update(name="x"), d["links"][1].update(name="x")), "links[1].name"),
    ("a second link between the same switches",
     _append(["links"], {"a": "spine0", "a_port": "Ethernet9", "b": "leaf0", "b_port": "Ethernet9", "capacity_gbps": 100}),
     "links[6]"),
    ("a leaf with no uplink",
     lambda d: (d["switches"].append({"name": "leaf2", "role": "leaf"})), "switches[5]"),
    ("a disconnected fabric",
     lambda d: (d["switches"].extend([{"name": "leaf9", "role": "leaf"}, {"name": "spine9", "role": "spine"}]),
                d["links"].append({"a": "leaf9", "a_port": "e0", "b": "spine9", "b_port": "e0", "capacity_gbps": 1})),
     "switches[5]"),
    ("self loop", _set(["links", 0, "b"], "leaf0"), "links[0].b"),
    ("unknown hash model", _set(["hashing", "model"], "crc16"), "hashing.model"),
    ("probed mode without link addresses", _set(["hashing"], {"mode": "probed"}), "links[1].a_address"),
]

SHAPE_RULES = [
    ("negative link capacity", _set(["links", 2, "capacity_gbps"], -400), "links[2].capacity_gbps"),
    ("zero port capacity", _set(["hosts", 0, "nics", 0, "ports", 1, "capacity_gbps"], 0),
     "hosts[0].nics[0].ports[1].capacity_gbps"),
    ("unknown key", _set(["switches", 0, "colour"], "red"), "switches[0].colour"),
    ("bad role", _set(["switches", 0, "role"], "tor"), "switches[0].role"),
    ("NIC without ports", _set(["hosts", 0, "nics", 0, "ports"], []), "hosts[0].nics[0].ports"),
    ("empty name", _set(["hosts", 0, "name"], ""), "hosts[0].name"),
]


def test_the_reference_document_is_valid() -> None:
    assert problems(TopologyCreate.model_validate(tiny_document()).to_fabric()) == []


@pytest.mark.parametrize(("rule", "mutate", "field"), RULES, ids=[r[0] for r in RULES])
def test_rule_is_enforced_with_the_field_path(rule: str, mutate: Callable[[Doc], None], field: str) -> None:
    doc = tiny_document()
    mutate(doc)
    found = problems(TopologyCreate.model_validate(doc).to_fabric())
    assert field in [p.field for p in found], f"{rule}: got {[(p.field, p.message) for p in found]}"


@pytest.mark.parametrize(("rule", "mutate", "field"), SHAPE_RULES, ids=[r[0] for r in SHAPE_RULES])
def test_shape_rule_is_enforced_by_the_schema(rule: str, mutate: Callable[[Doc], None], field: str) -> None:
    doc = tiny_document()
    mutate(doc)
    with pytest.raises(ValidationError) as err:
        TopologyCreate.model_validate(doc)
    fields = [".".join(str(p) for p in e["loc"]) for e in err.value.errors()]
    dotted = field.replace("[", ".").replace("]", "")
    assert dotted in fields, f"{rule}: {fields}"
