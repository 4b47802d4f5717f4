"""An Inspect AI sandbox provider over Boltz sandboxes, and a scorer that runs the task's check.

With the SDK installed alongside Inspect, an Inspect task names Boltz as its sandbox; Inspect
finds the provider through its `inspect_ai` entry point (nothing to import by hand):

    from inspect_ai import Task, task
    from inspect_ai.dataset import Sample
    from boltz.inspect_ai import boltz_check

    @task
    def fix_add():
        return Task(
            dataset=[Sample(input="Fix add() in calc.py so the tests pass.")],
            solver=...,                       # your agent: bash(), basic_agent(), ...
            sandbox=("boltz", "fix-add"),     # a Boltz task; or BoltzSandbox(image="...")
            scorer=boltz_check(),             # the task's own check, as the score
        )

Every sample gets its own Boltz sandbox (an attempt, with its timeline, diff and checks for
review). The config is a task name, a YAML or JSON file of `BoltzSandbox`'s fields, or a
`BoltzSandbox` (task or image, labels, time to live, server and token); a sample's metadata
`boltz_task` overrides the task. The server and token
come from BOLTZ_URL and BOLTZ_TOKEN unless the config names them. Cleanup closes the sandbox
(stopped, kept for review); `inspect sandbox cleanup boltz` closes every sandbox an Inspect run
left open (`inspect sandbox cleanup boltz ID` one of them).

How Inspect's contract maps: `exec` runs argv in /workspace (the per-sample folder) as the
sandbox user, with `input` (text or bytes), `cwd`, `env` and `user` (any non-root user of the
image; `user="root"` raises `SandboxUserUnsupportedError`, as Boltz runs no command as root
unless the task allows it, as Harbor tasks whose image runs as root do). A `timeout` kills
the command's whole process group and raises `TimeoutError`. Output
over Inspect's limit (`INSPECT_SANDBOX_MAX_EXEC_OUTPUT_SIZE`, 10 MiB) raises
`OutputLimitExceededError` with the output's tail. `read_file` / `write_file` raise
`FileNotFoundError`, `IsADirectoryError`, `PermissionError`, `UnicodeDecodeError` and
`OutputLimitExceededError` (over `INSPECT_SANDBOX_MAX_READ_FILE_SIZE`) as Inspect specifies.
A sandbox whose container or host failed raises `SandboxUnavailableError`: an infrastructure
error, never the model's failure.

`inspect-ai` is an optional extra: `pip install 'boltz-sdk[inspect]'`.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path, PurePosixPath
from typing import Any, Literal, overload

try:
    import yaml
    from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
    from inspect_ai.solver import TaskState
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandbox,
        sandboxenv,
    )
    from pydantic import BaseModel, Field
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"boltz.inspect_ai needs Inspect AI ({exc}): pip install 'boltz-sdk[inspect]'"
    ) from exc

from boltz.aio import AsyncClient, AsyncSandbox
from boltz.errors import (
    BoltzError,
    BoltzFileNotFoundError,
    BoltzIsADirectoryError,
    BoltzPermissionError,
    ConnectionFailed,
    FileTooLarge,
    InfrastructureError,
    NotFound,
    OperationTimeout,
    SandboxClosed,
    SandboxGone,
)

log = logging.getLogger(__name__)

# A command with no timeout of Inspect's still ends: the server's longest (a day).
NO_TIMEOUT = 24 * 3600.0
LABEL = "inspect"  # every sandbox this provider starts carries inspect=1
TASK_METADATA = "boltz_task"


class BoltzSandbox(BaseModel, frozen=True):
    """Configuration of a Boltz sandbox for Inspect: `task` (a Boltz task's name) or `image`
    (an empty sandbox from an image, with no check)."""

    task: str | None = None
    image: str | None = None
    url: str | None = None
    token: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    agent: str = "inspect"
    ttl: float | None = None
    idle_timeout: float | None = None
    wait: float | None = None


def _config(config: SandboxEnvironmentConfigType | None, metadata: dict) -> BoltzSandbox:
    if config is None:
        config = BoltzSandbox()
    elif isinstance(config, str):
        config = _from_text(config)
    elif not isinstance(config, BoltzSandbox):
        config = BoltzSandbox.model_validate(config.model_dump())
    task = (metadata or {}).get(TASK_METADATA)
    if task:
        config = config.model_copy(update={"task": str(task), "image": None})
    if not config.task and not config.image:
        raise ValueError(
            "the boltz sandbox needs a task or an image: sandbox=('boltz', 'TASK'), "
            "BoltzSandbox(image='IMAGE'), or a sample's metadata boltz_task"
        )
    return config


def _from_text(config: str) -> BoltzSandbox:
    """A string config: a YAML or JSON file of BoltzSandbox's fields, or else a task's name.
    (Inspect makes a string config a path inside the task's folder: its last part is the
    name, as Boltz task names hold no "/".)"""
    path = Path(config)
    if path.is_file():
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(values, dict):
            raise ValueError(f"{path}: give the boltz sandbox's fields (task or image, ...)")
        return BoltzSandbox.model_validate(values)
    return BoltzSandbox(task=PurePosixPath(config).name or config)


def _unavailable(exc: BoltzError) -> SandboxUnavailableError:
    return SandboxUnavailableError(f"the Boltz sandbox cannot run it: {exc}")


_UNAVAILABLE = (SandboxClosed, SandboxGone, InfrastructureError, ConnectionFailed)


@sandboxenv(name="boltz")
class BoltzSandboxEnvironment(SandboxEnvironment):
    """One Boltz sandbox as an Inspect sandbox environment (`self.sandbox`: the SDK's)."""

    _open: dict[int, BoltzSandboxEnvironment] = {}  # this process's sandboxes not yet closed

    def __init__(self, client: AsyncClient, sandbox: AsyncSandbox) -> None:
        super().__init__()
        self.client = client
        self.sandbox = sandbox

    @property
    def url(self) -> str:
        """The attempt's page: its timeline, diff and checks."""
        return self.sandbox.url

    # --- lifecycle -------------------------------------------------------------------------
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return BoltzSandbox(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        wanted = _config(config, metadata)
        client = AsyncClient(wanted.url, wanted.token)
        labels = {**wanted.labels, LABEL: "1", "inspect_task": task_name[:300]}
        try:
            started = await client.sandbox(
                wanted.task,
                image=wanted.image,
                labels=labels,
                agent=wanted.agent,
                ttl=wanted.ttl,
                idle_timeout=wanted.idle_timeout,
                wait=wanted.wait,
            )
        except NotFound as exc:
            await client.close()
            raise ValueError(f"the Boltz sandbox could not start: {exc.detail}") from exc
        except BaseException:
            await client.close()
            raise
        env = cls(client, started)
        cls._open[started.id] = env
        return {"default": env}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for env in environments.values():
            if isinstance(env, BoltzSandboxEnvironment):
                await env._close()

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        if cleanup:
            for env in list(cls._open.values()):
                await env._close()

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """Close the sandboxes Inspect runs left open (all of them, or the one with `id`),
        for the token in BOLTZ_TOKEN; they stay for review."""
        async with AsyncClient() as client:
            if id:
                found = [await client.get_sandbox(int(id))]
            else:
                found = await client.sandboxes(labels={LABEL: "1"})
            for open_sandbox in found:
                if open_sandbox.state not in ("starting", "live"):
                    continue
                await open_sandbox.close()
                print(f"closed Boltz sandbox {open_sandbox.id} ({open_sandbox.url})")

    async def _close(self) -> None:
        if self._open.pop(self.sandbox.id, None) is None:
            return
        try:
            await self.sandbox.close()
        except (SandboxGone, SandboxClosed):
            pass
        except BoltzError as exc:
            log.warning("could not close Boltz sandbox %s: %s", self.sandbox.id, exc)
        finally:
            await self.client.close()

    # --- commands --------------------------------------------------------------------------
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        try:
            result = await self.sandbox.exec(
                list(cmd),
                stdin=input,
                cwd=cwd,
                env=env,
                user=user,
                timeout=float(timeout) if timeout is not None else NO_TIMEOUT,
                max_output=limit,
            )
        except BoltzError as exc:
            if exc.code == "user_not_allowed":
                raise SandboxUserUnsupportedError(str(exc.detail)) from exc
            if exc.code == "user_not_found":  # as `docker exec --user` answers it
                return ExecResult(False, 126, "", f"{exc.detail}\n")
            if isinstance(exc, _UNAVAILABLE):
                raise _unavailable(exc) from exc
            if isinstance(exc, OperationTimeout):
                raise TimeoutError(f"Command timed out after {timeout} seconds") from exc
            raise
        if result.timed_out:
            error = TimeoutError(f"Command timed out after {timeout} seconds")
            error.truncated_output = result.stdout + result.stderr  # type: ignore[attr-defined]
            raise error
        if result.truncated:  # a stream over Inspect's limit
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=(result.stdout or result.stderr)[-limit:],
            )
        if result.exit_code == 126 and _cannot_execute(result.stderr, cmd):
            raise PermissionError(f"Permission denied executing command: {result.stderr}")
        code = -1 if result.exit_code is None else result.exit_code
        return ExecResult(code == 0, code, result.stdout, result.stderr)

    # --- files -----------------------------------------------------------------------------
    async def write_file(self, file: str, contents: str | bytes) -> None:
        try:
            await self.sandbox.files.write(file, contents, mode=None)
        except BaseException as exc:
            raise _file_error(exc, file) from exc

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        try:
            data = await self.sandbox.files.read(
                file, max_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
            )
        except FileTooLarge as exc:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
            ) from exc
        except BaseException as exc:
            raise _file_error(exc, file) from exc
        assert isinstance(data, bytes)
        return data.decode("utf-8") if text else data


def _file_error(exc: BaseException, file: str) -> BaseException:
    """Inspect's exception for a failed file operation (Python's own, with the file's name)."""
    if isinstance(exc, BoltzFileNotFoundError):
        return FileNotFoundError(errno.ENOENT, "No such file or directory", file)
    if isinstance(exc, BoltzIsADirectoryError):
        return IsADirectoryError(errno.EISDIR, "Is a directory", file)
    if isinstance(exc, BoltzPermissionError):
        return PermissionError(errno.EACCES, "Permission denied", file)
    if isinstance(exc, _UNAVAILABLE):
        return _unavailable(exc)
    if isinstance(exc, OperationTimeout):
        return TimeoutError(f"the file operation on {file} timed out")
    return exc


def _cannot_execute(stderr: str, cmd: list[str]) -> bool:
    """The one line the sandbox's launcher prints when it cannot run cmd[0] (not a program,
    or not executable): `timeout: failed to run command '...': Permission denied`."""
    lines = stderr.strip().splitlines()
    return (
        len(lines) == 1
        and "permission denied" in lines[0].lower()
        and bool(cmd)
        and cmd[0] in lines[0]
        and lines[0].startswith(("timeout: failed to run command", "/bin/sh: "))
    )


@scorer(metrics=[mean(), stderr()])
def boltz_check(sandbox_name: str | None = None) -> Scorer:
    """Run the Boltz task's check on the sample's sandbox (on a clean copy of its changes).

    The value is the check's score (1.0 or 0.0 when it gives none); the metadata holds
    `passed`, the per-test results (`tests`: name, outcome, message), `summary`, `check_id`
    and `attempt_url` (the attempt's page). A check that could not run for the
    infrastructure's sake raises: it is never a score of 0.
    """

    async def score(state: TaskState, target: Target) -> Score:
        env = sandbox(sandbox_name) if sandbox_name else sandbox()
        boltz = env.as_type(BoltzSandboxEnvironment)
        try:
            result = await boltz.sandbox.check()
        except _UNAVAILABLE as exc:
            raise _unavailable(exc) from exc
        value = result.score if result.score is not None else float(result.passed)
        return Score(
            value=value,
            answer="passed" if result.passed else "failed",
            explanation=result.summary or None,
            metadata={
                "passed": result.passed,
                "score": result.score,
                "summary": result.summary,
                "tests": [
                    {"name": t.name, "outcome": t.outcome, "message": t.message}
                    for t in result.tests
                ],
                "check_id": result.id,
                "attempt_url": boltz.url,
                "sandbox_id": boltz.sandbox.id,
            },
        )

    return score
