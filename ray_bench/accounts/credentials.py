"""Facts about credential routes that can be read without reading a secret value: a HOME
login's expiry lives with the rest of what ray-bench knows of HOME logins
(:mod:`ray_bench.cells.home_logins`, which ``plan`` reads too), named here for the accounts."""

from __future__ import annotations

from ray_bench.cells.home_logins import login_expiry

__all__ = ["login_expiry"]
