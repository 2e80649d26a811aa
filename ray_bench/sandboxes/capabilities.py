"""The built-in sandbox backends and what each can enforce or provide, declared once per backend.

Plan-time checks (:mod:`ray_bench.tasks.support`, :mod:`ray_bench.plan.agents`,
:mod:`ray_bench.plan.compile`), the runner, the driver, the Ray pool and the exports ask these,
never the backend's name (``tests/test_backend_names.py`` guards it), so a new backend is one
entry of :data:`BUILTIN`. Pure: no backend module or SDK is imported (planning a Daytona suite
must not need the Daytona SDK).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    #: An allowlist the provider holds (Daytona's ``networkAllowList``): set at create where every
    #: phase in the sandbox has that one allowlist, else, where ``network_per_phase``, changed between
    #: phases (else such a task is refused); IPv4 addresses and CIDRs only, host names too where
    #: ``allowlist_names_at_create``; the provider's limits apply (:mod:`ray_bench.sandboxes.daytona_lists`).
    allowlist_at_create: bool = False
    #: That allowlist takes host names and ``*.suffix`` too (Daytona's ``domainAllowList`` beside its
    #: ``networkAllowList``; daytonaio/daytona f250f7d39 "sandbox domain allow list").
    allowlist_names_at_create: bool = False
    memory_limit: bool = False
    cpu_limit: bool = False  # a task's cpus are held for its sandbox (docker nano_cpus, a Daytona size)
    disk_limit: bool = False  # a per-sandbox disk quota
    gpus: bool = False
    #: GPUs where the backend's daemon has a GPU runtime (docker's device requests), asked once
    #: at plan (:mod:`ray_bench.sandboxes.gpus`), not known from the backend alone.
    gpus_by_daemon: bool = False
    #: Runs a task's compose project (several services; :mod:`ray_bench.sandboxes.docker.compose`).
    compose: bool = False
    image: bool = False  # runs a container image (False: host processes)
    #: A sandbox naming no image starts from the provider's default (Daytona's default snapshot);
    #: without it, a task with no image, no Dockerfile and no stand-in cannot start.
    default_image: bool = False
    agent_layer: bool = False  # lays the node's agent CLI install over the image (ray_bench.agents.layer)
    #: Sandboxes share the node's host and are admitted against its CPUs and memory minus the
    #: reserve (:mod:`ray_bench.sandboxes.host`), which bounds the plan's capacity.
    host_admission: bool = False
    #: The Ray node resource a node advertises when it can run this backend's sandboxes (cells
    #: then go only to such nodes); None: any node.
    node_resource: str | None = None
    #: Images come from the node's own daemon, so one built there (the quickstart's base image)
    #: is usable without a registry.
    local_images: bool = False
    #: Sandboxes draw on an organisation's quota pool, declared as ``options.pool``
    #: (:class:`~ray_bench.sandboxes.daytona_pool.DaytonaPool`): plan sizes capacity and checks
    #: egress against it, the driver paces creates by its rate.
    quota_pool: bool = False
    #: An image may name a provider snapshot (``snapshot:NAME``), which plan checks exists.
    snapshots: bool = False
    #: Each distinct image is built once before the fan-out (:mod:`ray_bench.scheduler.builds`).
    prebuild: bool = False
    #: The resource supervisor lists the run's containers on the node for its halt record
    #: (:func:`~ray_bench.sandboxes.supervisor.docker_container_lister`).
    listed_containers: bool = False
    #: A separate verifier (task.toml ``environment_mode = "separate"``) runs in a second sandbox
    #: of the attempt, made from the verifier's own image or Dockerfile at its create (Daytona
    #: builds a Dockerfile there, outside the prebuild phase) (:mod:`ray_bench.cells.verifier_apart`).
    verifier_apart: bool = False
    #: Harbor's environment type for it (:mod:`ray_bench.exports.harbor`); None: Harbor has none.
    harbor_environment: str | None = None


#: The custom resource that nodes able to run Docker sandboxes advertise (cluster/README.md).
DOCKER_RESOURCE = "docker"

@dataclass(frozen=True)
class Builtin:
    """A built-in backend: the module that registers it (imported on first use, so a runner
    that only runs local cells never pays for the Daytona SDK's import, ~1 s of CPU), the
    third-party SDK that module needs (its optional extra), and its capabilities."""

    module: str
    sdk: str | None
    can: BackendCapabilities


#: The one list of built-in backends (:mod:`ray_bench.sandboxes` registers from it).
BUILTIN: dict[str, Builtin] = {
    "docker": Builtin("ray_bench.sandboxes.docker", "docker", BackendCapabilities(
        users=True, network_per_phase=True, isolated_network=True, allowlist=True, memory_limit=True,
        cpu_limit=True, image=True, agent_layer=True, compose=True, host_admission=True,
        node_resource=DOCKER_RESOURCE, local_images=True, listed_containers=True, verifier_apart=True,
        gpus_by_daemon=True, harbor_environment="docker")),
    # Daytona's exec has no user switch; its network is set at create and changed between phases
    # (update_network_settings: network_block_all, network_allow_list, domain_allow_list).
    "daytona": Builtin("ray_bench.sandboxes.daytona", "daytona", BackendCapabilities(
        network_per_phase=True, isolated_network=True, allowlist_at_create=True, allowlist_names_at_create=True,
        memory_limit=True, cpu_limit=True, disk_limit=True, image=True, default_image=True,
        quota_pool=True, snapshots=True, prebuild=True, verifier_apart=True, harbor_environment="daytona")),
    # Harbor has no environment for host processes (it would call them docker).
    "local": Builtin("ray_bench.sandboxes.local", None, BackendCapabilities()),
}

#: What each built-in backend can enforce or provide.
CAPABILITIES: dict[str, BackendCapabilities] = {name: b.can for name, b in BUILTIN.items()}
#: The Ray node resources some backend's cells must go to (the Ray pool reads them at start).
NODE_RESOURCES: tuple[str, ...] = tuple(sorted({r for b in BUILTIN.values() if (r := b.can.node_resource)}))

#: A backend not declared here (``plan`` refuses one that is not registered): nothing is
#: assumed held.
UNDECLARED = BackendCapabilities()


def capabilities(backend: str) -> BackendCapabilities:
    return CAPABILITIES.get(backend, UNDECLARED)


def having(backends: Iterable[str], has: Callable[[BackendCapabilities], bool]) -> list[str]:
    """The ``backends`` whose capabilities satisfy ``has``, sorted (``having(names, lambda c: c.quota_pool)``)."""
    return sorted(name for name in set(backends) if has(capabilities(name)))
