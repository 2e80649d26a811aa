"""The Ray actor that serves a state root's admission keepers (:mod:`ray_bench.accounts.keepers`):
one detached :class:`AdmissionActor` per state root, in namespace ``ray-bench``, named
``admission@<state root>``, placed on the head node, and the :class:`Member` handles through which
the driver's gate (:class:`~ray_bench.onray.gate.ActorGate`) calls one keeper as it would call an
actor. Why one process for every keeper: the keepers' module docstring."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from ray_bench.accounts.keepers import KEEPERS
from ray_bench.models.accounts import Account
from ray_bench.onray.pool import NAMESPACE
from ray_bench.state import default_state_root


@ray.remote(num_cpus=0, max_restarts=-1)
class AdmissionActor:
    """A state root's keepers, in one process (see the module's docstring). A restarted actor
    starts empty and remakes each keeper from its next call, which restores it from the state
    root."""

    def __init__(self, state_root: str) -> None:
        self.state_root = state_root
        self._keepers: dict[tuple[str, str], Any] = {}

    def call(self, kind: str, name: str, init: tuple[Any, ...], method: str, *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` of the ``kind`` keeper ``name``, made from ``init`` first
        if this process has none yet."""
        keeper = self._keepers.get((kind, name))
        if keeper is None:
            keeper = self._keepers[(kind, name)] = KEEPERS[kind](*init)
        return getattr(keeper, method)(*args, **kwargs)

    def peek(self, kind: str, name: str, method: str) -> Any:
        """``method()`` of a keeper this process has, or None: a read that makes nothing."""
        keeper = self._keepers.get((kind, name))
        return None if keeper is None else getattr(keeper, method)()


@dataclass(frozen=True)
class Member:
    """One keeper of an :class:`AdmissionActor`, called as an actor is:
    ``member.acquire_many.remote(...)`` is ``actor.call.remote("account", name, init,
    "acquire_many", ...)``. ``init`` travels with every call, so a restarted actor can remake
    the keeper from whichever call reaches it first."""

    actor: Any
    kind: str
    name: str
    init: tuple[Any, ...]

    def __getattr__(self, method: str) -> _Method:
        if method.startswith("_"):
            raise AttributeError(method)
        return _Method(self, method)


@dataclass(frozen=True)
class _Method:
    member: Member
    method: str

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        m = self.member
        return m.actor.call.remote(m.kind, m.name, m.init, self.method, *args, **kwargs)


#: Admission actors live on the head node. Anywhere else, losing that worker node made every
#: admission call fail (ActorUnavailableError) until Ray restarted the actor elsewhere, with
#: its leases and cooldowns lost; the head's loss ends the cluster anyway.
#: (tests/reliability/test_node_loss.py)
ON_HEAD = {"node:__internal_head__": 0.001}


def admission_name(state_root: Path | None = None) -> str:
    """The detached admission actor *of one state root*: its keepers persist to that root's
    accounts.sqlite, so two state roots on one cluster (two teams, or two test runs) must not
    share it -- the first one's root would get the second's leases. Runs with the same state
    root share it, which is the point (shared limits across runs)."""
    return f"admission@{Path(state_root or default_state_root()).resolve()}"


def admission_actor(state_root: Path | None = None) -> Any:
    root = str(Path(state_root or default_state_root()).resolve())
    return AdmissionActor.options(  # type: ignore[attr-defined]
        name=admission_name(state_root), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        resources=ON_HEAD,
    ).remote(root)


def account_member(actor: Any, account: Account, state_root: Path | None = None) -> Member:
    return Member(actor, "account", account.name,
                  (account.name, account.limits, str(state_root or default_state_root())))


def health_member(actor: Any, state_root: Path) -> Member:
    return Member(actor, "health", "", (str(state_root),))


def capacity_member(actor: Any, backend: str, size: int, state_root: Path | None = None) -> Member:
    return Member(actor, "capacity", backend, (backend, size, str(state_root or default_state_root())))
