"""Plans are frozen manifests: ``execute`` runs only a plan that ``plan`` wrote, where it wrote it.

The identity alone cannot tell a reviewed plan from an edited one: whoever edits
``launch-plan.json`` can compute its new identity, and an operator pasting it runs the edit.
So ``execute`` re-derives what the plan claims from its own content and from the inputs it
names (their checksums were re-checked just before), and refuses any difference:

- the plan sits in the run root it was written into (a copy elsewhere would re-run every cell
  under the same run id, labels and metrics target);
- arms, accounts, limits and backends are what the suite and accounts files say;
- every task is what its directory says, and every task and agent directory is a checked input;
- every cell id is recomputed from the task's checksum, the arm's config and the repetition;
- the cell set is every task x arm x repetition the plan states (one repetition count, or the
  selection's per task; a rerun's cells are its selection's), in the order `plan` sorts them,
  the preflight is the one `plan` picks from those cells, "paired" is what the arms and the
  selection make it, and the warnings that follow from the plan's content are there;
- the receipt the operator reviewed states every fact of this plan: rendered by this version and
  matched line by line before the first session; a resume matches the receipt's digest that the
  first session recorded instead (a newer version renders lines an earlier one did not write,
  and the run already started on that check), see :func:`_receipt`.

A resume (the run root's ledger holds a ``run_started`` of this very identity) skips the
re-derivation of tasks, cell ids and cell set, and keeps every other check. The argument: a
session writes ``run_started`` only after :func:`verify_plan` passed in full, and the identity is
the hash of the plan's canonical content (``load_plan_file`` computes it from the bytes it just
read and refuses any other form), so the plan in hand is byte for byte the one that was
re-derived then; the inputs it names are the ones re-derived from, since the drift check has
just re-hashed each against the checksum the plan records (:func:`verify_plan` checks drift
first). Deriving again could only find what this version derives differently: an upgrade that
changes ``plan_task`` or ``derived_warnings`` would refuse every run it met half-way, as the
receipt's lines did (:func:`_receipt`). A plan edited since has another identity, which no
``run_started`` of this ledger names (its meta binds it to the identity it was created for):
it gets the whole check. The ledger is trusted here exactly as far as the resume's receipt
check already trusts it; whoever can write it can also write its recorded receipt digest. At
100,000 cells the skipped steps are ~4 s of CPU (docs/performance.md, issue 57).

A refusal never shows an identity to paste: it names the receipt to review and the `plan`
command that makes a new plan.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ray_bench.commands.receipt import render_receipt
from ray_bench.config.bounded import load_state_json
from ray_bench.config.loader import load_accounts, load_suite
from ray_bench.config.selection import SelectionEntry, load_selection, resolve_selection
from ray_bench.config.tasks import TaskTree, index_tasks, load_task
from ray_bench.errors import LedgerError, PlanError, UserInputError
from ray_bench.harbor.arms import HOW_TO_GET, interpreter_refusal
from ray_bench.ledger import Ledger
from ray_bench.ledger.events import RunStarted
from ray_bench.models.accounts import AccountsFile
from ray_bench.models.plan import InputFile, Plan
from ray_bench.models.suite import BackendConfig, Suite
from ray_bench.plan.arm_identity import arm_config
from ray_bench.plan.compile import (
    cell_order,
    derived_warnings,
    pick_preflight,
    plan_task,
    resolve_agent_dirs,
    suite_roots,
)
from ray_bench.plan.drift import refuse_drift
from ray_bench.plan.identity import canonical_bytes, cell_id
from ray_bench.runroot import RunPaths


def replan_command(plan: Plan) -> str:
    """The `plan` command that makes a new plan from this plan's inputs."""
    named = {i.kind: i.path for i in plan.inputs if i.kind in ("suite", "accounts", "selection")}
    parts = ["ray-bench plan", f"--suite {named.get('suite', 'SUITE')}",
             f"--accounts {named.get('accounts', 'ACCOUNTS')}"]
    if "selection" in named:
        parts.append(f"--selection-file {named['selection']}")
    parts.append("--run-id NEW_RUN_ID")
    return " ".join(parts)


def refusal(plan: Plan, plan_path: Path, what: str) -> PlanError:
    receipt = RunPaths(plan_path.resolve().parent).receipt
    return PlanError(f"not the plan `ray-bench plan` wrote: {what}", where=str(plan_path),
                     fix=f"review {receipt} and make a new plan: {replan_command(plan)}")


