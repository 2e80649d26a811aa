"""After the agent ran in a container with a copy of a HOME login: the credential files it may
have refreshed come back to the host HOME (:func:`ray_bench.cells.home_logins.write_back`), and
their new tokens join the attempt's redactor. The files travel through the exec output, in
memory: nothing with a token is written under the run root."""

from __future__ import annotations

import shlex
from pathlib import Path

from ray_bench.cells.credentials import Redactor
from ray_bench.cells.home_logins import CREDENTIAL_FILES, tokens_in, tokens_of, write_back
from ray_bench.sandboxes import Sandbox


async def bring_back_login(sandbox: Sandbox, sandbox_home: str, host_home: Path, redactor: Redactor) -> list[str]:
    """Returns the credential files that replaced the host's copy."""
    written: list[str] = []
    for rel in CREDENTIAL_FILES:
        if not (host_home / rel).exists() and not (host_home / rel).parent.is_dir():
            continue
        result = await sandbox.exec(f"cat {shlex.quote(f'{sandbox_home}/{rel}')} 2>/dev/null", timeout=30,
                                    output_cap=1 << 20)
        if result.exit_code != 0 or not result.stdout.strip():
            continue
        redactor.extend(tokens_of(result.stdout))
        if write_back(host_home, rel, result.stdout):
            written.append(rel)
    redactor.extend(tokens_in(host_home))
    return written
