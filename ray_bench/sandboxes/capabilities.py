"""What each sandbox backend can enforce or provide, declared once per backend.

Plan-time checks (:mod:`ray_bench.tasks.support`, :mod:`ray_bench.plan.agents`), the runner and
the Ray pool ask these, never the backend's name, so a new backend is one entry here. Pure: no
backend module or SDK is imported (planning a Daytona suite must not need the Daytona SDK).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend's sandboxes can be held to. ``False`` means the backend cannot enforce it:
    a task asking for it is refused at plan time, or, for what is only not enforced (a disk
    quota, a memory limit, no-network), the receipt warns."""

    users: bool = False  # exec as another user or UID
    network_per_phase: bool = False  # connect / disconnect the network between phases
    isolated_network: bool = False  # no-network is enforced: a sandbox is closed unless opened
    allowlist: bool = False  # a per-host network allowlist is enforced
    memory_limit: bool = False
    disk_limit: bool = False  # a per-sandbox disk quota
    gpus: bool = False
    image: bool = False  # runs a container image (False: host processes)
    agent_layer: bool = False  # lays the node's agent CLI install over the image (ray_bench.agents.layer)
    #: Sandboxes share the node's host and are admitted against its CPUs and memory minus the
    #: reserve (:mod:`ray_bench.sandboxes.host`), which bounds the plan's capacity.
    host_admission: bool = False
    #: The Ray node resource a node advertises when it can run this backend's sandboxes (cells
    #: then go only to such nodes); None: any node.
    node_resource: str | None = None


#: The custom resource that nodes able to run Docker sandboxes advertise (cluster/README.md).
DOCKER_RESOURCE = "docker"

#: The built-in backends (:data:`ray_bench.sandboxes._BUILTIN`).
CAPABILITIES: dict[str, BackendCapabilities] = {
    "docker": BackendCapabilities(users=True, network_per_phase=True, isolated_network=True, memory_limit=True,
                                  image=True, agent_layer=True, host_admission=True,
                                  node_resource=DOCKER_RESOURCE),
    # Daytona's exec has no user switch and its network is fixed at create (network_block_all).
    "daytona": BackendCapabilities(isolated_network=True, memory_limit=True, disk_limit=True, image=True),
    "local": BackendCapabilities(),
}

#: A backend not declared here (``plan`` refuses one that is not registered): nothing is
#: assumed held.
UNDECLARED = BackendCapabilities()


def capabilities(backend: str) -> BackendCapabilities:
    return CAPABILITIES.get(backend, UNDECLARED)