def verify_plan(plan: Plan, identity: str, plan_path: Path, *, receipt: bool = True) -> str:
    """Refuse (PlanError) a plan whose inputs changed since planning (drift, one line each), or
    that differs from what ``plan`` derives from its inputs; return the digest of the receipt
    checked (the session records it for its resumes). With ``receipt=False`` the receipt is left
    to :func:`verify_receipt` (and "" returned): ``execute`` checks it while Ray starts.
    The drift check walks and hashes each task directory; the re-derivation reads the tasks from
    those walks (each directory walked and read once). A file changed between the two is met by
    the driver's drift guard before any attempt (its stat signature is the walk's)."""
    trees = refuse_drift(plan.inputs)
    elsewhere = _bound_to_root(plan, plan_path)
    if elsewhere is not None:
        raise PlanError(elsewhere, where=str(plan_path),
                        fix=f"execute {RunPaths(Path(plan.run_root or '?')).plan} where it is, or make "
                            f"a new plan: {replan_command(plan)}")
    _refuse_harbor_here(plan, plan_path)
    problem = _inputs_cover(plan)
    if problem is None and _sessions(plan_path.resolve().parent, identity) is None:  # a resume: see above
        suite_path = Path(_input(plan, "suite").path)
        try:
            suite = load_suite(suite_path)
            accounts = load_accounts(Path(_input(plan, "accounts").path))
        except UserInputError as exc:
            raise refusal(plan, plan_path, f"its inputs no longer load ({exc.line()[:200]})") from None
        problem = (_rederive(plan, suite, suite_path, accounts, trees) or _cells(plan, suite.backend)
                   or _cell_set(plan, suite, suite_path))
    digest = ""
    if problem is None and receipt:
        problem, digest = _receipt(plan, identity, plan_path)
    if problem is not None:
        raise refusal(plan, plan_path, problem)
    return digest


def verify_receipt(plan: Plan, identity: str, plan_path: Path) -> str:
    """Refuse (PlanError) a plan whose receipt does not state it: the last check of
    :func:`verify_plan`, for a plan that passed the others; return the receipt's digest."""
    problem, digest = _receipt(plan, identity, plan_path)
    if problem is not None:
        raise refusal(plan, plan_path, problem)
    return digest


def _refuse_harbor_here(plan: Plan, plan_path: Path) -> None:
    """A plan with a Harbor arm, executed by an interpreter that cannot run Harbor (planned in
    .venv-harbor, executed from the 3.11 venv): say so, before the receipt check would call the
    plan edited (its Harbor table cannot be rendered here) or a runner would fail on import."""
    harbor = [a.name for a in plan.arms if a.agent == "harbor"]
    if not harbor:
        return
    why = interpreter_refusal()
    if why is not None:
        raise PlanError(f"arms.{harbor[0]}: agent harbor {why}", where=str(plan_path),
                        fix=HOW_TO_GET.replace("plan with", "execute with"))


def _bound_to_root(plan: Plan, plan_path: Path) -> str | None:
    here = str(plan_path.resolve().parent)
    if plan.run_root != here:
        return (f"this plan belongs to run root {plan.run_root or '(none)'}, not {here}: a copy would "
                "re-run every cell under the same run id, labels and metrics target")
    if Path(here).name != plan.run_id:
        return f"this plan's run id {plan.run_id!r} is not its run root's name"
    return None


def _inputs_cover(plan: Plan) -> str | None:
    kinds = {i.kind for i in plan.inputs}
    if not {"suite", "accounts"} <= kinds:
        return "it names no suite or accounts file"
    tasks = {i.name: i for i in plan.inputs if i.kind == "task"}
    for task in plan.tasks:
        item = tasks.get(task.id)
        if item is None or item.path != task.path or item.sha256 != task.checksum:
            return f"task {task.id} is not a checked input"
    agents = {i.name: i for i in plan.inputs if i.kind == "agent"}
    for arm in plan.arms:
        if arm.agent_dir is not None and (arm.name not in agents or agents[arm.name].path != arm.agent_dir):
            return f"arm {arm.name}'s agent directory is not a checked input"
    return None


def _input(plan: Plan, kind: str) -> InputFile:
    return next(i for i in plan.inputs if i.kind == kind)


