"""The shell of an account probe: run an account's ``probe_command`` with its route's env and
classify the answer with the error catalog, as an agent's output is. What a result does to the
account (cool, disable, clear a cooldown) is decided in :mod:`ray_bench.accounts.health`
(``probe_effect``); this module only runs the command. Injectable: the driver takes any
``(Account) -> ProbeResult``."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ray_bench.accounts.credentials import login_expiry
from ray_bench.cells.credentials import CredentialMissing, Redactor, resolve
from ray_bench.evidence.catalog import Catalog
from ray_bench.models.accounts import Account

#: How long a probe may take; it is meant to be a one-token request.
PROBE_TIMEOUT_SEC = 30.0

#: The shell's "cannot execute" / "not found": the probe never reached the provider.
_CANNOT_RUN_EXITS = (126, 127)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """``verdict``: ``ok``, a failure class of the catalog (``auth``, ``provider``, ...),
    ``expired``, ``timeout``, ``cannot-run`` (the command itself is broken), ``failed`` (a
    non-zero exit no rule matched) or ``no-probe``. ``detail`` is redacted, one line."""

    name: str
    verdict: str
    detail: str
    retry_after: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "verdict": self.verdict, "detail": self.detail}


ProbeRunner = Callable[[Account], ProbeResult]


def run_probe(account: Account, *, timeout: float = PROBE_TIMEOUT_SEC, catalog: Catalog | None = None,
              environ: Mapping[str, str] | None = None) -> ProbeResult:
    """Check that the route resolves here, then run the probe command with it."""
    environ = os.environ if environ is None else environ
    try:
        creds = resolve(account.route.env, account.route.home, environ)
    except CredentialMissing as exc:
        return ProbeResult(account.name, "auth", str(exc))
    expires = login_expiry(account.route.home) if account.route.home else None
    if expires is not None and expires <= time.time():
        return ProbeResult(account.name, "expired", "the HOME login has expired")
    if not account.probe_command:
        return ProbeResult(account.name, "no-probe", "route present; no probe_command")
    redact = Redactor(creds.secrets())
    env = {**environ, **creds.env}
    if creds.home is not None:
        env["HOME"] = str(creds.home)
    fix = "fix probe_command in the accounts file (`ray-bench accounts probe` runs it alone)"
    try:
        done = subprocess.run(["/bin/sh", "-c", account.probe_command], env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(account.name, "timeout", f"no answer in {timeout:g}s")
    except OSError as exc:
        return ProbeResult(account.name, "cannot-run", f"probe_command cannot run ({exc.strerror}); {fix}")
    output = redact.text((done.stdout + done.stderr)[-2000:])
    last = " ".join(output.strip().splitlines()[-1:])[-200:]
    if done.returncode in _CANNOT_RUN_EXITS:
        return ProbeResult(account.name, "cannot-run",
                           f"probe_command cannot run (exit {done.returncode}: {last}); {fix}")
    match = (catalog or Catalog.default()).match({"agent_output": output, "agent_error": output})
    if done.returncode == 0 and match is None:
        return ProbeResult(account.name, "ok", "probe answered")
    if match is not None:
        return ProbeResult(account.name, match.rule.failure_class, f"{match.rule.id}: {match.text}")
    return ProbeResult(account.name, "failed", f"exit {done.returncode}: {last}")
