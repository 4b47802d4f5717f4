"""The agents Boltz runs inside a sandbox, each turned into a plan: files to copy in, a command."""

from __future__ import annotations

from dataclasses import dataclass, field

from attempts.core.errors import TaskInvalid
from attempts.core.storage import read_stored
from attempts.models import Agent, Attempt, Layout, Task

AGENT_DIR = "/tmp/boltz/agent"
BUILTIN_AGENTS = ("noop", "reference", "command", "patch")

# The patch agent applies a given patch (a SWE-bench prediction's model_patch, as the file
# PATCH_FILE) the way SWE-bench's harness does: `git apply --verbose`, then (if the image has
# it) `patch --batch --fuzz=5 -p1`. The harness's middle try, `git apply --verbose --reject`,
# succeeds exactly when the first one does and otherwise leaves a half-applied tree, so it is
# left out; the fuzzy try is made only when a dry run says it applies whole. A patch that does
# not apply leaves the base untouched and exits PATCH_NOT_APPLIED.
PATCH_FILE = "model.patch"
PATCH_SCRIPT_FILE = "apply_patch.sh"
PATCH_COMMAND = f"sh {AGENT_DIR}/{PATCH_SCRIPT_FILE}"
PATCH_NOT_APPLIED = 65
PATCH_SCRIPT = f"""# Boltz's patch agent: apply {PATCH_FILE} as SWE-bench's harness does.
p="$BOLTZ_AGENT_DIR/{PATCH_FILE}"
if git apply --verbose "$p"; then exit 0; fi
echo "git apply --verbose: the patch does not apply" >&2
if command -v patch >/dev/null 2>&1; then
  if patch --batch --fuzz=5 -p1 --forward --dry-run -i "$p" >/dev/null 2>&1; then
    patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i "$p" && exit 0
  fi
  echo "patch --batch --fuzz=5 -p1: the patch does not apply either" >&2
else
  echo "patch is not installed in this image: the harness's fuzzy try is skipped" >&2
fi
echo "patch did not apply" >&2
exit {PATCH_NOT_APPLIED}
"""


@dataclass
class AgentPlan:
    """`files` are written under AGENT_DIR (name -> bytes); `archive` (a tar) is put at /;
    `command` runs in the task's working folder as `user` (a user the task names; "" is the
    task's agent user), with `environment` added."""

    description: str
    command: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    archive: bytes = b""
    user: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    stage: str = "agent"  # "solution": the task's own reference solution


@dataclass
class AgentChoice:
    """What an attempt runs: a built-in agent, or a saved one resolved to its command."""

    label: str
    command: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)


def resolve_agent(
    task: Task, agent: str, command: str = "", files: dict[str, bytes] | None = None
) -> AgentChoice:
    """Check an agent choice and turn a saved agent's name into its command, files and env."""
    if agent == "patch":
        return AgentChoice(agent, PATCH_COMMAND, patch_files(command, files))
    if agent in BUILTIN_AGENTS:
        validate_agent(task, agent, command)
        return AgentChoice(agent, command, dict(files or {}))
    saved = Agent.objects.filter(name=agent).first()
    if saved is None:
        names = ", ".join([*BUILTIN_AGENTS, *Agent.objects.values_list("name", flat=True)])
        raise TaskInvalid("agent", f"{agent!r} is not an agent; choose one of {names}")
    if command.strip() or files:
        raise TaskInvalid("command", f"the saved agent {agent} brings its own command and files")
    stored = read_stored(saved.files)
    env = {str(k): str(v) for k, v in (saved.environment or {}).items()}
    return AgentChoice(saved.name, saved.command, stored, env)


def not_applied_reason(stderr: str) -> str:
    """Why a patch did not apply, from the patch agent's error output (git's own verdicts)."""
    errors = [  # git apply's own verdicts ("error: patch failed: calc.py:1"), not its context
        line.strip()
        for line in stderr.splitlines()
        if line.startswith("error:") and not line.rstrip().endswith(":")
    ]
    detail = "; ".join(errors[:2])[:300]
    return "patch did not apply" + (f" ({detail})" if detail else "")


