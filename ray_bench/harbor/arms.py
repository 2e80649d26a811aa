"""Plan-time facts of a Harbor arm, read from Harbor's own registry and option models: what the
receipt shows (agent, version, options, model roles) or why the arm cannot run here."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ray_bench.models.suite import Arm

#: Harbor's agents that call no model: the oracle runs the task's solution, nop does nothing.
MODEL_FREE = frozenset({"oracle", "nop"})
#: Harbor agents whose code runs on the host and drives the sandbox from outside (LiteLLM calls
#: leave the driver's node, never the sandbox); every other one installs itself in the sandbox.
HOST_SIDE = frozenset({"terminus-2", "oracle", "nop"})
#: Harbor's installed agents whose CLI ray-bench lays over the task image on docker (the
#: ray-bench adapter of the same CLI, :mod:`ray_bench.agents.layer`). Harbor's ``install()``
#: first runs the agent's version command (``is_requested_version_installed``): with the CLI on
#: the image's PATH it finds it and installs nothing, so the setup succeeds offline. The adapter
#: also reads the CLI's own output live (the watchdog) and after the run (request ids).
LAID_CLI = {"claude-code": "claude-code", "codex": "codex", "gemini-cli": "gemini-cli"}
#: What each laid CLI's Harbor agent leaves in the sandbox's ``/logs/agent``: its stdout (as
#: the adapter reads a CLI's stdout); the sessions go to ``sessions/`` there, as the adapters
#: collect them.
CLI_OUTPUT = {"claude-code": "claude-code.txt", "codex": "codex.txt", "gemini-cli": "gemini-cli.txt"}


def laid_cli(harbor_agent: str | None) -> str | None:
    """The ray-bench agent whose CLI layer serves Harbor's ``harbor_agent``, or None."""
    return LAID_CLI.get(harbor_agent or "")
#: Where a Python 3.12 environment with the extra comes from (one line of every refusal).
HOW_TO_GET = ("run scripts/harbor-env.sh and plan with .venv-harbor/bin/ray-bench, or "
              "`pip install 'ray-bench[harbor]'` under Python 3.12")


#: Option names that hold a credential: refused in a suite (a plan and its receipt are shared).
_SECRET_KEY = re.compile(r"(api_?key|token|secret|password|credential)", re.IGNORECASE)


@dataclass(frozen=True)
class HarborArm:
    """What a Harbor arm runs, as Harbor reports it."""

    agent: str
    version: str
    harbor_version: str
    #: The options after Harbor's own model validated them (defaults filled), or the kwargs as
    #: given for an agent that declares no options model (Harbor ignores unknown ones there).
    options: dict[str, Any]
    #: (role, model, what calls it): every model call path the agent has.
    roles: tuple[tuple[str, str, str], ...]
    host_side: bool


def interpreter_refusal() -> str | None:
    """Why Harbor cannot run in this interpreter (too old, or the extra missing), or None."""
    if sys.version_info < (3, 12):
        return (f"needs Python 3.12 or newer, and this is Python {sys.version.split()[0]} "
                f"({sys.executable})")
    try:
        import harbor.agents.factory  # noqa: F401
    except ImportError as exc:
        return f"needs the `harbor` extra, which is not installed in {sys.executable} ({exc})"
    return None


def harbor_arm(arm: Arm) -> HarborArm | str:
    """The arm's facts, or a one-line refusal (an unknown agent, options Harbor refuses, a
    missing model). Call only after :func:`interpreter_refusal` said None."""
    from harbor.agents.factory import AgentFactory
    from harbor.models.agent.name import AgentName

    name = arm.harbor_agent or ""
    if name not in AgentName.values():
        known = AgentFactory.registered_names()
        return f"unknown Harbor agent {name!r} (Harbor {_harbor_version()} has {len(known)}: {', '.join(known)})"
    try:
        cls = AgentFactory.get_agent_class(AgentName(name))
    except ImportError as exc:  # an agent whose own dependencies are missing
        return f"Harbor agent {name} cannot be imported here: {exc}"
    secret = next((k for k in arm.harbor_options if _SECRET_KEY.search(k)), None)
    if secret is not None:
        return (f"harbor_options.{secret} would put a credential in the suite, plan and receipt: give it "
                "through the account's route (its key and base URL reach the agent's model client)")
    try:
        options = cls.parse_options(dict(arm.harbor_options), {})
    except ValueError as exc:
        return "harbor_options: " + "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if name not in MODEL_FREE and not arm.model:
        return f"Harbor agent {name} calls a model: give the arm a `model:` (a LiteLLM name, e.g. anthropic/...)"
    shown = options.model_dump(mode="json") if options is not None else dict(arm.harbor_options)
    pinned = shown.get("version") if isinstance(shown, dict) else None
    version = (f"{pinned} (pinned: Harbor's setup installs it where the image lacks it)" if pinned
               else _agent_version(cls))
    return HarborArm(agent=name, version=version, harbor_version=_harbor_version(),
                     options=shown, roles=_roles(name, arm.model, shown), host_side=name in HOST_SIDE)


def _roles(name: str, model: str | None, options: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
    if name in MODEL_FREE or not model:
        return ()
    roles = [("executor", model, f"{name} (LiteLLM, on the host)" if name in HOST_SIDE else f"{name} in the sandbox")]
    if name == "terminus-2" and options.get("enable_summarize", True):
        # Terminus 2's context summariser is three more calls (summary, questions, answers) on
        # its own LLM, i.e. the same model and route, when the context runs short.
        roles.append(("subagent", model, "terminus-2 summariser (summary, questions, answers)"))
    return tuple(roles)


def _agent_version(cls: type[Any]) -> str:
    """The agent's ``version()``: the built-ins with a fixed version return a constant without
    reading their state; an installed agent's is its CLI's, known once installed."""
    try:
        version = cls.version(object.__new__(cls))
    except (AttributeError, TypeError, ValueError):
        version = None
    if version:
        return str(version)
    laid = laid_cli(getattr(cls, "name", lambda: "")())
    host = _host_cli_version(laid) if laid else None
    if host:
        return f"{host} (this node's CLI, laid on docker; Harbor's setup confirms it)"
    return "the installed CLI's (known at setup)"


def _host_cli_version(agent: str) -> str | None:
    """The version in the package.json of the CLI this node would lay, or None."""
    from ray_bench.agents import adapter
    from ray_bench.agents.layer import host_cli

    try:
        cli = host_cli(agent)
    except OSError:
        return None
    if cli is None:
        return None
    package = adapter(agent).npm_package
    modules = next((p for p in (cli.entry or cli.executable).parents if p.name == "node_modules"), None)
    if modules is None:
        return None
    try:
        data = json.loads((modules / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return str(data["version"]) if isinstance(data, dict) and data.get("version") else None
    return None


def _harbor_version() -> str:
    try:
        return metadata.version("harbor")
    except metadata.PackageNotFoundError:
        return "unknown"
