"""Errors that decide how an attempt ends. Infrastructure errors are never the agent's fault."""

from __future__ import annotations

# A multi-step task through an API sandbox or a pool: they give one instruction and one check.
MULTI_STEP_ATTEMPTS_ONLY = (
    "{slug} is a multi-step task: its steps (each one's instruction, agent run and verifier, in "
    "order) run as an attempt (POST /api/attempts, run_attempts); a sandbox or a pool gives one "
    "instruction and one check"
)
NETWORK_TASKS_OFF = (
    "this installation runs no networked tasks: set BOLTZ_ALLOW_NETWORK_TASKS=1 on the "
    "workers to allow them"
)


class InfrastructureError(Exception):
    """Something outside the agent's control broke: the attempt is marked, not failed."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class DockerUnavailable(InfrastructureError):
    """The Docker daemon could not be reached (worth retrying later)."""


class SandboxGone(InfrastructureError):
    """The attempt's container disappeared or died under it."""


class DiskFull(Exception):
    """The sandbox's disk is at its limit, so Docker cannot write to it (an archive put in)
    or start its container again (it sets the disk quota at each start, in a write of its
    own): what the sandbox wrote did that, so it is the agent's failure, never an
    infrastructure error."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class PathUnreadable(Exception):
    """Docker could not read a path of a sandbox as a tree, or start the container again over
    its working folder (a link that loops, a file where a folder should be): what the
    sandbox's own user made there, so the agent's failure, never the infrastructure."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TaskInvalid(Exception):
    """A task definition that cannot be run; `field` names what to fix."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ImageBuildFailed(Exception):
    """A task's Dockerfile did not build: `tail` holds the build's last lines."""

    def __init__(self, reason: str, tail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.tail = tail


class AttemptGone(Exception):
    """The attempt was deleted while a worker still ran it: stop quietly and clean up."""


class AttemptStopped(Exception):
    """A reviewer ended the attempt (cancelled it or deleted its sandbox) while it ran."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