def _rederive(plan: Plan, suite: Suite, suite_path: Path, accounts: AccountsFile,
              trees: dict[str, TaskTree] | None = None) -> str | None:
    """The first problem found, or None; ``trees``: the task trees the drift check walked."""
    walked = trees or {}
    errors: list[UserInputError] = []
    resolved, _ = resolve_agent_dirs(list(suite.arms), suite_path, errors)
    if errors:
        return "an arm's agent directory is gone"
    by_name = {a.name: a for a in resolved}
    names = [a.name for a in plan.arms]
    for arm in plan.arms:
        if by_name.get(arm.name) != arm:
            return f"arm {arm.name} is not the suite's arm of that name"
    if names != [a.name for a in resolved if a.name in names]:
        return "its arms are not in the suite's order"
    allowed = ([a.name for a in resolved], [suite.baseline.name],
               [a.name for a in resolved if a.role == "variant"])
    if names not in allowed:
        return "its arms are not the suite's arms, its baseline or its variants"
    if names != allowed[0] and not plan.unpaired:
        return "it runs a subset of the arms but says it is paired"
    if plan.accounts != accounts.accounts:
        return "its accounts are not the accounts file's"
    backends = dict(suite.backends)
    backends.setdefault(suite.backend, BackendConfig())
    expected = {"suite": suite.name, "max_attempts": suite.max_attempts, "artifact_cap_mb": suite.artifact_cap_mb,
                "spend_limit_usd": suite.spend_limit_usd, "host_reserve_mb": suite.host_reserve_mb,
                "host_reserve_disk_mb": suite.host_reserve_disk_mb, "backends": backends}
    for name, value in expected.items():
        if getattr(plan, name) != value:
            return f"its {name} is not the suite's"
    if suite.force_build and not plan.force_build:
        return "its force_build is not the suite's"
    try:
        index = index_tasks(suite_roots(suite, suite_path))
    except UserInputError:
        return "the suite's task roots no longer index"
    for task in plan.tasks:
        known = index.get(task.id)
        if known is None or known.resolve() != Path(task.path) or Path(task.path).name != task.id:
            return f"task {task.id} is not under the suite's task roots"
        if suite.tasks is not None and task.id not in suite.tasks:
            return f"task {task.id} is not one of the suite's tasks"
        try:
            derived = plan_task(load_task(Path(task.path), tree=walked.get(task.path)), suite, {},
                                force_build=plan.force_build)
        except UserInputError:
            return f"task {task.id} no longer loads"
        if derived.model_copy(update={"expected_sec": task.expected_sec, "expected_usd": task.expected_usd}) != task:
            return f"task {task.id} is not what its directory says"
    cap = plan.capacity
    if cap.accounts_concurrency != sum(a.limits.max_concurrent for a in accounts.accounts
                                       if a.name not in cap.left_out):
        return "its capacity is not the accounts' concurrency"
    bound = min([cap.accounts_concurrency, *cap.backend_pools.values()]
                + ([cap.parallel_cap] if cap.parallel_cap is not None else []))
    if cap.effective != bound:
        return "its effective parallelism is not the minimum of its limits"
    for name, pool in cap.backend_pools.items():
        configured = backends.get(name, BackendConfig()).max_sandboxes
        if configured is not None and pool > configured:
            return f"its {name} pool is above the suite's max_sandboxes"
    return None


def _cells(plan: Plan, backend: str) -> str | None:
    tasks = {t.id: t for t in plan.tasks}
    agents = {i.name: i.sha256 for i in plan.inputs if i.kind == "agent"}
    configs = {a.name: canonical_bytes(arm_config(a, agents.get(a.name))) for a in plan.arms}
    seen: set[str] = set()
    for cell in plan.cells:
        task = tasks.get(cell.task)
        if task is None or cell.arm not in configs or cell.rep < 1:
            return f"cell {cell.id[:12]} names a task, arm or repetition the plan does not have"
        if cell.id != cell_id(task.id, task.checksum, configs[cell.arm], cell.rep):
            return f"cell {cell.id[:12]} ({cell.task}, {cell.arm}, rep {cell.rep}) has another id than its content"
        if cell.backend != backend:
            return f"cell {cell.id[:12]} runs on {cell.backend}, not the suite's backend"
        if cell.id in seen:
            return f"cell {cell.id[:12]} appears twice"
        seen.add(cell.id)
    if not plan.cells or not set(plan.preflight) <= seen:
        return "its preflight names cells it does not have"
    return None


#: A rerun's selection file is big enough for every cell of a large run.
_SELECTION_LIMIT = 16 << 20


