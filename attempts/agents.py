"""The agents Boltz runs inside a sandbox, each turned into a plan: files to copy in, a command."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import TaskInvalid
from .models import Agent, Attempt, Task
from .storage import read_stored

AGENT_DIR = "/tmp/boltz/agent"
BUILTIN_AGENTS = ("noop", "reference", "command")


@dataclass
class AgentPlan:
    """`files` are written under AGENT_DIR (name -> bytes); `command` runs in /workspace."""

    description: str
    command: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)


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


def validate_agent(task: Task, agent: str, command: str = "") -> None:
    if agent not in BUILTIN_AGENTS:
        raise TaskInvalid(
            "agent", f"{agent!r} is not an agent; choose one of {', '.join(BUILTIN_AGENTS)}"
        )
    if agent == "reference" and not (task.reference_patch.strip() or task.reference_script.strip()):
        raise TaskInvalid("agent", f"task {task.slug} has no reference patch to apply")
    if agent == "command" and not command.strip():
        raise TaskInvalid("command", "the command agent needs a command to run")
    if agent != "command" and command.strip():
        raise TaskInvalid("command", f"the {agent} agent takes no command")


def plan_for(attempt: Attempt) -> AgentPlan:
    task = attempt.task
    if attempt.agent == "noop":
        return AgentPlan("noop: does nothing")
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
