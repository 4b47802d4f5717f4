"""Typed results: plain dataclasses built from the API's JSON.

Unknown keys are ignored (the server may add fields) and kept in `raw`; missing keys take the
field's default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "Attempt",
    "CheckResult",
    "Diff",
    "DiffFile",
    "ExecResult",
    "FileInfo",
    "SandboxInfo",
    "Task",
    "TestResult",
]

T = TypeVar("T")


def _build(cls: type[T], data: Any, **nested: Any) -> T:
    """An instance of the dataclass `cls` from a JSON object, keeping only the known keys."""
    if not isinstance(data, dict):
        data = {}
    names = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "raw"}
    values = {key: value for key, value in data.items() if key in names}
    for key, convert in nested.items():
        if key in values:
            values[key] = convert(values[key])
    return cls(**values, raw=dict(data))  # type: ignore[call-arg]


def _list_of(cls: type[T]):
    def convert(items: Any) -> list[T]:
        if not isinstance(items, list):
            return []
        return [cls.from_json(item) for item in items]  # type: ignore[attr-defined]

    return convert


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass
class TestResult:
    """One test's outcome (`passed`, `failed`, `error`, `skipped`, ...)."""

    __test__ = False  # not a pytest test class

    name: str = ""
    outcome: str = ""
    message: str = ""
    raw: dict[str, Any] = _raw()

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @classmethod
    def from_json(cls, data: Any) -> TestResult:
        return _build(cls, data)


@dataclass
class CheckResult:
    """The task's check run on a clean copy of the sandbox's changes."""

    id: int | None = None
    passed: bool = False
    score: float | None = None
    source: str = ""
    mode: str = ""
    summary: str = ""
    problem: str = ""
    verifier_error: bool = False
    reward: dict[str, Any] | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration: float | None = None
    output: str = ""
    tests: list[TestResult] = field(default_factory=list)
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> CheckResult:
        return _build(cls, data, tests=_list_of(TestResult))


@dataclass
class ExecResult:
    """The result of one command.

    `stdout` / `stderr` are text (head and tail when long; see `truncated`); `stdout_bytes` /
    `stderr_bytes` count the whole streams; `stdout_raw` / `stderr_raw` are URLs of the full raw
    bytes. `ok` is true when the command exited 0 and did not time out.
    """

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    timed_out: bool = False
    duration: float | None = None
    stdout_raw: str | None = None
    stderr_raw: str | None = None
    stdout_utf8: bool = True
    stderr_utf8: bool = True
    raw: dict[str, Any] = _raw()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout then stderr, as one text."""
        if self.stdout and self.stderr and not self.stdout.endswith("\n"):
            return f"{self.stdout}\n{self.stderr}"
        return self.stdout + self.stderr

    @classmethod
    def from_json(cls, data: Any) -> ExecResult:
        return _build(cls, data)


@dataclass
class FileInfo:
    """One entry of a folder listing. `type` is `file`, `dir`, `link` or `other`."""

    name: str = ""
    path: str = ""
    type: str = ""
    size: int | None = None
    mode: int | str | None = None
    raw: dict[str, Any] = _raw()

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, data: Any) -> FileInfo:
        return _build(cls, data)


@dataclass
class DiffFile:
    """One changed file: `status` (added, modified, deleted, renamed, ...) and line counts."""

    path: str = ""
    status: str = ""
    added: int = 0
    removed: int = 0
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> DiffFile:
        return _build(cls, data)


@dataclass
class Diff:
    """The sandbox's changes against the task's base: a git patch and the changed files."""

    patch: str = ""
    truncated: bool = False
    files: list[DiffFile] = field(default_factory=list)
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> Diff:
        return _build(cls, data, files=_list_of(DiffFile))


@dataclass
class SandboxInfo:
    """A sandbox as the server describes it. `state`: starting, live, closed or deleted.

    `check` holds the final check after `close(check=True)`.
    """

    id: int | None = None
    attempt: int | None = None
    task: str = ""
    number: int | None = None
    name: str = ""
    status: str = ""
    state: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    agent: str = ""
    host: str = ""
    cwd: str = "/workspace"
    created_at: str | None = None
    expires_at: str | None = None
    url: str = ""
    check: CheckResult | None = None
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> SandboxInfo:
        return _build(
            cls,
            data,
            labels=lambda value: dict(value) if isinstance(value, dict) else {},
            check=lambda value: CheckResult.from_json(value) if isinstance(value, dict) else None,
        )


@dataclass
class Task:
    """A task attempts and sandboxes start from."""

    slug: str = ""
    title: str = ""
    instruction: str = ""
    image: str = ""
    check_mode: str = ""
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> Task:
        return _build(cls, data)


#: Attempt statuses after which nothing more happens.
ENDED_STATUSES = frozenset({"finished", "cancelled"})


@dataclass
class Attempt:
    """One attempt at a task. `status` is where it is (queued ... finished, cancelled);
    `outcome` how it ended (passed, failed, agent timeout, infrastructure error)."""

    id: int | None = None
    task: str = ""
    number: int | None = None
    name: str = ""
    agent: str = ""
    status: str = ""
    outcome: str | None = None
    score: float | None = None
    failure_reason: str = ""
    tests: list[TestResult] = field(default_factory=list)
    url: str = ""
    raw: dict[str, Any] = _raw()

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES

    @classmethod
    def from_json(cls, data: Any) -> Attempt:
        return _build(cls, data, tests=_list_of(TestResult))
