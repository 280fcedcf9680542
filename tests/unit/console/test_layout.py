"""The map's grouping: flat for small fabrics, pods or leaf blocks beyond, rows in blocks."""

from __future__ import annotations

import pytest

from controller.console.layout import (
    FLAT_MAX_SWITCHES,
    LEAF_BLOCK,
    ROW_MAX,
    SwitchInfo,
    layout,
    natural_key,
)
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine


def infos(fabric) -> list[SwitchInfo]:  # type: ignore[no-untyped-def]
    return [SwitchInfo(s.name, s.role.value, s.pod) for s in fabric.switches]


def members(lay: dict) -> list[str]:  # type: ignore[type-arg]
    return [s for r in lay["rows"] for b in r["blocks"] for s in b["switches"]] + \
        [s for g in lay["groups"] for s in g["switches"]]


CASES = [
    # (fabric, flat, row roles, group count, group roles, blocks per row)
    (leaf_spine(LeafSpineSpec(leaves=8, spines=4)), True, ["spine", "leaf"], 0, [], [4, 8]),
    (leaf_spine(LeafSpineSpec(leaves=192, spines=64, hosts_per_leaf=1)), False, ["spine"], 12, ["leaf"], [32]),
    (leaf_spine(LeafSpineSpec(leaves=40, spines=16, hosts_per_leaf=1)), False, ["spine"], 3, ["leaf"], [16]),
    (clos3(Clos3Spec(pods=2, leaves_per_pod=4, spines_per_pod=4, cores=8)), True, ["core", "spine", "leaf"], 0, [], [8, 8, 8]),
    (clos3(Clos3Spec(pods=4, leaves_per_pod=8, spines_per_pod=4, cores=16, hosts_per_leaf=1)), False, ["core"], 4,
     ["spine", "leaf"], [16]),
    (clos3(Clos3Spec(pods=32, leaves_per_pod=16, spines_per_pod=8, cores=256, hosts_per_leaf=1)), False, ["core"], 32,
     ["spine", "leaf"], [32]),
]


@pytest.mark.parametrize(("fabric", "flat", "rows", "groups", "group_roles", "blocks"), CASES,
                         ids=["ls-12", "ls-256", "ls-56", "clos-24", "clos-64", "clos-1024"])
def test_layout_groups_every_switch_once(fabric, flat, rows, groups, group_roles, blocks) -> None:  # type: ignore[no-untyped-def]
    """Each switch is drawn exactly once, in the rows or in one group, as the rules say."""
    lay = layout(infos(fabric))
    assert lay["flat"] is flat
    assert [r["role"] for r in lay["rows"]] == rows
    assert [len(r["blocks"]) for r in lay["rows"]] == blocks
    assert len(lay["groups"]) == groups
    assert lay["group_roles"] == group_roles
    drawn = members(lay)
    assert sorted(drawn) == sorted(s.name for s in fabric.switches)
    assert all(len(r["blocks"]) <= ROW_MAX for r in lay["rows"])
    if not flat:
        assert len(fabric.switches) > FLAT_MAX_SWITCHES


def test_pods_hold_their_spines_then_leaves_in_natural_order() -> None:
    """A pod lists its spines before its leaves, each in natural order (leaf2 before leaf10)."""
    lay = layout(infos(clos3(Clos3Spec(pods=4, leaves_per_pod=12, spines_per_pod=4, cores=8, hosts_per_leaf=1))))
    pod0 = lay["groups"][0]
    assert pod0["id"] == "pod0" and pod0["label"] == "pod 0" and pod0["pod"] == 0
    assert pod0["switches"][:4] == [f"pod0-spine{j}" for j in range(4)]
    assert pod0["switches"][4:] == [f"pod0-leaf{i}" for i in range(12)]


def test_leaf_blocks_and_row_blocks_are_contiguous_in_name_order() -> None:
    """Leaves come in blocks of LEAF_BLOCK by name; a long row in equal contiguous blocks."""
    lay = layout(infos(leaf_spine(LeafSpineSpec(leaves=40, spines=48, hosts_per_leaf=1))))
    assert [len(g["switches"]) for g in lay["groups"]] == [LEAF_BLOCK, LEAF_BLOCK, 40 - 2 * LEAF_BLOCK]
    assert lay["groups"][0]["label"] == "leaf0\u201315" and lay["groups"][1]["switches"][0] == "leaf16"
    spines = lay["rows"][0]["blocks"]
    assert [len(b["switches"]) for b in spines] == [2] * 24
    assert spines[0] == {"id": "spine0..spine1", "label": "spine0\u20131", "switches": ["spine0", "spine1"]}


def test_switches_without_a_pod_in_a_podded_fabric_form_their_own_group() -> None:
    """A hand-written fabric where some spines carry no pod still draws every switch."""
    switches = [SwitchInfo(f"core{i}", "core") for i in range(4)]
    switches += [SwitchInfo(f"p{p}-leaf{i}", "leaf", p) for p in range(2) for i in range(24)]
    switches += [SwitchInfo("agg-x", "spine"), SwitchInfo("agg-y", "spine")]
    lay = layout(switches)
    assert [g["id"] for g in lay["groups"]] == ["pod0", "pod1", "no-pod"]
    assert lay["groups"][-1]["switches"] == ["agg-x", "agg-y"]
    assert sorted(members(lay)) == sorted(s.name for s in switches)


def test_natural_key_orders_numbers_by_value() -> None:
    names = ["leaf10", "leaf2", "leaf1", "pod1-leaf10", "pod1-leaf9", "core"]
    assert sorted(names, key=natural_key) == ["core", "leaf1", "leaf2", "leaf10", "pod1-leaf9", "pod1-leaf10"]
