"""Why something asked of the API, a sandbox or a pool cannot be done, in the domain's terms.

The services (web side) and the worker's operations raise these; they cross the operation-call
channel in their wire form (`to_wire` / `Refusal.from_wire`), and only the API
(attempts/api/errors.py) says them as HTTP statuses. Each class means one thing. `code` is the
word the API's error body carries (a class has one, an InvalidRequest may say more precisely
what is wrong), and `detail` says what went wrong and what to do.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Refusal(Exception):
    """Something asked that cannot be done; raise one of its kinds below."""

    code: ClassVar[str] = "refused"
    _kinds: ClassVar[dict[str, type[Refusal]]] = {}

    def __init__(self, detail: str, *, code: str = ""):
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Refusal._kinds[cls.__name__] = cls

    def __str__(self) -> str:
        return self.detail

    def to_wire(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, "code": self.code, "detail": self.detail}

    @staticmethod
    def from_wire(wire: dict[str, Any]) -> Refusal:
        """The refusal a worker answered; one of a kind this side does not know is a bug."""
        kind = Refusal._kinds.get(wire.get("kind", ""))
        if kind is None:
            return InternalError(wire.get("detail") or f"an unknown refusal: {wire!r}")
        return kind._rebuilt(wire)

    @classmethod
    def _rebuilt(cls, wire: dict[str, Any]) -> Refusal:
        return cls(wire["detail"], code=wire.get("code", ""))


class InvalidRequest(Refusal):
    """The request cannot be done as given: the caller's to fix. `field` names what to fix
    (where one does); `code` says more than "invalid" where a caller tells cases apart
    (`user_not_found`, `user_not_allowed`, `is_a_directory`, ...)."""

    code = "invalid"

    def __init__(self, field: str, message: str, *, code: str = ""):
        super().__init__(f"{field}: {message}" if field else message, code=code)
        self.field, self.message = field, message

    def to_wire(self) -> dict[str, Any]:
        return {**super().to_wire(), "field": self.field, "message": self.message}

    @classmethod
    def _rebuilt(cls, wire: dict[str, Any]) -> Refusal:
        return cls(wire["field"], wire["message"], code=wire.get("code", ""))


class NotFound(Refusal):
    """Nothing the caller may see goes by that name: a task, sandbox, attempt, pool, an
    environment of a pool, an evaluation."""

    code = "not_found"


class FileNotFound(NotFound):
    """A path that does not exist in the sandbox."""

    code = "file_not_found"


class FileAccessDenied(Refusal):
    """The sandbox's user may not do that to that path."""

    code = "permission_denied"


class TooLarge(Refusal):
    """A file, an archive or a request's body over BOLTZ_MAX_FILE_BYTES."""

    code = "too_large"


class WrongState(Refusal):
    """What was asked cannot be done in the state the thing is in: one of the kinds below."""

    code = "conflict"


class SandboxNotLive(WrongState):
    """The sandbox is starting, closing or closed (stopped and kept for review): not live."""

    code = "closed"


class PoolClosed(WrongState):
    """The pool is closed: it takes no step or reset."""

    code = "closed"


class ChangesUnreadable(WrongState):
    """The sandbox's changes could not be computed (run/changes.py says why)."""

    code = "changes_unavailable"


class TaskNotRunnable(WrongState):
    """The sandbox's task no longer fits its image (the user it names is not in it)."""

    code = "task_invalid"


class SandboxDiskFull(WrongState):
    """The sandbox's disk is at its limit: what it wrote keeps Docker from writing to it (or
    from starting it again). The agent's doing, never the infrastructure's."""

    code = "disk_full"


class NoCheck(WrongState):
    """A sandbox started from an image, without a task, has no check to run."""

    code = "no_check"


class SandboxDeleted(Refusal):
    """The sandbox was deleted: its record stays for review, nothing more can be done in it."""

    code = "gone"


class NoCapacity(Refusal):
    """Every host was full for as long as the caller was willing to wait: retry after
    `retry_after` seconds, or wait longer."""

    code = "capacity"

    def __init__(self, detail: str, *, retry_after: int, code: str = ""):
        super().__init__(detail, code=code)
        self.retry_after = retry_after

    def to_wire(self) -> dict[str, Any]:
        return {**super().to_wire(), "retry_after": self.retry_after}

    @classmethod
    def _rebuilt(cls, wire: dict[str, Any]) -> Refusal:
        return cls(wire["detail"], retry_after=wire["retry_after"], code=wire.get("code", ""))


class InfrastructureFault(Refusal):
    """Something outside the caller's control broke: Docker, a container that died, a sandbox
    that could not start, a host that went quiet. Never the agent's doing."""

    code = "infrastructure"


class WorkerUnreachable(Refusal):
    """The web could not reach the workers: the operation-call channel (Redis) is down."""

    code = "infrastructure"


class TimedOut(Refusal):
    """No answer came within the time given (an operation, a close, a wait)."""

    code = "timeout"


class InternalError(Refusal):
    """A bug in Boltz: an operation crashed, or a worker answered what this side cannot read."""

    code = "internal"
