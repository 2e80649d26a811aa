"""`ray-bench accounts status|probe|hold|release`: what an operator asks of accounts."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, cast

from ray_bench.accounts.core import AccountCore, AccountLimits, AccountSnapshot
from ray_bench.accounts.credentials import login_expiry
from ray_bench.accounts.holds import read_holds, write_hold
from ray_bench.cells.credentials import CredentialMissing, Redactor, resolve
from ray_bench.config.loader import load_accounts
from ray_bench.config.secrets import refuse_secret_text
from ray_bench.errors import UserInputError
from ray_bench.evidence.catalog import Catalog
from ray_bench.models.accounts import Account
from ray_bench.state import default_state_root


def _route(account: Account) -> str:
    parts = [f"{t}<-${s}" for t, s in sorted(account.route.env.items())]
    if account.route.home:
        parts.append(f"HOME={account.route.home}")
    return ", ".join(parts)


def _live_snapshots(accounts: list[Account], address: str | None) -> dict[str, AccountSnapshot]:
    """Snapshots from the shared account actors, when a cluster runs them."""
    if address is None and not os.environ.get("RAY_ADDRESS"):
        return {}
    import ray

    from ray_bench.cells.pool import NAMESPACE

    try:
        ray.init(address=address or os.environ["RAY_ADDRESS"], namespace=NAMESPACE, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserInputError(f"cannot join Ray at {address}: {exc}", where="--address",
                             fix="give the address of the cluster that runs the accounts") from None
    found: dict[str, AccountSnapshot] = {}
    try:
        for account in accounts:
            try:
                actor = ray.get_actor(f"account:{account.name}", namespace=NAMESPACE)
            except ValueError:
                continue
            found[account.name] = cast(AccountSnapshot, ray.get(actor.snapshot.remote(), timeout=30))
    finally:
        ray.shutdown()
    return found


def account_status(path: Path, *, address: str | None = None,
                   state_root: Path | None = None) -> list[dict[str, Any]]:
    accounts = load_accounts(path).accounts
    live = _live_snapshots(accounts, address)
    holds = read_holds(state_root or default_state_root())
    now = time.time()
    rows = []
    for account in accounts:
        snap: AccountSnapshot = live.get(account.name) or AccountCore(
            account.name, AccountLimits.from_config(account.limits), now=now).snapshot(now)
        expires = login_expiry(account.route.home) if account.route.home else None
        state = str(snap.state)
        if account.name in holds:
            state = "held"
        elif expires is not None and expires <= now:
            state = "expired"
        rows.append({
            "name": account.name, "state": state, "source": "cluster" if account.name in live else "config",
            "inflight": snap.inflight, "limit": snap.limit, "tokens": round(snap.tokens, 1),
            "cooldown_left_sec": round(snap.cooldown_left), "window_used": snap.window_used,
            "spent_usd": round(snap.spent_usd, 4), "last_error": snap.last_error or "",
            "recommended_parallelism": 0 if state in ("held", "expired") else snap.recommended_parallelism,
            "route": _route(account), "hold": holds.get(account.name),
            "login_expires": time.strftime("%Y-%m-%d %H:%M", time.localtime(expires)) if expires else None,
            "login_expiring_within_h": round((expires - now) / 3600, 1) if expires else None,
        })
    return rows


def probe_accounts(path: Path, *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Check that each route resolves here and run its probe command with the route's env; the
    answer is classified with the error catalog (a rate-limited one-token request, say)."""
    catalog = Catalog.default()
    rows = []
    for account in load_accounts(path).accounts:
        try:
            creds = resolve(account.route.env, account.route.home, os.environ)
        except CredentialMissing as exc:
            rows.append({"name": account.name, "verdict": "auth", "detail": str(exc)})
            continue
        expires = login_expiry(account.route.home) if account.route.home else None
        if expires is not None and expires <= time.time():
            rows.append({"name": account.name, "verdict": "expired", "detail": "the HOME login has expired"})
            continue
        if not account.probe_command:
            rows.append({"name": account.name, "verdict": "no-probe", "detail": "route present; no probe_command"})
            continue
        redact = Redactor(creds.secrets())
        env = {**os.environ, **creds.env}
        if creds.home is not None:
            env["HOME"] = str(creds.home)
        try:
            done = subprocess.run(["/bin/sh", "-c", account.probe_command], env=env, capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            rows.append({"name": account.name, "verdict": "timeout", "detail": f"no answer in {timeout:g}s"})
            continue
        output = redact.text((done.stdout + done.stderr)[-2000:])
        match = catalog.match({"agent_output": output, "agent_error": output})
        if done.returncode == 0 and match is None:
            verdict, detail = "ok", "probe answered"
        elif match is not None:
            verdict, detail = match.rule.failure_class, f"{match.rule.id}: {match.text}"
        else:
            verdict, detail = "failed", f"exit {done.returncode}: {output.strip()[-200:]}"
        rows.append({"name": account.name, "verdict": verdict, "detail": detail})
    return rows


def set_hold(path: Path, names: list[str], *, hold: bool, reason: str, address: str | None = None,
             state_root: Path | None = None) -> list[str]:
    refuse_secret_text(reason, "--reason")
    known = {a.name for a in load_accounts(path).accounts}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserInputError(f"unknown account(s) {', '.join(unknown)}", where=str(path),
                             fix=f"choose from {', '.join(sorted(known))}")
    root = state_root or default_state_root()
    for name in names:
        write_hold(root, name, hold=hold, reason=reason)
    return names


def enable_account(path: Path, name: str, *, reason: str, who: str | None = None,
                   state_root: Path | None = None) -> str | None:
    """Record an operator's ``enable`` of a disabled (or expired) account in the state root's
    account store; the account's actor, its one writer, applies it on its next call (or when
    it is next created). Returns the state the account was last saved in."""
    refuse_secret_text(reason, "--reason")
    import getpass

    from ray_bench.accounts.store import AccountStore

    known = {a.name for a in load_accounts(path).accounts}
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
