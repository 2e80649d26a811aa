"""What Daytona's allow lists can say, checked without a server: ray-bench's plan-time reading of a
task's allowlist agrees with the API's own validation (as the local server copies it), and a
create whose API drops a list fails instead of running open."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from support.daytona_server import domain_allow_list_error, network_allow_list_error

from ray_bench.errors import SandboxCreateError
from ray_bench.models.task.network import normalize_hosts
from ray_bench.sandboxes.daytona_lists import (
    DAYTONA_MAX_DOMAINS,
    DAYTONA_MAX_NETWORKS,
    create_entries,
    split_networks,
    unsayable,
)

#: Entries Harbor's rule takes (names, ``*.suffix``, addresses, CIDRs), and whether Daytona's lists can.
ENTRIES = [
    ("api.anthropic.com", True), ("*.pypi.org", True), ("files.pythonhosted.org", True), ("a-b.c-d.io", True),
    ("10.0.0.0/8", True), ("192.0.2.7", True), ("0.0.0.0/0", True),
    ("localhost", False),  # a single label: the API's domainRegex wants a dot and an alphabetic TLD
    ("host.123", False), ("xn--bcher-kva.example", True), ("fd00::/8", False), ("2001:db8::1", False),
]


@pytest.mark.parametrize(("entry", "sayable"), ENTRIES)
def test_plan_reads_an_entry_as_the_api_validates_it(entry: str, sayable: bool) -> None:
    (host,) = normalize_hosts([entry]) or []
    said = create_entries((host,), names=True)
    assert (said is not None) is sayable
    assert unsayable((host,), names=True) == ([] if sayable else [host])
    if said is None:
        return
    networks, domains = split_networks(said)
    # what the backend sends is what the API accepts
    assert network_allow_list_error(",".join(networks)) is None
    assert domain_allow_list_error(",".join(domains)) is None
    # a backend whose list takes networks only cannot say a name
    assert (create_entries((host,)) is None) is bool(domains)


def test_the_limits_are_the_apis() -> None:
    nets = ",".join(f"10.{i}.0.0/16" for i in range(DAYTONA_MAX_NETWORKS + 1))
    names = ",".join(f"h{i}.example.com" for i in range(DAYTONA_MAX_DOMAINS + 1))
    assert network_allow_list_error(nets) == "Network allow list cannot contain more than 10 networks"
    assert domain_allow_list_error(names) == "Domain allow list cannot contain more than 10 domains"
    assert network_allow_list_error(nets.rsplit(",", 1)[0]) is None
    assert domain_allow_list_error(names.rsplit(",", 1)[0]) is None
    assert domain_allow_list_error("a.com,*.*.example.com") == \
        'Invalid domain: "*.*.example.com". Must be a valid domain name'


def test_a_create_whose_api_drops_a_list_fails() -> None:
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from daytona import CreateSandboxFromSnapshotParams

    from ray_bench.sandboxes.daytona.backend import kept_lists

    params = CreateSandboxFromSnapshotParams(network_allow_list="10.0.0.0/8", domain_allow_list="*.pypi.org")
    kept_lists(params, cast(Any, SimpleNamespace(id="s1", network_allow_list="10.0.0.0/8",
                                                 domain_allow_list="*.pypi.org")))
    with pytest.raises(SandboxCreateError, match=r"does not hold the domainAllowList .*\(\*\.pypi\.org\)"):
        kept_lists(params, cast(Any, SimpleNamespace(id="s1", network_allow_list="10.0.0.0/8", domain_allow_list=None)))
