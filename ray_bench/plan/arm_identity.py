"""An arm's identity: what it runs, not what it is called.

Earlier runs are matched by it wherever they are (the one-arm pairing guard, ``plan --history``
durations, lineage reports; ``gaps`` matches whole cell ids, which include it). Two arms of one
name with another agent, model, env, image, MCP servers, roles, timeouts, resources, watchdog or
agent directory content are different arms: their rows are never pooled.

The digest is ``sha256:`` of the canonical JSON of the arm's resolved config (the same config
that enters cell ids: :func:`arm_config`) without its ``name`` and ``role``: those say how a
plan shows and pairs the arm, not what runs. A renamed arm with the same config is the same arm.

It is derived from each run root's stored plan (``launch-plan.json``: its arms and its agent
directories' checksums), so ledgers written before the digest existed are matched the same way;
a run root without a readable plan has no arm identities, and its rows match nothing.
"""

from __future__ import annotations

from pathlib import Path

from ray_bench.errors import UserInputError
from ray_bench.models.plan import Plan
from ray_bench.models.suite import ARM_FIELDS_SINCE_ADAPTERS, Arm
from ray_bench.plan.identity import identity_of
from ray_bench.runroot import RunPaths

#: Fields that say how the arm is shown and paired, not what it runs.
DISPLAY_FIELDS = frozenset({"name", "role"})
#: Fields that say what is kept of an attempt, not what it runs: never in cell ids, so turning
#: ``keep_workspace`` on for a rerun or a top-up keeps the cells (and their rows) it had.
KEPT_FIELDS = frozenset({"keep_workspace"})


def arm_config(arm: Arm, agent_checksum: str | None) -> dict[str, object]:
    """The arm's resolved config, as it enters cell ids: the agent directory by its content,
    never by its path, and nothing of what is kept (:data:`KEPT_FIELDS`)."""
    config = arm.model_dump(mode="json", exclude={"agent_dir", *KEPT_FIELDS})
    for key, default in ARM_FIELDS_SINCE_ADAPTERS.items():
        if config.get(key) == default:
            config.pop(key, None)
    if agent_checksum is not None:
        config["agent_dir_sha256"] = agent_checksum
    return config


def arm_digest(arm: Arm, agent_checksum: str | None) -> str:
    """``sha256:...`` of what defines the arm (its config less :data:`DISPLAY_FIELDS`)."""
    config = {k: v for k, v in arm_config(arm, agent_checksum).items() if k not in DISPLAY_FIELDS}
    return identity_of(config)


def plan_arm_digests(plan: Plan) -> dict[str, str]:
    """Arm name -> digest, for the arms of a compiled plan."""
    agents = {i.name: i.sha256 for i in plan.inputs if i.kind == "agent"}
    return {arm.name: arm_digest(arm, agents.get(arm.name)) for arm in plan.arms}


def run_arm_digests(run_root: Path) -> dict[str, str]:
    """Arm name -> digest for the rows of one run root, from its stored plan ({} without one)."""
    from ray_bench.plan.store import load_plan_file

    if not RunPaths(run_root).plan.is_file():
        return {}
    try:
        plan, _ = load_plan_file(RunPaths(run_root).plan)
    except (UserInputError, OSError):  # unreadable or edited: its rows cannot be attributed
        return {}
    return plan_arm_digests(plan)


def refuse_mixed_arms(plans: list[tuple[str, Plan]], where: str) -> None:
    """Rows of one arm name under two configurations are never pooled: a lineage (or a run's
    family) whose plans (``(run id, plan)``, in order) give an arm two digests is refused."""
    seen: dict[str, dict[str, list[str]]] = {}  # arm -> digest -> run ids
    for run_id, plan in plans:
        for name, digest in plan_arm_digests(plan).items():
            seen.setdefault(name, {}).setdefault(digest, []).append(run_id)
    for name, digests in seen.items():
        if len(digests) > 1:
            ran = "; ".join(f"{short(d)} in {', '.join(runs)}" for d, runs in digests.items())
            raise UserInputError(
                f"arm {name} ran {len(digests)} configurations in these runs ({ran}): its rows cannot be pooled",
                where=where,
                fix="report the runs of each configuration apart, or plan the changed arm under a new name")


def short(digest: str) -> str:
    """A digest as a line shows it: ``sha256:1a2b3c4d``."""
    return digest[: len("sha256:") + 8]
