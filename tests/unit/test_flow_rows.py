"""The planner's fast JSON for flow rows writes exactly what `json` writes."""

from __future__ import annotations

import json

import pytest

from controller.store.flows_repo import json_strings as _json_strings


@pytest.mark.parametrize("items", [
    ["host0:mlx5_0:p0", "leaf0", "spine1", "Ethernet0/1"], [], ["a"], ['x"y'], ["a\\b"], ["é", "b"], ["tab\there"],
    ["del\x7f"], ["~!#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}"], ["x", 'q"', "z"],
])
def test_same_as_json(items: list[str]) -> None:
    assert _json_strings(items) == json.dumps(items, separators=(",", ":"))
    assert json.loads(str(_json_strings(items))) == items
