"""Every node checked before the fan-out: a node that will host cell runners must have every
account's credential route (by name: env vars present, HOME directories there; no value is read
into the result) and must reach every backend of the plan. A node that fails gets no runners, so
no cells; the driver records each node's verdict (``node_check`` in the ledger) and ``status``
shows it. Credentials resolve on the node that runs the cell, so checking them only where
``plan`` ran let a two-node run lose both accounts mid-run ("AUDIT_KEY_A is not set on this
node"). What a node is checked for, and the check itself, are here; asking every node over Ray
is :func:`ray_bench.onray.nodes.check_nodes`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ray_bench.cells.credentials import CredentialMissing, resolve
from ray_bench.errors import UserInputError
from ray_bench.models.plan import Plan
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import LABEL_RUN
from ray_bench.sandboxes.supervisor import Reserve

#: How long reaching one backend may take on a node.
BACKEND_TIMEOUT_SEC = 45.0
#: A label no sandbox carries: listing it touches the backend and finds nothing.
_PROBE_RUN = "ray-bench-node-check"


@dataclass(frozen=True)
class NodeCheck:
    node_id: str
    address: str
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "problems": list(self.problems), "ok": self.ok}


@dataclass(frozen=True)
class CheckInputs:
    """What a node is checked for: (account, route env, route home) and (backend, options)."""

    routes: tuple[tuple[str, dict[str, str], str | None], ...]
    backends: tuple[tuple[str, dict[str, Any]], ...]

    @classmethod
    def of(cls, plan: Plan) -> CheckInputs:
        names = sorted({c.backend for c in plan.cells})
        return cls(
            routes=tuple((a.name, dict(a.route.env), a.route.home) for a in plan.accounts),
            backends=tuple((n, dict(plan.backends[n].options) if n in plan.backends else {}) for n in names),
        )


def problems_here(inputs: CheckInputs, environ: dict[str, str] | None = None) -> list[str]:
    """This node's problems, one line each (names, never values)."""
    env = dict(os.environ) if environ is None else environ
    problems: list[str] = []
    for account, route_env, home in inputs.routes:
        try:
            resolve(route_env, home, env)
        except CredentialMissing as exc:
            problems.append(f"account {account}: {exc}")
    try:
        Reserve(0).on_node(env)
    except UserInputError as exc:
        problems.append(exc.line())
    for backend, options in inputs.backends:
        try:
            asyncio.run(asyncio.wait_for(_touch(backend, options), BACKEND_TIMEOUT_SEC))
        except TimeoutError:
            problems.append(f"backend {backend}: no answer within {BACKEND_TIMEOUT_SEC:g}s")
        except Exception as exc:
            problems.append(f"backend {backend}: {type(exc).__name__}: {str(exc)[:300]}")
    return problems


async def _touch(name: str, options: dict[str, Any]) -> None:
    backend = make_backend(name, **options)
    try:
        await backend.list({LABEL_RUN: _PROBE_RUN})
    finally:
        await backend.close()


def summary_line(checks: Sequence[NodeCheck]) -> str:
    """``2 of 3 nodes passed; node 10.0.0.12 (ab12cd34): account a: env var K is not set ...``"""
    bad = [c for c in checks if not c.ok]
    head = f"{len(checks) - len(bad)} of {len(checks)} nodes passed their check"
    return "; ".join([head, *(f"node {c.address} ({c.node_id[:8]}): {', '.join(c.problems)}" for c in bad)])
