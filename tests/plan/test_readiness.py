"""Plan catches what execute would trip on (ray_bench/plan/readiness.py): an image this machine's
Docker lacks, an agent CLI not installed where the cells start it, a probe host not reachable. Each
is a receipt warning with its fix, or under --strict a refusal (exit 2); "Warnings: none" only when
there are none. The decisions run over a fake of what is on the machine; the real looks are
checked against a real socket and dockerd."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_bench.api import plan_run
from ray_bench.commands.starter import write_starter
from ray_bench.errors import ConfigError, MultipleInputErrors
from ray_bench.models.accounts import Account
from ray_bench.models.suite import Arm, Suite
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.plan.readiness import (
    HostLooks,
    cli_findings,
    dockerfile_bases,
    probe_findings,
    probe_hosts,
)
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.images import BASE_IMAGE


class FakeLooks:
    def __init__(self, images: set[str] | None = frozenset(), clis: set[str] = frozenset(),
                 hosts: set[str] = frozenset()) -> None:
        self.images, self.clis, self.hosts = images, clis, hosts
        self.asked: list[str] = []

    def image(self, tag: str) -> bool | None:
        self.asked.append(tag)
        return None if self.images is None else tag in self.images

    def cli(self, agent: str, *, laid: bool) -> bool:
        return agent in self.clis

    def reaches(self, host: str, port: int) -> bool:
        return host in self.hosts


@pytest.fixture
def starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("S_KEY_A", "any-value")
    monkeypatch.setenv("S_KEY_B", "any-value")
    write_starter(tmp_path / "s")
    return tmp_path / "s"


def _compile(starter: Path, looks: FakeLooks, **kwargs: Any) -> Any:
    return compile_plan(PlanRequest(suite=starter / "suite.yaml", accounts=starter / "accounts.yaml", run_id="r",
                                    looks=looks, **kwargs))


def test_an_absent_base_image_is_a_warning_naming_ray_bench_image_base(starter: Path) -> None:
    plan = _compile(starter, FakeLooks(images=set()))
    (warning,) = plan.warnings
    assert warning.startswith("task hello: image ray-bench-base:busybox is not on this machine's Docker")
    assert "`ray-bench image base`" in warning
    assert _compile(starter, FakeLooks(images={BASE_IMAGE})).warnings == []


def test_strict_refuses_what_it_would_warn(starter: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        _compile(starter, FakeLooks(images=set()), strict=True)
    assert refused.value.where == "task hello" and "ray-bench image base" in refused.value.line()
    _compile(starter, FakeLooks(images={BASE_IMAGE}), strict=True)  # nothing to refuse


def test_a_docker_that_does_not_answer_is_one_warning(starter: Path) -> None:
    (warning,) = _compile(starter, FakeLooks(images=None)).warnings
    assert "Docker does not answer here" in warning


def test_a_prebuilt_image_is_looked_up_once_for_every_task(starter: Path) -> None:
    for task in ("a", "b", "c"):
        (starter / "tasks" / task / "environment").mkdir(parents=True)
        (starter / "tasks" / task / "instruction.md").write_text("x")
        (starter / "tasks" / task / "tests").mkdir()
        (starter / "tasks" / task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
        (starter / "tasks" / task / "task.toml").write_text('[environment]\ndocker_image = "org/img:1"\n')
    looks = FakeLooks(images={BASE_IMAGE})
    plan = _compile(starter, looks)
    assert looks.asked.count("org/img:1") == 1
    (warning,) = plan.warnings
    assert warning.startswith("task a, task b, task c: image org/img:1 is not on this machine's Docker")
    assert "`docker pull org/img:1`" in warning


def test_dockerfile_bases(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        "ARG V=1\nFROM --platform=linux/amd64 python:3.12 AS build\nRUN x\nFROM build AS test\n"
        "FROM scratch\nfrom ${BASE}\nFROM debian:12\n")
    assert dockerfile_bases(tmp_path) == ["python:3.12", "debian:12"]
    assert dockerfile_bases(tmp_path / "missing") == []


def _suite(backend: str, agent: str) -> tuple[Suite, list[Arm]]:
    arm = {"name": "baseline", "role": "baseline", "agent": agent, "model": "m", "network": "public"}
    if agent == "command":
        arm["command"] = "true"
    suite = Suite.model_validate({"name": "s", "tasks_dir": "t", "backend": backend, "arms": [arm]})
    return suite, suite.arms


@pytest.mark.parametrize(("backend", "expected"), [("local", 1), ("docker", 1), ("daytona", 0)])
def test_an_agent_cli_missing_here_is_a_warning_where_cells_start_it_here(backend: str, expected: int) -> None:
    suite, arms = _suite(backend, "claude-code")
    found = cli_findings(suite, arms, FakeLooks())
    assert len(found) == expected  # daytona: the image must carry it, and the preflight checks there
    if found:
        assert found[0].where == "arm baseline" and "`claude`" in found[0].what
        assert "npm install -g @anthropic-ai/claude-code" in found[0].fix
    assert cli_findings(suite, arms, FakeLooks(clis={"claude-code"})) == []
    assert cli_findings(*_suite(backend, "command"), FakeLooks()) == []


def test_a_probe_host_not_reachable_is_a_warning() -> None:
    command = ("curl -s https://api.anthropic.com/v1/messages -H 'x: y' | grep -q 200; "
               "curl http://gw.internal:8080/health; curl https://$HOST/x")
    assert probe_hosts(command) == [("api.anthropic.com", 443), ("gw.internal", 8080)]
    account = Account.model_validate({"name": "a", "route": {"env": {"K": "V"}}, "limits": {"max_concurrent": 1},
                                      "probe_command": command})
    found = probe_findings([account], FakeLooks(hosts={"gw.internal"}))
    assert [f.what.split(",")[0] for f in found] == ["its probe_command calls api.anthropic.com:443"]
    assert probe_findings([account], FakeLooks(hosts={"gw.internal", "api.anthropic.com"})) == []


def test_host_looks_connects_for_real() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert HostLooks().reaches("127.0.0.1", port)
    assert not HostLooks().reaches("127.0.0.1", port)  # closed now


@pytest.mark.docker
def test_host_looks_asks_the_docker_daemon(docker_client: Any, base_image: str) -> None:
    looks = HostLooks()
    assert looks.image(base_image) is True
    assert looks.image("ray-bench-never-built:0") is False


def test_the_cli_prints_each_warning_and_strict_exits_2(starter: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ray_bench.cli import app

    suite = yaml.safe_load((starter / "suite.yaml").read_text())
    suite["backends"]["docker"]["image"] = "ray-bench-never-built:0"
    suite["arms"][0]["image"] = "ray-bench-never-built:0"
    (starter / "suite.yaml").write_text(yaml.safe_dump(suite))
    args = ["plan", "--suite", str(starter / "suite.yaml"), "--accounts", str(starter / "accounts.yaml"),
            "--runs-dir", str(tmp_path / "runs")]
    strict = CliRunner().invoke(app, [*args, "--strict", "--run-id", "strict"])
    assert strict.exit_code == 2, strict.output
    assert "ray-bench-never-built:0" in strict.output and not (tmp_path / "runs" / "strict").exists()
    warned = CliRunner().invoke(app, [*args, "--run-id", "warned"])
    assert warned.exit_code == 0, warned.output
    receipt = RunPaths(tmp_path / "runs" / "warned").receipt.read_text()
    assert "- none" not in receipt.split("## Warnings")[1].split("##")[0]
    assert "ray-bench-never-built:0 is not on this machine's Docker" in receipt


def test_warnings_none_only_when_there_are_none(starter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ray_bench.plan.readiness.HostLooks.image", lambda self, tag: True)
    planned = plan_run(suite=starter / "suite.yaml", accounts=starter / "accounts.yaml", runs_dir=tmp_path / "r",
                       run_id="ok")
    assert planned.warnings == []
    assert "## Warnings\n\n- none" in RunPaths(planned.run_root).receipt.read_text()
    monkeypatch.setattr("ray_bench.plan.readiness.HostLooks.image", lambda self, tag: False)
    with pytest.raises((ConfigError, MultipleInputErrors)):
        plan_run(suite=starter / "suite.yaml", accounts=starter / "accounts.yaml", runs_dir=tmp_path / "r",
                 run_id="strict", strict=True)