def _cell_set(plan: Plan, suite: Suite, suite_path: Path) -> str | None:
    """The cells are the plan's tasks x arms x repetitions, sorted and with the preflight as
    ``plan`` makes them: dropping cells or emptying the preflight shows here, receipt or not."""
    entries: dict[str, SelectionEntry] = {}
    chosen: set[tuple[str, str, int]] | None = None
    picked = next((i for i in plan.inputs if i.kind == "selection"), None)
    if picked is not None:
        try:
            roots = suite_roots(suite, suite_path)
            selection = resolve_selection(load_selection(Path(picked.path)), roots, index_tasks(roots))
        except (UserInputError, OSError):
            return "its selection file no longer loads"
        try:
            doc = load_state_json(Path(picked.path), _SELECTION_LIMIT)
        except (OSError, ValueError):  # not JSON (a YAML, text or TOML selection): not a rerun's
            doc = None
        entries = {e.task_id: e for e in selection.entries}
        if tuple(plan.tops_up) != selection.tops_up:
            return "the runs it says it tops up are not its selection's"
        if isinstance(doc, dict) and str(doc.get("generated_by", "")).startswith("ray-bench rerun"):
            chosen = {(str(t), str(a), int(r)) for t, a, r in doc.get("cells") or []}
    elif plan.tops_up:
        return "it says it tops up runs but has no selection naming them"
    arms = [a.name for a in plan.arms]
    # Repetitions no selection entry names: one count for every task (--reps or the suite's).
    free = [c.rep for c in plan.cells if not (c.task in entries and entries[c.task].reps)]
    count = max(free, default=suite.reps)
    expected: set[tuple[str, str, int]] = set()
    lopsided = False
    for task in plan.tasks:
        entry = entries.get(task.id)
        reps = entry.reps if entry is not None and entry.reps else range(1, count + 1)
        kept = [a for a in arms if entry is None or not entry.arms or a in entry.arms]
        lopsided |= kept != arms
        expected |= {(task.id, a, r) for r in reps for a in kept}
    if chosen is not None:
        expected &= chosen
    have = {(c.task, c.arm, c.rep) for c in plan.cells}
    if have != expected:
        gone = sorted(expected - have)
        if gone:
            name, arm, rep = gone[0]
            return (f"it leaves out {len(gone)} of the cells it states (first: task {name}, arm {arm}, "
                    f"rep {rep})")
        name, arm, rep = sorted(have - expected)[0]
        return f"it has cells its tasks, arms and repetitions do not make (task {name}, arm {arm}, rep {rep})"
    if plan.cells != cell_order(plan.cells, plan.tasks, plan.arms):
        return "its cells are not in the order `plan` sorts them"
    if plan.preflight != pick_preflight(plan.cells, suite.preflight_cells, len(plan.arms)):
        return f"its preflight is not the first {suite.preflight_cells} pairs `plan` picks"
    # `plan` pairs by the arms and, but for a rerun (cells chosen one by one), by the selection.
    if plan.unpaired != (len(arms) != len(suite.arms) or (lopsided and chosen is None)):
        return f"it says paired: {'no' if plan.unpaired else 'yes'}, its arms and selection say otherwise"
    dropped = [w for w in derived_warnings(plan.capacity, len(plan.arms), plan.accounts, plan.spend_limit_usd)
               if w not in plan.warnings]
    if dropped:
        return f"its warnings leave out one its content makes ({dropped[0][:80]})"
    return None


def _receipt(plan: Plan, identity: str, plan_path: Path) -> tuple[str | None, str]:
    """(the problem, the receipt's ``sha256:`` digest). Before the first session of this plan:
    every line of the receipt this version renders is in the receipt on disk, in order (a rerun's
    receipt adds a section; nothing may be missing or different). A resume (the ledger holds this
    identity and a ``run_started`` of it, written after that check passed): the receipt on disk is
    byte for byte the one the first session recorded, and it states this identity. It is not
    rendered again: a newer version renders lines the receipt of an earlier one lacks (each
    upgrade refused every run it met half-way), and the run started on the check of its time."""
    root = plan_path.resolve().parent
    path = RunPaths(root).receipt
    try:
        data = path.read_bytes()
        on_disk = data.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return f"its receipt {path} is missing or unreadable", ""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    started = _sessions(root, identity)
    if started is not None:
        recorded = next((s.receipt for s in started if s.receipt is not None), None)
        if recorded is not None and recorded != digest:
            return "its receipt is not the one its run started with (the receipt was edited)", digest
        if f"- plan identity: `{identity}`" not in on_disk:
            return "its receipt does not state this plan's identity (the plan or the receipt was edited)", digest
        return None, digest
    lines = iter(on_disk)
    for line in render_receipt(plan, identity).splitlines():
        if not any(line == other for other in lines):
            return "its receipt does not state what the plan holds (the plan or the receipt was edited)", digest
    return None, digest


def _sessions(run_root: Path, identity: str) -> list[RunStarted] | None:
    """The ``run_started`` records of plan ``identity`` in the run root's ledger, oldest first;
    None when no session of it started (no ledger, another plan's, or none readable)."""
    if not RunPaths(run_root).ledger.is_file():
        return None
    try:
        with Ledger.reading(run_root) as ledger:
            if ledger.meta().get("plan_identity") != identity:
                return None
            started = [e.event for e in ledger.events(RunStarted)]
    except LedgerError:  # a damaged ledger: the whole check, as before any session
        return None
    sessions = [s for s in started if isinstance(s, RunStarted) and s.identity in ("", identity)]
    return sessions or None
