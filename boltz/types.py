"""Typed values of the API: the results of sandboxes, tasks and attempts, and of RL pools the
action you send, the observation and step result you get back and the pool's own state. Plain
dataclasses built from (and an action sent as) the API's JSON; each is declared here once.

Unknown keys are ignored (the server may add fields) and kept in `raw`; missing keys take the
field's default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "Action",
    "Attempt",
    "CheckResult",
    "CommandOutput",
    "Diff",
    "DiffFile",
    "EnvInfo",
    "ExecResult",
    "FileInfo",
    "GroupStats",
    "Observation",
    "PoolInfo",
    "SandboxInfo",
    "StepResult",
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
class CommandOutput:
    """What a command run in a sandbox gave: the fields an `ExecResult` and a pool step's
    `Observation` share. `stdout` / `stderr` are text (head and tail when long; see
    `truncated`); `stdout_bytes` / `stderr_bytes` count the whole streams."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    timed_out: bool = False
    duration: float | None = None


@dataclass
class ExecResult(CommandOutput):
    """The result of one command (see `CommandOutput`).

    `stdout_raw` / `stderr_raw` are URLs of the full raw bytes. `ok` is true when the command
    exited 0 and did not time out.
    """

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
    """One changed file: `status` (added, modified, deleted, renamed, mode), line counts,
    whether it is binary, git's modes of each side (100755: executable, 120000: a symbolic
    link; "" where that side does not exist) and a rename's similarity in percent."""

    path: str = ""
    status: str = ""
    added: int = 0
    removed: int = 0
    old_path: str = ""
    binary: bool = False
    old_mode: str = ""
    new_mode: str = ""
    similarity: int | None = None
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


# RL pools (docs/POOLS.md)


@dataclass(frozen=True)
class Action:
    """What one environment does in one step. Its parts run in this order: `write` files
    (path -> text, relative paths inside the task's working folder), apply `patch` (a unified
    diff, with `git apply`), `run` a command (a shell string or an argv list, at most `timeout`
    seconds), then `submit` (run the task's check: its score is the reward and the episode
    terminates). A write that is refused or a patch that does not apply stops the action there;
    that, a non-zero exit and a timeout are ordinary observations."""

    run: str | Sequence[str] | None = None
    write: Mapping[str, str] | None = None
    patch: str | None = None
    submit: bool = False
    timeout: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.write is not None:
            body["write"] = dict(self.write)
        if self.patch is not None:
            body["patch"] = self.patch
        if self.run is not None:
            body["run"] = self.run if isinstance(self.run, str) else list(self.run)
        if self.timeout is not None:
            body["timeout"] = self.timeout
        if self.submit:
            body["submit"] = True
        return body


def action_json(action: Any) -> dict[str, Any] | None:
    """An action as the API takes it: an `Action`, a shell command (str: run it), a plain
    dict, or None (the environment sits this step out)."""
    if action is None:
        return None
    if isinstance(action, Action):
        return action.to_json()
    if isinstance(action, str):
        return {"run": action}
    if isinstance(action, Mapping):
        return dict(action)
    raise TypeError(f"an action is an Action, a command string, a dict or None, not {action!r}")


@dataclass
class _ActionParts:
    """What a reset, and the parts of an action before its command, show (see `Observation`)."""

    index: int = 0
    task: str = ""
    instruction: str = ""
    cwd: str = ""
    written: list[str] = field(default_factory=list)
    write_error: str = ""
    patch_applied: bool | None = None
    patch_output: str = ""


