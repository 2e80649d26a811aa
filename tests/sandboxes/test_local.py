"""The conformance suite against the ``local`` backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from ray_bench.sandboxes.base import SandboxSpec
from ray_bench.sandboxes.local import LocalBackend

from .conformance import BackendFactory, SandboxConformance, SpecFactory


class TestLocalConformance(SandboxConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return lambda: LocalBackend(root=tmp_path / "sandboxes")

    @pytest.fixture
    def sandbox_spec(self) -> SpecFactory:
        def make(labels: Mapping[str, str]) -> SandboxSpec:
            return SandboxSpec(labels=labels)

        return make
