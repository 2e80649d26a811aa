"""GPUs on docker: what the daemon's runtimes say, Harbor's compose reservation on main, and which
Ray nodes a GPU cell goes to."""

from __future__ import annotations

from pathlib import Path

from ray_bench.sandboxes.base import Resources, SandboxSpec
from ray_bench.sandboxes.docker.compose import override
from ray_bench.sandboxes.gpus import DaemonGpus, on_gpu_nodes

#: The reservation Harbor 0.26 writes for main (harbor/environments/docker/__init__.py).
HARBOR_RESERVATION = {"resources": {"reservations": {"devices": [
    {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]}}}


def test_only_an_nvidia_runtime_gives_gpus() -> None:
    assert DaemonGpus(("nvidia", "runc")).gives and DaemonGpus(("nvidia-cdi",)).gives
    assert not DaemonGpus(("io.containerd.runc.v2", "runc")).gives and not DaemonGpus(None).gives


def test_compose_main_gets_harbors_reservation_unless_it_selects_gpus_itself(tmp_path: Path) -> None:
    task_file = tmp_path / "docker-compose.yaml"
    task_file.write_text("services:\n  main:\n    image: x\n  db:\n    image: postgres\n")
    spec = SandboxSpec(labels={"l": "v"}, resources=Resources(cpus=1, gpus=2))
    services = override(task_file, spec)["services"]
    assert services["main"]["deploy"] == HARBOR_RESERVATION and "deploy" not in services["db"]
    task_file.write_text("services:\n  main:\n    image: x\n    deploy:\n      resources:\n        reservations:\n"
                         "          devices:\n            - capabilities: [gpu]\n              device_ids: ['1']\n")
    assert "deploy" not in override(task_file, spec)["services"]["main"]  # the task's own selection holds
    assert "deploy" not in override(task_file, SandboxSpec(labels={}, resources=Resources(cpus=1)))["services"]["main"]


def test_a_gpu_cell_goes_to_a_node_with_as_many_gpus_when_any_has() -> None:
    nodes = ["cpu-node", "one-gpu", "two-gpu"]
    gpus = {"cpu-node": 0.0, "one-gpu": 1.0, "two-gpu": 2.0}
    assert on_gpu_nodes(1, [0, 1, 2], nodes, gpus) == [1, 2]
    assert on_gpu_nodes(2, [0, 1, 2], nodes, gpus) == [2]
    assert on_gpu_nodes(0, [0, 1, 2], nodes, gpus) == [0, 1, 2]  # a CPU cell goes anywhere
    assert on_gpu_nodes(4, [0, 1], nodes, gpus) == [0, 1]  # none has as many: the create decides
