"""The operations the web process asks of the worker that owns a live sandbox: one request type
and one answer type per operation, shared by both sides. The services build requests,
calls.py carries them over Redis in their wire form (JSON: `to_wire` / `from_wire`, bytes as
base64), and run/operations.py takes typed requests and gives typed answers. An operation
that cannot be done answers a refusal instead (errors.py), which crosses the same way.

Defaults and limits (an exec's timeout, ...) are decided once, in limits.py.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from attempts.dispatch.errors import InvalidRequest
from attempts.dispatch.limits import EXEC_TIMEOUT


class Message:
    """A request or an answer: a frozen dataclass whose wire form is a JSON object of its
    fields, bytes as base64 text."""

    def to_wire(self) -> dict[str, Any]:
        wire = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            wire[f.name] = base64.b64encode(value).decode() if isinstance(value, bytes) else value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]):
        binary = _binary_fields(cls)
        return cls(
            **{
                name: base64.b64decode(value) if name in binary and value is not None else value
                for name, value in wire.items()
            }
        )


@functools.cache
def _binary_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if hints[f.name] is bytes or bytes in typing.get_args(hints[f.name])
    )


class Request(Message):
    op: ClassVar[str]


class Answer(Message):
    pass


# --- exec ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExecRequest(Request):
    """A command: a string runs in /bin/sh, a list is argv. A relative `cwd` is in the task's
    working folder. `user`: a user name or uid of the image ("" for the task's agent user).
    `request_id` tags its timeline events, so a stream finds its output; `number` is an exec
    number already taken (else the next); `stream`: its output is written as it comes."""

    op = "exec"
    command: str | list[str]
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = EXEC_TIMEOUT
    stdin: bytes | None = None
    user: str = ""
    request_id: str = ""
    number: int | None = None
    stream: bool = False


@dataclass(frozen=True)
class ExecAnswer(Answer):
    """Each stream's head and tail (`truncated` when that is not all of it), its size and
    whether it is UTF-8; `raw` names the stored files of the whole output, by stream."""

    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_utf8: bool
    stderr_utf8: bool
    truncated: bool
    timed_out: bool
    duration: float
    raw: dict[str, str] = field(default_factory=dict)


# --- files ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadRequest(Request):
    """A file's bytes, at most `max_bytes` (and never more than BOLTZ_MAX_FILE_BYTES)."""

    op = "read"
    path: str
    max_bytes: int | None = None


@dataclass(frozen=True)
class ReadAnswer(Answer):
    data: bytes


@dataclass(frozen=True)
class WriteRequest(Request):
    """A file written whole (its folders made as needed), with permissions `mode`."""

    op = "write"
    path: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class WriteAnswer(Answer):
    path: str
    bytes: int


@dataclass(frozen=True)
class ListRequest(Request):
    op = "list"
    path: str


@dataclass(frozen=True)
class FileEntry:
    """One entry of a folder: `type` is file, dir, link or other; `mode` its octal bits."""

    name: str
    path: str
    type: str
    size: int
    mode: str


@dataclass(frozen=True)
class ListAnswer(Answer):
    entries: list[FileEntry]

    def to_wire(self) -> dict[str, Any]:
        return {"entries": [dataclasses.asdict(entry) for entry in self.entries]}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ListAnswer:
        return cls(entries=[FileEntry(**entry) for entry in wire["entries"]])


@dataclass(frozen=True)
class DeleteRequest(Request):
    """A file or a folder (with all it holds) removed."""

    op = "delete"
    path: str


@dataclass(frozen=True)
class DeleteAnswer(Answer):
    pass


@dataclass(frozen=True)
class DownloadRequest(Request):
    """A file or folder as a tar archive."""

    op = "download"
    path: str


@dataclass(frozen=True)
class DownloadAnswer(Answer):
    data: bytes


@dataclass(frozen=True)
class UploadRequest(Request):
    """A tar archive unpacked into the folder `path`."""

    op = "upload"
    path: str
    data: bytes


@dataclass(frozen=True)
class UploadAnswer(Answer):
    path: str
    files: int


# --- changes and check ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DiffRequest(Request):
    """The changes so far, read out of the live sandbox and recorded."""

    op = "diff"


@dataclass(frozen=True)
class DiffAnswer(Answer):
    patch: str
    truncated: bool
    bytes: int


@dataclass(frozen=True)
class CheckRequest(Request):
    """The task's check on a clean copy of the changes so far."""

    op = "check"


@dataclass(frozen=True)
class CheckAnswer(Answer):
    check: int  # the CheckResult's id


# --- a pool environment's step -------------------------------------------------------------------
STEP_PARTS = ("write", "patch", "run", "submit")


@dataclass(frozen=True)
class StepAction:
    """One action of a pool's environment; its parts run in this order: `write` (path: text),
    `patch` (a unified diff), `run` (a command, for `timeout` seconds), `submit` (the check).
    A part not given is None (submit: False)."""

    write: dict[str, str] | None = None
    patch: str | None = None
    run: str | list[str] | None = None
    timeout: float | None = None
    submit: bool = False

    def parts(self) -> list[str]:
        """The parts it has, in the order they run."""
        return [
            name
            for name in STEP_PARTS
            if (self.submit if name == "submit" else getattr(self, name) is not None)
        ]

    def to_wire(self) -> dict[str, Any]:
        """Only the parts given."""
        wire = {
            name: value
            for name, value in dataclasses.asdict(self).items()
            if value is not None and name != "submit"
        }
        if self.submit:
            wire["submit"] = True
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> StepAction:
        return cls(**wire)


@dataclass(frozen=True)
class StepRequest(Request):
    """One action on an environment's sandbox (`container`), whose step the web has taken:
    `step_number`, `exec_number` (for its command) and `seq` (the next free place on its
    timeline, after the step's mark). `task`: the task's session fields where its working
    folder or user is its own (a Harbor task's)."""

    op = "step"
    action: StepAction
    max_steps: int
    episode_deadline: float  # time.time() past which the episode is truncated
    container: str
    task: dict[str, Any] | None = None
    step_number: int = 0
    exec_number: int = 0
    seq: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {**super().to_wire(), "action": self.action.to_wire()}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> StepRequest:
        return cls(**{**wire, "action": StepAction.from_wire(wire["action"])})


@dataclass(frozen=True)
class StepAnswer(Answer):
    """What the step did (`observation`), its `reward`, whether the episode `terminated`
    (submitted) or was `truncated` (out of steps or time), and `info` about it."""

    step: int
    observation: dict[str, Any]
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]


# --- every operation -----------------------------------------------------------------------------
OPERATIONS: dict[type[Request], type[Answer]] = {
    ExecRequest: ExecAnswer,
    ReadRequest: ReadAnswer,
    WriteRequest: WriteAnswer,
    ListRequest: ListAnswer,
    DeleteRequest: DeleteAnswer,
    DownloadRequest: DownloadAnswer,
    UploadRequest: UploadAnswer,
    DiffRequest: DiffAnswer,
    CheckRequest: CheckAnswer,
    StepRequest: StepAnswer,
}
REQUESTS: dict[str, type[Request]] = {request.op: request for request in OPERATIONS}


def answer_type(request: Request) -> type[Answer]:
    return OPERATIONS[type(request)]


def request_from_wire(op: str, args: dict[str, Any]) -> Request:
    """The request a caller sent; InvalidRequest for an operation this side does not know."""
    request = REQUESTS.get(op)
    if request is None:
        raise InvalidRequest("", f"no operation {op!r}")
    return request.from_wire(args)
