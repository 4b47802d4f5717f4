"""The agents Boltz runs inside a sandbox, each turned into a plan: files to copy in, a command."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.files.storage import default_storage

from .errors import TaskInvalid
from .models import Attempt, Task

AGENT_DIR = "/tmp/boltz/agent"
BUILTIN_AGENTS = ("noop", "reference", "command")


@dataclass
class AgentPlan:
    """`files` are written under AGENT_DIR (name -> bytes); `command` runs in /workspace."""

    description: str
    command: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)


def validate_agent(task: Task, agent: str, command: str = "") -> None:
    if agent not in BUILTIN_AGENTS:
        raise TaskInvalid(
            "agent", f"{agent!r} is not an agent; choose one of {', '.join(BUILTIN_AGENTS)}"
        )
    if agent == "reference" and not task.reference_patch.strip():
        raise TaskInvalid("agent", f"task {task.slug} has no reference patch to apply")
    if agent == "command" and not command.strip():
        raise TaskInvalid("command", "the command agent needs a command to run")
    if agent != "command" and command.strip():
        raise TaskInvalid("command", f"the {agent} agent takes no command")


def plan_for(attempt: Attempt) -> AgentPlan:
    task = attempt.task
    if attempt.agent == "noop":
        return AgentPlan("noop: does nothing")
    if attempt.agent == "reference":
        if not task.reference_patch.strip():
            raise TaskInvalid("agent", f"task {task.slug} has no reference patch to apply")
        return AgentPlan(
            "reference: applies the task's reference patch",
            command=f"git apply --whitespace=nowarn {AGENT_DIR}/reference.patch",
            files={"reference.patch": task.reference_patch.encode()},
        )
    if attempt.agent == "command":
        files = {}
        for entry in attempt.agent_files:
            with default_storage.open(entry["storage"], "rb") as handle:
                files[entry["name"]] = handle.read()
        return AgentPlan(f"command: {attempt.agent_command}", attempt.agent_command, files)
    raise TaskInvalid("agent", f"{attempt.agent!r} is not an agent Boltz can run")
