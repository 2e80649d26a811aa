"""The one exception tree of ray-bench.

Every error the library raises on purpose derives from :class:`RayBenchError`.
Errors from the layer below (docker, daytona, ray, sqlite) are translated at the
boundary with ``raise Mapped(...) from exc``. A command that exits non-zero inside
a sandbox is a *result*, not an exception.

    RayBenchError
    ├── UserInputError                exit 2: nothing was started or written
    │   ├── ConfigError               a suite, accounts, backend or catalog file
    │   ├── TaskDirError              a Harbor task directory
    │   ├── SelectionError            a selection file
    │   ├── PlanError                 a plan file (edited, foreign, unreadable)
    │   ├── ConfirmationError         --confirm missing or naming another plan
    │   ├── PairingGuardError         a one-arm plan without its counterpart rows
    │   └── HaltActiveError           a resource halt blocks resume
    ├── LedgerError                   the ledger is unreadable or belongs elsewhere
    │   └── LedgerDamagedError        not a ledger at all (truncated, garbage): also exit 2
    ├── SandboxError                  a sandbox operation failed (class: executor)
    │   ├── SandboxUnavailableError   the provider cannot be reached (class: stack)
    │   │   └── SandboxExecReportError  an exec's answer came back cut or garbled (class: stack)
    │   ├── SandboxCreateError        create or image build failed (class: stack)
    │   ├── SandboxGoneError          the sandbox vanished mid-cell (class: executor)
    │   ├── SandboxRateLimitedError   the provider said 429 (class: capacity)
    │   ├── TaskEnvironmentError      a task's healthcheck or step setup failed (class: task)
    │   ├── SandboxQuotaError         the provider's organisation quota is full (class: capacity)
    │   ├── SandboxAuthError          the provider refused the backend's own key (class: stack)
    │   └── ArchiveEscapeError        an archive entry left its directory (class: executor)
    ├── ArtifactStoreError            an artifact store could not be reached or written
    ├── RayStartError                 a local Ray instance did not start (every attempt timed out)
    └── RunStopped                    the run stopped on purpose (drift, halt, circuit, spend)

``UserInputError`` carries *what*, *where* and *how to fix* so that the CLI can print
one line and exit 2.
"""

from __future__ import annotations


def fingerprint(secret: str) -> str:
    """All that any message may show of a secret: its first four characters and its length."""
    return f"{secret[:4]}... ({len(secret)} chars)"


class RayBenchError(Exception):
    """The root of every error ray-bench raises on purpose."""


class UserInputError(RayBenchError):
    """Bad input from the operator. The CLI prints :meth:`line` and exits 2."""

    def __init__(self, what: str, *, where: str = "", fix: str = "") -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        return f"{head} ({self.fix})" if self.fix else head


class ConfigError(UserInputError):
    """A suite, accounts, backend or error-catalog file is malformed."""


class TaskDirError(UserInputError):
    """A Harbor / Terminal-Bench task directory is malformed."""


class SelectionError(UserInputError):
    """A selection file is malformed or names unknown tasks."""


class PlanError(UserInputError):
    """A plan file is unreadable, edited after planning, or belongs to another run."""


class ConfirmationError(UserInputError):
    """``--confirm`` is missing or does not name the exact plan identity."""


class PairingGuardError(UserInputError):
    """A one-arm plan was asked for without valid counterpart rows."""


class HaltActiveError(UserInputError):
    """A resource halt exists in the run root; resume needs ``--clear-halt``."""


class MultipleInputErrors(UserInputError):
    """Several problems found in one pass; each is printed on its own line."""

    def __init__(self, errors: list[UserInputError]) -> None:
        self.errors = errors
        super().__init__("; ".join(e.line() for e in errors))

    def lines(self) -> list[str]:
        return [e.line() for e in self.errors]


class LedgerError(RayBenchError):
    """The ledger cannot be read or belongs to another plan."""


class LedgerDamagedError(LedgerError, UserInputError):
    """The file named as a run's ledger is not one (truncated, overwritten): the operator's
    input, so one line and exit 2, and still a LedgerError to the callers that catch those."""


class HostToolMissingError(RayBenchError):
    """A Harbor agent needs a program its sandbox lacks and cannot be given there (Terminus 2's
    tmux on ``local``'s host, or in an offline image): the attempt's ``cli_missing`` failure."""


