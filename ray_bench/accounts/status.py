"""`ray-bench accounts status|probe|hold|release|enable`: what an operator asks of accounts."""

from __future__ import annotations

import getpass
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_bench.accounts.core import AccountSnapshot
from ray_bench.accounts.credentials import login_expiry
from ray_bench.accounts.holds import read_holds, write_hold
from ray_bench.accounts.probe import run_probe
from ray_bench.accounts.store import AccountStore, restored_core
from ray_bench.config.loader import load_accounts
from ray_bench.config.secrets import refuse_operator_text
from ray_bench.errors import UserInputError
from ray_bench.evidence.catalog import Catalog
from ray_bench.models.accounts import Account
from ray_bench.state import default_state_root


def _route(account: Account) -> str:
    parts = [f"{t}<-${s}" for t, s in sorted(account.route.env.items())]
    if account.route.home:
        parts.append(f"HOME={account.route.home}")
    return ", ".join(parts)


#: The accounts' snapshots from the cluster's admission actor, by account name (the CLI injects
#: :func:`ray_bench.onray.account_snapshots.live_snapshots` when a cluster is named): accounts
#: stays free of Ray.
LiveSnapshots = Callable[[list[Account], Path], Mapping[str, AccountSnapshot]]


@dataclass(frozen=True)
class AccountStatus:
    """One account as ``accounts status`` and ``status`` show it: from the cluster's actor when
    one runs, else from the durable state under the state root (``accounts.sqlite``), else from
    the accounts file alone (``source``: ``cluster``, ``state root`` or ``config``)."""

    name: str
    state: str
    source: str
    inflight: int
    limit: int
    tokens: float
    cooldown_left_sec: int
    #: When a cooling account admits again (epoch seconds), if it is cooling.
    cooling_until: float | None
    window_used: int
    window_usd: float
    #: All-time spend on this state root (what a lifetime ``spend_usd`` budget counts).
    spent_usd: float
    budget_usd: float | None
    last_error: str
    recommended_parallelism: int
    route: str
    hold: dict[str, Any] | None
    login_expires: str | None
    login_expiring_within_h: float | None
    #: Slots runs held when the account's actor last wrote (a dead run's free after two minutes).
    held_slots: int = 0
    #: An ``accounts enable`` the account's actor has not applied yet.
    enable_pending: bool = False
    #: Charges in ``spent_usd`` that are only a lower bound (a CLI cut before it recorded every call).
    spent_lower_bound: int = 0
    #: Charges in ``spent_usd`` of unknown cost (counted at the cell's expected cost).
    spent_unknown: int = 0
    #: Stored charges refused when read (not finite), not in ``spent_usd``: ``accounts repair`` clears them.
    spent_refused: int = 0

    def to_json(self) -> dict[str, Any]:
        """Strict JSON's shape: an account with no start rate limit has unlimited tokens, written
        as ``null`` with ``tokens_unlimited`` saying why (JSON has no Infinity)."""
        unlimited = math.isinf(self.tokens)
        return {**self.__dict__, "tokens": None if unlimited else self.tokens, "tokens_unlimited": unlimited}

    def line(self) -> str:
        """The account's durable state in words: ``acct-a: cooling until 18:34:00 (usage
        limit ...); spent $0.12 of $2.50; window 3 cells, $0.05``."""
        what = self.state
        if self.state == "cooling" and self.cooling_until is not None:
            what = f"cooling until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.cooling_until))}"
        if self.enable_pending:
            what += " (enable pending)"
        parts = [f"{self.name}: {what}" + (f" ({self.last_error})" if self.last_error else "")]
        budget = f" of ${self.budget_usd:.2f}" if self.budget_usd is not None else ""
        parts.append(f"spent {'at least ' if self.spent_lower_bound else ''}${self.spent_usd:.2f}{budget}"
                     + _not_exact(self.spent_lower_bound, self.spent_unknown))
        if self.spent_refused:
            parts.append(f"{self.spent_refused} stored charge{'s' if self.spent_refused != 1 else ''} not finite, "
                         "not counted (`ray-bench accounts repair` removes them)")
        if self.window_used or self.window_usd:
            parts.append(f"window {self.window_used} cells, ${self.window_usd:.2f}")
        if self.held_slots:
            parts.append(f"{self.held_slots} slots held")
        return "; ".join(parts) + f" [{self.source}]"


def _not_exact(lower_bound: int, unknown: int) -> str:
    """The words beside a lifetime spend that is not exact."""
    parts = [f"{lower_bound} charge{'s' if lower_bound != 1 else ''} a lower bound"] if lower_bound else []
    if unknown:
        parts.append(f"{unknown} of unknown cost, counted at the expected cost")
    return f" ({'; '.join(parts)})" if parts else ""


def account_status(path: Path, *, live: LiveSnapshots | None = None,
                   state_root: Path | None = None) -> list[AccountStatus]:
    return accounts_state(load_accounts(path).accounts, live=live, state_root=state_root)


