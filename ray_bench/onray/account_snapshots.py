"""``accounts status`` read live from a cluster: the snapshots the state root's admission actor
holds (:mod:`ray_bench.onray.admission`), injected into :func:`ray_bench.accounts.status.account_status`."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import ray

from ray_bench.accounts.core import AccountSnapshot
from ray_bench.errors import UserInputError
from ray_bench.models.accounts import Account
from ray_bench.onray.admission import admission_name
from ray_bench.onray.pool import NAMESPACE
from ray_bench.onray.start import init_ray


def live_snapshots(target: str, accounts: list[Account], state_root: Path, *,
                   where: str = "--address") -> dict[str, AccountSnapshot]:
    """Snapshots from the shared account actors of the cluster at ``target`` (named by ``where``),
    those it holds; none when no admission actor runs there."""
    try:
        init_ray(target, namespace=NAMESPACE, log_to_driver=False)  # Ray's own warnings filtered
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserInputError(f"cannot join Ray at {target}: {exc}", where=where,
                             fix="give the address of the cluster that runs the accounts") from None
    found: dict[str, AccountSnapshot] = {}
    try:
        try:
            actor = ray.get_actor(admission_name(state_root), namespace=NAMESPACE)
        except ValueError:
            return found
        for account in accounts:
            snap = cast("AccountSnapshot | None",
                        ray.get(actor.peek.remote("account", account.name, "snapshot"), timeout=30))
            if snap is not None:
                found[account.name] = snap
    finally:
        ray.shutdown()
    return found