def patch_files(command: str, files: dict[str, bytes] | None) -> dict[str, bytes]:
    """The patch agent's files, checked: exactly PATCH_FILE, not empty, and no command of its
    own (a re-run passes back PATCH_COMMAND)."""
    files = dict(files or {})
    if command.strip() and command != PATCH_COMMAND:
        raise TaskInvalid("command", "the patch agent takes no command")
    if set(files) != {PATCH_FILE} or not files[PATCH_FILE].strip():
        raise TaskInvalid("files", f"the patch agent needs one file, {PATCH_FILE}: the patch")
    return files


def validate_agent(task: Task, agent: str, command: str = "") -> None:
    if agent not in BUILTIN_AGENTS:
        raise TaskInvalid(
            "agent", f"{agent!r} is not an agent; choose one of {', '.join(BUILTIN_AGENTS)}"
        )
    if agent == "reference" and not task.has_reference:
        raise TaskInvalid("agent", f"task {task.slug} has no reference patch to apply")
    if agent == "patch":
        raise TaskInvalid("files", f"the patch agent needs the patch to apply ({PATCH_FILE})")
    if agent == "command" and not command.strip():
        raise TaskInvalid("command", "the command agent needs a command to run")
    if agent != "command" and command.strip():
        raise TaskInvalid("command", f"the {agent} agent takes no command")


def plan_for(attempt: Attempt, task=None) -> AgentPlan:
    """What the attempt's agent does: for `task` (the attempt's, or a multi-step task as one
    of its steps sees it)."""
    task = task or attempt.task
    # First: a patch attempt's agent label is the model's name, which may be any word.
    if attempt.agent_command == PATCH_COMMAND:
        files = read_stored(attempt.agent_files)
        if PATCH_FILE not in files:
            raise TaskInvalid("agent", f"the patch agent's {PATCH_FILE} is missing")
        return AgentPlan(
            f"patch: applies {PATCH_FILE} (git apply, then patch --fuzz=5, as SWE-bench does)",
            command=PATCH_COMMAND,
            files={**files, PATCH_SCRIPT_FILE: PATCH_SCRIPT.encode()},
        )
    if attempt.agent == "noop":
        return AgentPlan("noop: does nothing")
    if attempt.agent == "reference" and task.layout == Layout.HARBOR:
        from attempts.core import stage_env

        return AgentPlan(
            "reference: runs the task's solution (/solution/solve.sh), as Harbor's oracle does",
            command="bash /solution/solve.sh",
            archive=bytes(task.solution_files),
            user=task.solution_user or task.agent_user,
            environment=stage_env.resolve(task.stage_env, "solution"),
            stage="solution",
        )
    if (
        attempt.agent == "reference"
        and not task.reference_patch.strip()
        and task.reference_script.strip()
    ):
        return AgentPlan(
            "reference: runs the task's reference script",
            command=f"bash {AGENT_DIR}/solve.sh",
            files={"solve.sh": task.reference_script.encode()},
        )
    if attempt.agent == "reference":
        if not task.reference_patch.strip():
            raise TaskInvalid("agent", f"task {task.slug} has no reference patch to apply")
        return AgentPlan(
            "reference: applies the task's reference patch",
            command=f"git apply --whitespace=nowarn {AGENT_DIR}/reference.patch",
            files={"reference.patch": task.reference_patch.encode()},
        )
    if attempt.agent_command:  # the command agent, or a saved agent resolved to its command
        files = read_stored(attempt.agent_files)
        return AgentPlan(f"command: {attempt.agent_command}", attempt.agent_command, files)
    raise TaskInvalid("agent", f"{attempt.agent!r} is not an agent Boltz can run")
