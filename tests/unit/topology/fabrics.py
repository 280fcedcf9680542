"""Fabric documents the topology tests share."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from controller.api.schemas.topology import TopologyCreate
from controller.domain.fabric import Fabric

DATA = Path(__file__).resolve().parents[2] / "data" / "topology"


def tiny_document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "tiny.json").read_text())
    return copy.deepcopy(doc)


def tiny_fabric() -> Fabric:
    return TopologyCreate.model_validate(tiny_document()).to_fabric()