class SandboxError(RayBenchError):
    """A sandbox operation failed. ``failure_class`` says how it is counted."""

    failure_class = "executor"


class SandboxDeleteRefusedError(SandboxError):
    """The provider still refuses to delete a sandbox (Daytona's 409 while it comes up); ``until``
    (monotonic) is when its TTL removes it anyway. The backend keeps trying until then."""

    def __init__(self, message: str, *, until: float) -> None:
        super().__init__(message)
        self.until = until


class SandboxProcessesSurvivedError(SandboxError):
    """A sandbox's processes were still alive after its delete killed them (a process stuck in
    the kernel ignores SIGKILL until it returns): the delete did not leave it clean."""


class SandboxUnavailableError(SandboxError):
    """The sandbox provider (daemon, API) cannot be reached."""

    failure_class = "stack"


class SandboxExecReportError(SandboxUnavailableError):
    """The provider answered an exec, but the report of the command's exit and output came back
    cut or garbled: the command may have run, and what it did is unknown (never taken as empty
    output). Counted as the provider's, like an answer lost after the command ran."""


class SandboxCreateError(SandboxError):
    """Creating a sandbox or building its image failed."""

    failure_class = "stack"


class SandboxGoneError(SandboxError):
    """The sandbox disappeared while the cell was running."""

    failure_class = "executor"


class SandboxOutOfMemoryError(SandboxGoneError):
    """The sandbox's memory limit killed the sandbox itself (its main process), not only a
    command in it: a verdict on the limit, counted as capacity like an OOM-killed command."""

    failure_class = "capacity"


class SandboxDiskFullError(SandboxError):
    """The sandbox's disk is full: a command's report could not even be written (the exec wrapper
    keeps a command's output in the sandbox, as Daytona's runner gives a sandbox one disk of its
    size). A verdict on the limit, counted as capacity like an out-of-memory sandbox."""

    failure_class = "capacity"


class SandboxRateLimitedError(SandboxError):
    """The sandbox provider rate-limited us; ``retry_after`` is in seconds."""

    failure_class = "capacity"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TaskEnvironmentError(SandboxError):
    """The task's environment never became ready: its healthcheck or a step's setup.sh failed.
    Nothing the agent did: the attempt is not a row."""

    failure_class = "task"


class SandboxQuotaError(SandboxError):
    """The provider refused a create because the organisation's quota (vCPU, memory, disk) is
    full: nothing was made, and fewer sandboxes at once will fit. ``resource`` names which."""

    failure_class = "capacity"

    def __init__(self, message: str, *, resource: str | None = None) -> None:
        super().__init__(message)
        self.resource = resource


class SandboxTooLargeError(SandboxError):
    """The provider refused a sandbox of this size outright: it asks more than one sandbox may
    have (Daytona's per-sandbox vCPU, memory or disk limit). Nothing was made, and no wait makes it
    fit: counted against the cell's attempts like a task's own failure. ``plan`` refuses such a
    task before any spend when the pool names the limits (``max_sandbox_*``). Also a GPU request on
    a Docker daemon with no GPU device driver ("could not select device driver"): plan refuses it
    where its own daemon has no GPU runtime; a node of the cluster may still lack one."""

    failure_class = "task"


class SandboxAuthError(SandboxError):
    """The sandbox provider refused the backend's own credential (a 401/403 from its API): the
    backend's key is at fault, never a model account's login."""

    failure_class = "stack"


class ArchiveEscapeError(SandboxError):
    """An archive entry tried to write outside its destination directory."""

    failure_class = "executor"


class ArtifactStoreError(RayBenchError):
    """An artifact store (``execute --artifacts URI``) could not be reached or written."""


class RayStartError(RayBenchError):
    """A local Ray instance did not start: every attempt timed out or hung (a host too loaded for
    Ray's fixed waits). Nothing of it is left running; the message says what to do."""


class AdmissionActorError(RayBenchError):
    """An admission actor (account, pool or health) died on every try of a call; Ray restarts
    them, so this is a cluster that cannot keep one alive. The run resumes once it can."""


class RunStopped(RayBenchError):
    """The run stopped on purpose; ``reason`` is one of drift, halt, circuit, spend, paused."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)
