"""Where a webhook may be delivered: the controller's defence against server-side request
forgery (a subscriber making the controller call its own API, the cloud's metadata service or
a host inside the cluster network).

A destination is allowed when it is an `http` or `https` URL without user or password whose
host resolves only to public (globally routable) addresses. Refused:

- loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10), private (10/8,
  172.16/12, 192.168/16, fc00::/7), shared (100.64/10), multicast, unspecified and reserved
  addresses, unless inside a network of `C4_WEBHOOK_ALLOW_NETWORKS` (an operator's
  allow-list, e.g. `10.20.0.0/16` where the scheduler lives);
- cloud metadata services, always, allow-list or not: 169.254.169.254, 169.254.170.2,
  100.100.100.200, fd00:ec2::254 and the names `metadata.google.internal`, `metadata`,
  `instance-data`;
- names that mean this machine (`localhost`, `*.localhost`) unless loopback is allowed.

Checked twice: at registration (`check_url`, the literal address or what the name resolves to
now) and at every delivery (`resolve_checked`), on the addresses the name resolves to then;
the delivery connects to exactly the address that was checked (`pinned`), so a name that
re-resolves to an internal address between the check and the connection (DNS rebinding) is
never reached. A name that does not resolve at registration is accepted (its deliveries say
why they fail).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"))
METADATA_NAMES = frozenset(("metadata.google.internal", "metadata", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal"))
SCHEMES = ("http", "https")


class Refused(ValueError):
    """A destination webhooks may not reach; the message says why, in one sentence."""


@functools.lru_cache(maxsize=16)
def allowed_networks(setting: str) -> tuple[Network, ...]:
    """`C4_WEBHOOK_ALLOW_NETWORKS` parsed (a bad entry raises ValueError naming it)."""
    out = []
    for item in setting.split(","):
        item = item.strip()
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"C4_WEBHOOK_ALLOW_NETWORKS: {item!r} is not a network: {exc}") from None
    return tuple(out)


def check_address(address: Address, allowed: Sequence[Network]) -> None:
    """Raise `Refused` unless webhooks may reach `address`."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        raise Refused(f"{address} is a cloud metadata address; webhooks never reach it")
    if any(address in network for network in allowed):
        return
    kind = ("loopback" if address.is_loopback else "link-local" if address.is_link_local
            else "multicast" if address.is_multicast else "unspecified" if address.is_unspecified
            else "private" if address.is_private else None if address.is_global else "reserved")
    if kind is not None:
        raise Refused(f"{address} is a {kind} address; webhooks reach public addresses only, unless "
                      "C4_WEBHOOK_ALLOW_NETWORKS lists its network")


def _parts(url: str) -> tuple[str, str, int]:
    """(scheme, host without brackets, port) of an absolute URL, or `Refused`."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused(f"scheme {parts.scheme!r}: webhooks are http or https")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL holds a user or password; put credentials in the secret, not the URL")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Refused("the URL has no host")
    return scheme, host, port or (443 if scheme == "https" else 80)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(host: str, port: int) -> list[Address]:
    """The addresses `host` resolves to now (empty when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    seen: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen


def _check_name(host: str, allowed: Sequence[Network]) -> None:
    if host in METADATA_NAMES:
        raise Refused(f"{host!r} is a cloud metadata service; webhooks never reach it")
    if (host == "localhost" or host.endswith(".localhost")) and not any(
            ipaddress.ip_address("127.0.0.1") in n for n in allowed):
        raise Refused(f"{host!r} is this machine (loopback); webhooks reach public addresses only, unless "
                      "C4_WEBHOOK_ALLOW_NETWORKS lists 127.0.0.0/8")


def check_url(url: str, allowed: Sequence[Network]) -> None:
    """Registration: raise `Refused` if `url` may not be a webhook destination now."""
    _, host, port = _parts(url)
    literal = _literal(host)
    if literal is not None:
        check_address(literal, allowed)
        return
    _check_name(host, allowed)
    for address in resolve(host, port):
        check_address(address, allowed)


def resolve_checked(url: str, allowed: Sequence[Network]) -> tuple[str, str, Address]:
    """Delivery: (scheme, host, the address to connect to), every address the host resolves to
    checked, or `Refused`."""
    scheme, host, port = _parts(url)
    literal = _literal(host)
    if literal is not None:
        check_address(literal, allowed)
        return scheme, host, literal
    _check_name(host, allowed)
    addresses = resolve(host, port)
    if not addresses:
        raise Refused(f"{host!r} does not resolve")
    for address in addresses:
        check_address(address, allowed)
    return scheme, host, addresses[0]


def pinned(url: str, address: Address) -> str:
    """`url` with its host replaced by `address` (the caller sends `Host` and TLS SNI as the
    original host), so the connection goes where the check looked."""
    parts = urlsplit(url)
    literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
