"""Canonical link names, the one place that says how a link is named.

`"{x}:{x_port}--{y}:{y_port}"` with the endpoints ordered by (name, port); a host-port
endpoint is written `host:nic:port` alone (it has no switch port of its own).
"""

from __future__ import annotations


def port_node(host: str, nic: str, port: str) -> str:
    """The name of a host port as a node of the fabric and an endpoint of its link."""
    return f"{host}:{nic}:{port}"


def link_name(a: str, a_port: str, b: str, b_port: str) -> str:
    """Canonical name of a link between endpoints (a, a_port) and (b, b_port).

    >>> link_name("spine0", "Ethernet0", "leaf0", "Ethernet2")
    'leaf0:Ethernet2--spine0:Ethernet0'
    >>> link_name("leaf0", "Ethernet32", "host0:mlx5_0:p0", "")
    'host0:mlx5_0:p0--leaf0:Ethernet32'
    """
    first, second = sorted([(a, a_port), (b, b_port)])
    return f"{_endpoint(*first)}--{_endpoint(*second)}"


def _endpoint(name: str, port: str) -> str:
    return f"{name}:{port}" if port else name