def accounts_state(accounts: list[Account], *, live: LiveSnapshots | None = None, state_root: Path | None = None,
                   now: float | None = None) -> list[AccountStatus]:
    """Each account's state: live from a cluster (what ``live`` reads there), else as its actor
    last saved it under the state root."""
    root = state_root or default_state_root()
    live_snaps = live(accounts, root) if live is not None else {}
    holds = read_holds(root)
    now = time.time() if now is None else now
    store = AccountStore.open_readonly(root)  # the lifetime spend's bounds are only there
    rows = []
    try:
        for account in accounts:
            limits = account.limits
            core, saved = restored_core(account.name, limits, store, now)
            snap: AccountSnapshot = live_snaps.get(account.name) or core.snapshot(now)
            source = ("cluster" if account.name in live_snaps else
                      "state root" if saved.state is not None or saved.spent_usd or saved.starts else "config")
            pending = store is not None and any(e.kind == "enable" for e in store.pending_events(account.name))
            expires = login_expiry(account.route.home) if account.route.home else None
            state = str(snap.state)
            if account.name in holds:
                state = "held"
            elif expires is not None and expires <= now:
                state = "expired"
            cooling = snap.cooldown_left > 0
            rows.append(AccountStatus(
                name=account.name, state=state, source=source, inflight=snap.inflight, limit=snap.limit,
                tokens=round(snap.tokens, 1), cooldown_left_sec=round(snap.cooldown_left),
                cooling_until=round(now + snap.cooldown_left, 1) if cooling else None,
                window_used=snap.window_used, window_usd=round(snap.window_usd, 4),
                spent_usd=round(snap.spent_usd, 4), budget_usd=limits.spend_usd,
                last_error=snap.last_error or "",
                recommended_parallelism=0 if state in ("held", "expired") else snap.recommended_parallelism,
                route=_route(account), hold=holds.get(account.name),
                login_expires=time.strftime("%Y-%m-%d %H:%M", time.localtime(expires)) if expires else None,
                login_expiring_within_h=round((expires - now) / 3600, 1) if expires else None,
                held_slots=snap.inflight if account.name in live_snaps else len(saved.leases),
                enable_pending=pending, spent_lower_bound=saved.spent_not_exact.get("lower_bound", 0),
                spent_unknown=saved.spent_not_exact.get("unknown", 0), spent_refused=saved.spent_refused))
    finally:
        if store is not None:
            store.close()
    return rows


def probe_accounts(path: Path, *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Check that each route resolves here and run its probe command with the route's env; the
    answer is classified with the error catalog (a rate-limited one-token request, say)."""
    catalog = Catalog.default()
    return [run_probe(account, timeout=timeout, catalog=catalog).to_json()
            for account in load_accounts(path).accounts]


def set_hold(path: Path, names: list[str], *, hold: bool, reason: str,
             state_root: Path | None = None) -> dict[str, bool]:
    """Hold or release ``names`` (the operator's word, not the health state machine's: a
    disabled account stays disabled when released); returns name -> whether its hold changed."""
    loaded = load_accounts(path).accounts
    refuse_operator_text({"--reason": reason}, [a.route.env for a in loaded])
    known = {a.name for a in loaded}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserInputError(f"unknown account(s) {', '.join(unknown)}", where=str(path),
                             fix=f"choose from {', '.join(sorted(known))}")
    root = state_root or default_state_root()
    return {name: write_hold(root, name, hold=hold, reason=reason) for name in names}


def repair_spend(path: Path, *, reason: str, who: str | None = None,
                 state_root: Path | None = None) -> dict[str, int]:
    """Remove the stored charges that are not finite from every account of the accounts file
    (what a ray-bench before issue 58 wrote from an agent's ``"cost_usd": Infinity``), each
    removal recorded with who and why; returns account -> charges removed (those with any)."""
    loaded = load_accounts(path).accounts
    refuse_operator_text({"--reason": reason}, [a.route.env for a in loaded])
    if not reason.strip():
        raise UserInputError("repair needs a reason", where="--reason", fix="say why, e.g. 'inf spend from run r7'")
    names = [a.name for a in loaded]
    store = AccountStore(state_root or default_state_root())
    removed = {}
    try:
        for name in names:
            gone = store.repair_spend(name)
            if gone:
                store.add_event(name, "repair", f"removed {gone} charges not finite: {reason.strip()}",
                                who or getpass.getuser())
                removed[name] = gone
    finally:
        store.close()
    return removed


def enable_account(path: Path, name: str, *, reason: str, who: str | None = None,
                   state_root: Path | None = None) -> str | None:
    """Record an operator's ``enable`` of a disabled (or expired) account in the state root's
    account store; the account's actor, its one writer, applies it on its next call (or when
    it is next created). Returns the state the account was last saved in."""
    loaded = load_accounts(path).accounts
    refuse_operator_text({"--reason": reason}, [a.route.env for a in loaded])
    known = {a.name for a in loaded}
    if name not in known:
        raise UserInputError(f"unknown account {name}", where=str(path), fix=f"choose from {', '.join(sorted(known))}")
    if not reason.strip():
        raise UserInputError("enable needs a reason", where="--reason", fix="say what changed, e.g. 'new login'")
    store = AccountStore(state_root or default_state_root())
    try:
        previous = store.health_state(name)
        store.add_event(name, "enable", reason.strip(), who or getpass.getuser())
    finally:
        store.close()
    return previous
