"""The model-role table: what each arm's roles are, as the receipt and the report show them,
and the plan-time check that every role's route names something that exists."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray_bench.agents.prices import price_of
from ray_bench.errors import ConfigError, UserInputError
from ray_bench.models.accounts import Account
from ray_bench.models.suite import Arm
from ray_bench.models.task.harbor import TaskConfig
from ray_bench.tasks.envvars import template_names

#: The route of a role that uses the credentials of the account its cell runs on.
CELL_ACCOUNT = "accounts"
#: The executor role's ``max_spend_usd`` (and ``max_tokens``) stop an attempt live: the
#: watchdog's bound rules (ray_bench/agents/watchdog.py) price the CLI's live usage at its model's
#: list price (ray_bench/agents/prices.py). A model with no price cannot be held to a spend bound,
#: and the receipt says so.
SPEND_BOUND_ENFORCED = True


def check_role_routes(arms: list[Arm], accounts: list[Account], environ: Mapping[str, str],
                      where: Path, errors: list[UserInputError]) -> None:
    """A role's route is ``accounts``, the name of an account of the accounts file, or the name
    of an environment variable set where the plan is made (a route by variable); anything else
    is a typo that would leave the role without credentials at run time."""
    names = sorted(a.name for a in accounts)
    for arm in arms:
        for n, role in enumerate(arm.roles):
            route = role.route
            if route == CELL_ACCOUNT or route in names or environ.get(route):
                continue
            errors.append(ConfigError(
                f"arms.{arm.name}.roles[{n}] ({role.name or role.role}): route {route!r} names no "
                f"account and no environment variable set here", where=str(where),
                fix=f"use `{CELL_ACCOUNT}`, an account name ({', '.join(names[:5]) or 'none'}) or an "
                "exported variable's name"))


def _judge_route(arm: Arm) -> str | None:
    return next((r.route for r in arm.roles if r.role == "judge"), None)


def judge_account(arm: Arm, cell_account: str, accounts: Mapping[str, Account]) -> str | None:
    """The account whose route gives the task's verifier its credential variables: the arm's
    ``judge`` role routed to an account of the accounts file, or to ``accounts`` (the account the
    cell runs on, ``cell_account``); None when the arm has no judge role or routes it by a
    variable of its own (the verifier's ``${VAR}`` then reads the node's env, as without one)."""
    route = _judge_route(arm)
    if route == CELL_ACCOUNT:
        return cell_account
    return route if route is not None and route in accounts else None


def verifier_names(config: TaskConfig) -> set[str]:
    """The variables a task's verifiers fill from templates (``[verifier].env`` and each step's)."""
    return {name for env in [config.verifier.env, *(s.verifier.env for s in config.steps or [])]
            for name in template_names(env)}


def judge_lease_account(arm: Arm, config: TaskConfig, accounts: Mapping[str, Account]) -> str | None:
    """The account a cell of ``arm`` on a task of ``config`` holds a second lease on, for its
    verifier's credentials: the arm's judge role routed to a named account whose route supplies a
    variable the task's verifier names. None: no judge role, one routed by a variable, one routed
    to ``accounts`` (the cell's own lease counts it), or a verifier that names none of its variables."""
    route = _judge_route(arm)
    if route is None or route == CELL_ACCOUNT or route not in accounts:
        return None
    return route if verifier_names(config) & set(accounts[route].route.env) else None


def verifier_route_vars(arm: Arm, accounts: Mapping[str, Account]) -> dict[str, set[str]]:
    """Per account an arm's verifiers may take credentials from (its judge route: one account,
    or every account of the pool when routed to ``accounts``), the variable names that route
    supplies. Empty: the arm routes no credential to verifiers."""
    route = _judge_route(arm)
    if route == CELL_ACCOUNT:
        chosen = list(accounts.values())
    elif route is not None and route in accounts:
        chosen = [accounts[route]]
    else:
        return {}
    return {a.name: set(a.route.env) for a in chosen}


def render_verifier_routes(arms: list[Arm], accounts: list[Account], wanted: Mapping[str, list[str]]) -> list[str]:
    """The receipt's table of verifier credentials: per arm, which credential variables the tasks'
    verifiers name (``wanted``: variable -> tasks) and the account route each comes from. Names
    only, never a value."""
    by_name = {a.name: a for a in accounts}
    rows: list[str] = []
    for arm in arms:
        for account, names in sorted(verifier_route_vars(arm, by_name).items()):
            for var in sorted(v for v in wanted if v in names):
                tasks = wanted[var]
                shown = ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
                rows.append(f"| {arm.name} | {var} | {account} | {var}<-${by_name[account].route.env[var]} | {shown} |")
    if not rows:
        return []
    return ["## Verifier credentials", "",
            "Each cell's verifier gets these from its arm's judge route, resolved on the node that runs it "
            "(recorded by name; the attempt's summary names the account).", "",
            "| arm | variable | account | route | tasks |", "|---|---|---|---|---|", *rows, "",
            *_counted_lines(arms, by_name, set(wanted))]


def _counted_lines(arms: list[Arm], accounts: Mapping[str, Account], wanted: set[str]) -> list[str]:
    """How the verifiers' use of each judge account is counted: on the cell's own lease (``route:
    accounts``), or by a second lease on the named account, held for the cell's life, so that
    its limits bound how many such cells run at once."""
    out: list[str] = []
    named = {route for arm in arms if (route := _judge_route(arm)) is not None and route in accounts}
    for name in sorted(named):
        if not wanted & set(accounts[name].route.env):
            continue
        lim = accounts[name].limits
        others = sum(a.limits.max_concurrent for a in accounts.values() if a.name != name)
        window = (f", {lim.window.max_cells} per {lim.window.hours:g}h"
                  if lim.window is not None and lim.window.max_cells else "")
        rate = f", {lim.starts_per_minute:g} starts/min" if lim.starts_per_minute else ""
        out.append(f"- counted on `{name}`: each cell whose verifier uses it holds a lease there too, from its "
                   f"start to its end: at most {lim.max_concurrent} such cells at a time{rate}{window}"
                   + (f" (the other accounts could run {others})" if lim.max_concurrent < others else ""))
    if any(_judge_route(arm) == CELL_ACCOUNT for arm in arms):
        out.append(f"- `route: {CELL_ACCOUNT}`: counted on the cell's own lease (its verifier runs within it)")
    return out


def executor_max_turns(arm: Arm) -> int | None:
    """The executor role's bound on turns, which the agent CLI is given (None: unbounded)."""
    return next((r.max_turns for r in arm.roles if r.role == "executor" and r.max_turns), None)


def role_rows(arm: Arm) -> list[dict[str, Any]]:
    """The arm's declared roles; an arm that declares no executor gets one for its ``model:``
    (or ``undeclared``: the gap is visible before confirmation)."""
    rows: list[dict[str, Any]] = [
        {"role": r.role, "name": r.name or r.role, "model": r.model, "route": r.route,
         "billing": r.billing, "max_turns": r.max_turns or "-", "max_tokens": r.max_tokens or "-",
         "max_spend_usd": spend_bound(r.max_spend_usd, r.model if r.role == "executor" else None,
                                      live=r.role == "executor")}
        for r in arm.roles]
    if not any(r.role == "executor" for r in arm.roles):
        rows.insert(0, {"role": "executor", "name": "executor", "model": arm.model or "undeclared",
                        "route": "accounts", "billing": "undeclared", "max_turns": "-",
                        "max_tokens": "-", "max_spend_usd": "-"})
    return rows


def render_roles(arms: list[Arm]) -> list[str]:
    out = ["## Model roles", "",
           "| arm | role | name | model | route | billing | max turns | max tokens | max spend |",
           "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        for r in role_rows(arm):
            out.append(f"| {arm.name} | {r['role']} | {r['name']} | {r['model']} | {r['route']} | "
                       f"{r['billing']} | {r['max_turns']} | {r['max_tokens']} | {r['max_spend_usd']} |")
    return out


def spend_bound(usd: float | None, model: str | None, *, live: bool = True) -> str:
    """A role's per-attempt spend bound with whether anything enforces it: the executor's is
    held live at its model's list price; another role's calls are not the CLI's to watch."""
    if usd is None:
        return "-"
    if not SPEND_BOUND_ENFORCED or not live:
        return f"${usd:g} (not enforced)"
    if price_of(model) is None:
        return f"${usd:g} (not enforced: no list price for {model or 'the model'})"
    return f"${usd:g}"
