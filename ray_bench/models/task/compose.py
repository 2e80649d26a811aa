"""A task's ``environment/docker-compose.yaml`` as a plan carries it: what the runner needs to
know before it reads the file again on its node (:mod:`ray_bench.tasks.compose` reads it)."""

from __future__ import annotations

from pydantic import Field

from ray_bench.models._base import FrozenModel

#: The one compose file Harbor 0.26 reads (``DockerEnvironment._environment_docker_compose_path``:
#: ``environment_dir / "docker-compose.yaml"``); a ``docker-compose.yml`` beside it is ignored there.
COMPOSE_FILE = "docker-compose.yaml"


class ComposeProject(FrozenModel):
    """The services of a task's compose file, and whether it only restates Harbor's default
    ``main`` container (then it runs as that one container)."""

    services: tuple[str, ...] = Field(description="Every service the file names, main first.")
    main_only: bool = Field(description="The file only restates Harbor's default main service "
                            "(its build, image, keep-alive command, TEST_DIR and resource limits), "
                            "at most with a network_mode: the task runs as the default container.")
    main_network_mode: str | None = Field(default=None, description="main's network_mode in the file "
                                          "(\"none\": no phase has a network, as in Harbor).")
    unsupported: tuple[str, ...] = Field(default=(), description="What the file asks of main that "
                                         "ray-bench does not do (refused at plan).")

    @property
    def offline(self) -> bool:
        """main has no network in any phase."""
        return self.pinned_network is False

    @property
    def pinned_network(self) -> bool | None:
        """Whether main has a network in every phase (False: in none), as its ``network_mode`` says;
        None when the file sets none and the phases decide. A ``network_mode`` wins over the
        phases' policies in Harbor: its egress control leaves task-authored networking alone
        (``DockerEnvironment._egress_controlled_service_names``)."""
        if self.main_network_mode is None:
            return None
        return self.main_network_mode != "none"