# A dataclass takes its bases' fields from the last base to the first: these two in this order
# keep an Observation's fields in the order they have always had.
@dataclass
class Observation(CommandOutput, _ActionParts):
    """What an environment shows after a reset or a step.

    After a reset: `task`, `instruction`, `cwd`. After a step: what each part of the action
    did: `written` (paths) or `write_error`; `patch_applied` and `patch_output`; the command's
    `exit_code`, `stdout`, `stderr` (head and tail when long: `truncated`; byte counts of the
    whole streams), `timed_out`, `duration`; `check` after a submit; `error` when the step
    could not be taken. `text` renders it for a text policy."""

    check: CheckResult | None = None
    error: str = ""
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any, *, index: int = 0) -> Observation:
        data = dict(data) if isinstance(data, dict) else {}
        patch = data.get("patch") if isinstance(data.get("patch"), dict) else {}
        values = {
            **data,
            "index": index,
            "patch_applied": patch.get("applied"),
            "patch_output": patch.get("output", ""),
        }
        values.pop("patch", None)
        observation = _build(cls, values, check=CheckResult.from_json)
        observation.raw = data
        return observation

    @property
    def text(self) -> str:
        """The observation as one text, the way a text policy reads it."""
        if self.instruction:
            return self.instruction
        parts = []
        if self.error:
            parts.append(f"error: {self.error}")
        if self.written:
            parts.append("wrote " + ", ".join(self.written))
        if self.write_error:
            parts.append(f"write refused: {self.write_error}")
        if self.patch_applied is not None:
            state = "applied" if self.patch_applied else "did not apply"
            parts.append(
                f"patch {state}" + (f":\n{self.patch_output}" if self.patch_output else "")
            )
        if self.exit_code is not None or self.timed_out:
            out = self.stdout
            if self.stderr:
                out += ("\n" if out and not out.endswith("\n") else "") + self.stderr
            status = "timed out" if self.timed_out else f"exit code {self.exit_code}"
            parts.append(out + ("\n" if out and not out.endswith("\n") else "") + f"[{status}]")
        if self.check is not None:
            verdict = "passed" if self.check.passed else "failed"
            parts.append(f"check {verdict} (score {self.check.score}): {self.check.summary}")
        return "\n".join(parts)


class StepResult(NamedTuple):
    """One environment's result of a step, as Gymnasium has it: unpack it as
    `observation, reward, terminated, truncated, info = result`.

    `reward` is the check's score after a submit, 0.0 after any other step, and None when the
    step has no sample: `info["masked"]` is then true and `info["failure_kind"]` says why
    (`infrastructure`, `host_lost`, `timeout`, `capacity`, `internal`; or `refused` / `skipped`
    when no step was taken). `info` also carries `index`, `step` (the episode's step number),
    `episode` (the attempt id) and `url` (its page)."""

    observation: Observation
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def index(self) -> int:
        return self.info.get("index", 0)

    @property
    def masked(self) -> bool:
        return bool(self.info.get("masked"))

    @classmethod
    def from_json(cls, data: Any) -> StepResult:
        data = data if isinstance(data, dict) else {}
        index = data.get("index", 0)
        info = dict(data.get("info") or {})
        info.setdefault("index", index)
        info.setdefault("step", data.get("step"))
        return cls(
            Observation.from_json(data.get("observation"), index=index),
            data.get("reward"),
            bool(data.get("terminated")),
            bool(data.get("truncated")),
            info,
        )


def reset_observation(data: Any) -> Observation:
    """A reset's answer for one environment: its observation, with the reset's info
    (`episode`, `url`, `queued_seconds`, and `masked` / `failure_kind` / `error` when it could
    not start) in `raw["info"]`."""
    data = data if isinstance(data, dict) else {}
    observation = Observation.from_json(data.get("observation"), index=data.get("index", 0))
    info = dict(data.get("info") or {})
    observation.raw = {**observation.raw, "info": info}
    if info.get("masked"):
        observation.error = info.get("error", "")
    return observation


@dataclass
class EnvInfo:
    """One environment of a pool: its latest episode (an attempt), its state (`new`, `starting`,
    `live`, `terminated`, `truncated`, `failed`, `reset`, `ended`), steps and reward."""

    index: int = 0
    task: str = ""
    episode: int | None = None
    state: str = ""
    steps: int = 0
    reward: float | None = None
    url: str = ""
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> EnvInfo:
        return _build(cls, data)


@dataclass
class GroupStats:
    """The environments of one task (a GRPO group): the rewards of their latest episodes (None
    for one not submitted), and the mean and spread (population standard deviation) of those
    given."""

    task: str = ""
    envs: list[int] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    n: int = 0
    mean: float | None = None
    std: float | None = None
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> GroupStats:
        return _build(cls, data)


@dataclass
class PoolInfo:
    """A pool: its environments and groups, the steps taken, the masked steps and the mean
    reward of the submits so far."""

    id: int = 0
    name: str = ""
    size: int = 0
    tasks: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    agent: str = ""
    max_steps: int = 0
    episode_seconds: float = 0.0
    closed_at: str | None = None
    steps: int = 0
    masked: int = 0
    rewards: int = 0
    mean_reward: float | None = None
    url: str = ""
    envs: list[EnvInfo] = field(default_factory=list)
    groups: list[GroupStats] = field(default_factory=list)
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> PoolInfo:
        return _build(cls, data, envs=_list_of(EnvInfo), groups=_list_of(GroupStats))
