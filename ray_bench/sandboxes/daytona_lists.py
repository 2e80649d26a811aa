"""What Daytona's allow lists can say: ``networkAllowList`` (IPv4 CIDRs) and ``domainAllowList``
(domain names, optionally ``*.``-prefixed), set at create and changed on a running sandbox through
``POST /sandbox/{id}/network-settings``. Pure (no SDK): plan checks a task's allowlists with it,
the ``daytona`` backend writes them with it.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Network, ip_network

#: Entries Daytona's lists take at create: ``networkAllowList`` IPv4 CIDRs, at most 10 (10 since
#: daytonaio/daytona d7b6b0e3b), ``domainAllowList`` domain names, optionally ``*.``-prefixed, at
#: most 10 (f250f7d39; both in apps/api/src/sandbox/utils/network-validation.util.ts,
#: ``validateNetworkAllowList`` and ``validateDomainAllowList``).
DAYTONA_MAX_NETWORKS = 10
DAYTONA_MAX_DOMAINS = 10
#: ``validateDomainAllowList``'s ``domainRegex``: hostname labels and an alphabetic TLD (so not a
#: single label such as ``localhost``), optionally a leading ``*.``.
_DAYTONA_DOMAIN = re.compile(r"(\*\.)?([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,}")


def _create_entry(host: str, names: bool) -> str | None:
    """``host`` as a list fixed at create says it: an IPv4 address or CIDR as a CIDR (an address is
    the network of one, its /32), a host name or ``*.suffix`` as it is where ``names``; None when it
    cannot be said (an IPv6 entry, a name where names are not taken or one Daytona's rule refuses)."""
    try:
        net = ip_network(host, strict=True)
    except ValueError:
        return host if names and _DAYTONA_DOMAIN.fullmatch(host) else None
    return net.with_prefixlen if isinstance(net, IPv4Network) else None


def create_entries(hosts: tuple[str, ...], names: bool = False) -> tuple[str, ...] | None:
    """An allowlist as a backend that fixes it at create takes it (:func:`_create_entry`); None when
    some entry cannot be said so."""
    out = tuple(_create_entry(host, names) for host in hosts)
    return None if None in out else out  # type: ignore[return-value]


def unsayable(hosts: tuple[str, ...], names: bool = False) -> list[str]:
    """The entries of an allowlist that a list fixed at create cannot say (:func:`_create_entry`)."""
    return [h for h in hosts if _create_entry(h, names) is None]


def split_networks(entries: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An allowlist's (networks, names): its IP addresses and CIDRs, and its host names and
    ``*.suffix`` entries, each in order."""
    nets = tuple(e for e in entries if _is_network(e))
    return nets, tuple(e for e in entries if e not in nets)


def _is_network(entry: str) -> bool:
    try:
        ip_network(entry, strict=False)
    except ValueError:
        return False
    return True
