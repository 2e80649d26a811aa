"""Network policies of a Harbor task: ``public`` (Harbor's default), ``no-network``, or an
``allowlist`` of hosts, per environment and optionally overridden per phase."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from enum import StrEnum
from ipaddress import ip_address, ip_network

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


class NetworkMode(StrEnum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


def normalize_hosts(hosts: list[str] | None) -> list[str] | None:
    """Hostnames, ``*.suffix`` wildcards, IP addresses or CIDR ranges; lower-cased, no
    trailing dot. URLs, ports and paths are errors, as in Harbor."""
    if hosts is None:
        return None
    out: list[str] = []
    for raw in hosts:
        host = raw.strip().lower().rstrip(".")
        if not host:
            raise ValueError("allowed_hosts entries must be non-empty")
        if "/" in host or ":" in host:
            try:
                out.append(ip_network(host, strict=True).compressed if "/" in host
                           else ip_address(host).compressed)
            except ValueError:
                raise ValueError(f"allowed_hosts entry {raw!r} is a URL, port or path; "
                                 "give a hostname, IP address or CIDR range") from None
            continue
        name = host[2:] if host.startswith("*.") else host
        if "*" in name or not name or not all(_LABEL.match(label) for label in name.split(".")):
            raise ValueError(f"allowed_hosts entry {raw!r} is not a hostname (wildcards only as a "
                             "leading '*.')")
        out.append(host)
    return out


def check_policy(mode: NetworkMode | None, hosts: list[str] | None, section: str) -> None:
    if hosts and mode not in (None, NetworkMode.ALLOWLIST):
        raise ValueError(f"{section}.allowed_hosts is only valid with network_mode = 'allowlist'")


def host_allowed(host: str, addresses: Iterable[str], entries: Iterable[str]) -> bool:
    """Whether a connection to ``host`` (a name or an address literal) that resolves to
    ``addresses`` is on the list of ``entries`` (as :func:`normalize_hosts` writes them), as
    Harbor's egress sidecar decides (gost's bypass whitelist over the sniffed host name and the
    destination address, ``harbor-docker-egress-control-sidecar/gost.yaml``): a name matches
    itself, ``*.suffix`` any name below the suffix, an address or range any address in it."""
    name = host.strip().lower().rstrip(".")
    literal = name.strip("[]")
    ips = [ip_address(a) for a in addresses]
    with contextlib.suppress(ValueError):
        ips.append(ip_address(literal))
    for entry in entries:
        if entry.startswith("*."):
            if name.endswith(entry[1:]):
                return True
        elif "/" in entry or ":" in entry or entry.replace(".", "").isdigit():
            net = ip_network(entry, strict=False)
            if any(ip.version == net.version and ip in net for ip in ips):
                return True
        elif name == entry:
            return True
    return False

