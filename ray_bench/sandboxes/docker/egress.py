"""Allowlist phases of one docker sandbox: an internal network of its own (labelled like the
container, so ``ray-bench audit`` finds it), and the :class:`~ray_bench.sandboxes.egress.EgressProxy`
on that network's gateway. While a phase has an allowlist, the container is on that network
only and its commands get the proxy variables; leaving the phase takes it off again."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import docker.errors

from ray_bench.errors import SandboxError
from ray_bench.sandboxes.egress import EgressProxy

if TYPE_CHECKING:
    from ray_bench.sandboxes.docker.backend import DockerBackend


class EgressGate:
    def __init__(self, backend: DockerBackend, labels: Mapping[str, str]) -> None:
        self._b = backend
        self._labels = dict(labels)
        self.network: str | None = None
        self.proxy: EgressProxy | None = None
        self._url = ""

    @property
    def env(self) -> dict[str, str]:
        """What a command of an allowlist phase is given (both spellings: curl reads the lower
        case, most others the upper)."""
        return {name: self._url for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")} | {
            "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}

    async def enter(self, container: str, hosts: tuple[str, ...]) -> None:
        """Put ``container`` on the internal network with ``hosts`` allowed (made on first use)."""
        if self.network is None:
            self.network, gateway = await self._b.call(self._make_network)
            self.proxy = EgressProxy()
            port = await self.proxy.start(gateway)
            self._url = f"http://{gateway}:{port}"
        assert self.proxy is not None
        self.proxy.allowed = hosts
        await self._b.call(self._attach, container, True)

    async def leave(self, container: str) -> None:
        if self.network is not None:
            if self.proxy is not None:
                self.proxy.allowed = ()
            await self._b.call(self._attach, container, False)

    async def remove(self) -> None:
        """Stop the proxy and remove the network (after the container: a network in use stays)."""
        if self.proxy is not None:
            await self.proxy.close()
            self.proxy = None
        if self.network is not None:
            await self._b.call(self._remove_network, self.network)
            self.network = None

    def _make_network(self) -> tuple[str, str]:
        api = self._b.client().api
        try:
            made = api.create_network(f"ray-bench-egress-{uuid.uuid4().hex[:12]}", driver="bridge", internal=True,
                                      labels=self._labels)
            info: dict[str, Any] = api.inspect_network(made["Id"])
        except docker.errors.APIError as exc:
            raise SandboxError(f"creating the allowlist network failed: {exc}") from exc
        gateway = next((c.get("Gateway") for c in (info.get("IPAM") or {}).get("Config") or [] if c.get("Gateway")),
                       None)
        if gateway is None:
            self._remove_network(made["Id"])
            raise SandboxError("the allowlist network has no gateway address for its proxy")
        return str(made["Id"]), str(gateway)

    def _attach(self, container: str, on: bool) -> None:
        api = self._b.client().api
        attached = (api.inspect_container(container).get("NetworkSettings") or {}).get("Networks") or {}
        name = api.inspect_network(self.network)["Name"]
        try:
            if on and name not in attached:
                api.connect_container_to_network(container, self.network)
            elif not on and name in attached:
                api.disconnect_container_from_network(container, self.network, force=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"{'joining' if on else 'leaving'} the allowlist network failed: {exc}") from exc

    def _remove_network(self, network: str) -> None:
        try:
            self._b.client().api.remove_network(network)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise SandboxError(f"removing the allowlist network failed: {exc}") from exc
