"""The calls of the SDK, each described once: the public method's signature and docstring, the
request it sends (method, path, body, how long the server may take), what the answer becomes
and which errors name a file.

Each call is an `operation` whose plan yields its steps (boltz._core) and returns the result.
`Client`, `Sandbox`, `Files` and `Pool` (boltz.client, boltz.pools) run the plans over
httpx.Client; `AsyncClient`, `AsyncSandbox`, `AsyncFiles` and `AsyncPool` (boltz.aio,
boltz.pools) over httpx.AsyncClient, as coroutines. The two sides add only their constructors,
context managers and what is truly theirs (a pool's concurrent steps). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from boltz._core import (
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_TIMEOUT,
    OPERATION,
    Asynchronous,
    Call,
    H,
    Local,
    OutputCallback,
    P,
    Plan,
    R,
    Settings,
    Sleep,
    Stream,
    attempt_ids,
    compact,
    download_target,
    in_order,
    note_close_failure,
    number,
    operation,
    seconds,
    segment,
    upload_target,
    write_local,
)
from boltz.archives import safe_extract, tar_directory
from boltz.errors import BoltzError, BoltzIsADirectoryError, SandboxClosed, SandboxGone
from boltz.evaluations import EvaluationReport, Waiting, evaluation_input
from boltz.types import (
    Attempt,
    CheckResult,
    Diff,
    ExecResult,
    FileInfo,
    Observation,
    PoolInfo,
    SandboxInfo,
    StepResult,
    Task,
    action_json,
    reset_observation,
)

__all__ = ["DEFAULT_RESET_WAIT", "ClientCalls", "FilesCalls", "PoolCalls", "SandboxCalls"]

Seconds = float | datetime.timedelta
TransportT = TypeVar("TransportT")  # what httpx takes as `transport=`
SandboxT = TypeVar("SandboxT")
PoolT = TypeVar("PoolT")

DEFAULT_RESET_WAIT = 60.0


def _list_of(parse: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    """A list answer's items, parsed; any other answer (not empty) is a BoltzError that says
    so, never a TypeError or an empty list that would pass for "none"."""

    def parsed(data: Any) -> list[Any]:
        if data is None:
            return []
        if not isinstance(data, list):
            raise BoltzError(
                f"the server answered a JSON {type(data).__name__} where a list was expected: "
                "is it a Boltz server of this SDK's version?"
            )
        return [parse(item) for item in data]

    return parsed


# Calls that open a handle to close.


class opening(operation[H, P, R]):
    """An `operation` that gives a handle to be closed (`client.sandbox(...)`): its async form
    returns an `Opening`, to `await` or to enter with `async with`, not a coroutine."""

    @staticmethod
    def async_form(plan: Callable[..., Plan[Any]]) -> Callable[..., Any]:
        def async_method(handle: Any, *args: Any, **kwargs: Any) -> Opening[Any]:
            return Opening(lambda: handle._transport.run(plan(handle, *args, **kwargs)))

        return async_method

    @staticmethod
    def async_result(result: Any) -> Any:
        return f"Opening[{result}]"

    @overload  # type: ignore[override]
    def __get__(self, handle: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(
        self, handle: Asynchronous, owner: type | None = None
    ) -> Callable[P, Opening[R]]: ...
    @overload
    def __get__(self, handle: object, owner: type | None = None) -> Callable[P, R]: ...
    def __get__(self, handle: Any, owner: type | None = None) -> Any:
        return super().__get__(handle, owner)


class Opening(Generic[H]):
    """What an async `opening` returns: awaited, the handle; in `async with`, the handle,
    entered and left (closed). The call is made once, when first awaited or entered."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, H]]) -> None:
        self._start = start
        self._handle: H | None = None

    async def _open(self) -> H:
        if self._handle is None:
            self._handle = await self._start()
        return self._handle

    def __await__(self) -> Generator[Any, None, H]:
        return self._open().__await__()

    async def __aenter__(self) -> H:
        return await (await self._open()).__aenter__()  # type: ignore[attr-defined]

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._handle is not None:
            await self._handle.__aexit__(exc_type, exc, tb)  # type: ignore[attr-defined]


# The calls.


class ClientCalls(Generic[TransportT, SandboxT, PoolT]):
    """The connection and the calls of `Client` and `AsyncClient`. A side names its transport
    (`_Transport`) and the handles it gives (`_Sandbox`, `_Pool`)."""

    _Transport: Callable[[Settings, TransportT | None], Any]
    _Sandbox: Callable[[Any, SandboxInfo], SandboxT]
    _Pool: Callable[[Any, PoolInfo], PoolT]

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        transport: TransportT | None = None,
    ) -> None:
        self._settings = Settings(url, token, timeout, operation_timeout)
        self._transport = self._Transport(self._settings, transport)

    @property
    def url(self) -> str:
        return self._settings.url

    @property
    def timeout(self) -> float:
        return self._settings.timeout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # Sandboxes

    @opening
    def sandbox(
        self,
        task: str | None = None,
        *,
        image: str | None = None,
        labels: Mapping[str, str] | None = None,
        agent: str | None = None,
        ttl: Seconds | None = None,
        idle_timeout: Seconds | None = None,
        wait: Seconds | None = None,
    ) -> Plan[SandboxT]:
        """Start a sandbox from `task` (or, with `image` instead, an empty one from that image,
        with no check); a context manager that closes it on exit. With `AsyncClient`, `await`
        it, or use it in `async with` (closed on exit).

        `ttl` and `idle_timeout` are seconds after which the server closes it; `wait` how long
        to wait for room when every host is full (then `CapacityError`).
        """
        body = compact(
            {
                "task": task,
                "image": image,
                "labels": dict(labels) if labels else None,
                "agent": agent,
                "ttl": number(ttl),
                "idle_timeout": number(idle_timeout),
                "wait": number(wait),
            }
        )
        # Starting runs the task's setup command: its length is the server's to decide.
        info = yield Call(
            "POST", "/api/sandboxes", json=body, wait=OPERATION, parse=SandboxInfo.from_json
        )
        return self._Sandbox(self, info)

    @operation
    def get_sandbox(self, sandbox_id: int) -> Plan[SandboxT]:
        """A handle on an existing sandbox."""
        path = f"/api/sandboxes/{segment(sandbox_id)}"
        return self._Sandbox(self, (yield Call("GET", path, parse=SandboxInfo.from_json)))

    @operation
    def sandboxes(
        self,
        task: str | None = None,
        labels: Mapping[str, str] | None = None,
        status: str | None = None,
    ) -> Plan[list[SandboxT]]:
        """Your sandboxes, filtered by task, labels (all must match) and status."""
        params: list[tuple[str, str]] = []
        if task:
            params.append(("task", task))
        for key, value in (labels or {}).items():
            params.append(("label", f"{key}={value}"))
        if status:
            params.append(("status", status))
        infos = yield Call(
            "GET", "/api/sandboxes", params=params, parse=_list_of(SandboxInfo.from_json)
        )
        return [self._Sandbox(self, info) for info in infos]

    # Tasks and attempts

    @operation
    def tasks(self) -> Plan[list[Task]]:
        return (yield Call("GET", "/api/tasks", parse=_list_of(Task.from_json)))

    @operation
    def run(
        self,
        task: str,
        agent: str,
        n: int = 1,
        command: str | None = None,
        callback_url: str | None = None,
    ) -> Plan[list[Attempt]]:
        """Queue `n` attempts of `task` by `agent` (a built-in agent, or a command)."""
        body = {"agent": agent, "command": command, "n": int(n), "callback_url": callback_url}
        path = f"/api/tasks/{segment(task)}/attempts"
        return (yield Call("POST", path, json=compact(body), parse=_list_of(Attempt.from_json)))

    @operation
    def attempt(self, attempt_id: int) -> Plan[Attempt]:
        path = f"/api/attempts/{segment(attempt_id)}"
        return (yield Call("GET", path, parse=Attempt.from_json))

    @operation
    def wait(
        self,
        attempts_or_ids: Attempt | int | Iterable[Attempt | int],
        timeout: Seconds = 600,
    ) -> Plan[list[Attempt]]:
        """Wait until all the attempts have ended; `OperationTimeout` after `timeout` seconds."""
        ids = attempt_ids(attempts_or_ids)
        attempts = yield Call(
            "POST",
            "/api/attempts/wait",
            json={"ids": ids, "timeout": number(timeout)},
            wait=seconds(timeout) or 0.0,
            parse=_list_of(Attempt.from_json),
        )
        return in_order(ids, attempts)

    # RL pools

    @operation
    def pool(
        self,
        task: str | None = None,
        *,
        size: int | None = None,
        tasks: Sequence[str] | None = None,
        labels: Mapping[str, str] | None = None,
        agent: str | None = None,
        name: str | None = None,
        max_steps: int | None = None,
        episode_seconds: Seconds | None = None,
    ) -> Plan[PoolT]:
        """A pool of `size` environments of `task` (a group: independent episodes of one task),
        or one environment per task in `tasks`. No sandbox starts until `reset()`. Episodes
        past `max_steps` steps or `episode_seconds` are truncated. See docs/POOLS.md."""
        body = compact(
            {
                "task": task,
                "tasks": list(tasks) if tasks is not None else None,
                "size": size,
                "labels": dict(labels) if labels else None,
                "agent": agent,
                "name": name,
                "max_steps": max_steps,
                "episode_seconds": number(episode_seconds),
            }
        )
        info = yield Call("POST", "/api/pools", json=body, parse=PoolInfo.from_json)
        return self._Pool(self, info)

    @operation
    def get_pool(self, pool_id: int) -> Plan[PoolT]:
        info = yield Call("GET", f"/api/pools/{segment(pool_id)}", parse=PoolInfo.from_json)
        return self._Pool(self, info)

    # SWE-bench predictions

    @operation
    def evaluate(
        self,
        predictions: Any,
        dataset: Any,
        *,
        run_id: str | None = None,
        image: str | None = None,
        wait: bool = True,
        timeout: Seconds = 3600,
    ) -> Plan[EvaluationReport]:
        """Evaluate SWE-bench predictions (instance_id, model_name_or_path, model_patch) against
        `dataset` rows: one attempt each, reported as the harness reports. Each of the two is a
        list of objects, a path to a JSONL / JSON file, or such a file's text. With `wait`,
        returns once every attempt has ended (`OperationTimeout` after `timeout` seconds);
        without, at once (`client.evaluation(id, wait=True)` waits later). See docs/SDK.md."""
        body = compact(
            {
                "predictions": evaluation_input(predictions),
                "dataset": evaluation_input(dataset),
                "run_id": run_id,
                "image": image,
            }
        )
        # The server imports the dataset rows the predictions name before it answers.
        report = yield Call(
            "POST", "/api/evaluations", json=body, wait=OPERATION, parse=EvaluationReport.from_json
        )
        if not wait or report.finished:
            return report
        return (yield from _evaluation(report.id, wait=True, timeout=timeout))

    @operation
    def evaluation(
        self, evaluation_id: int, *, wait: bool = False, timeout: Seconds = 3600
    ) -> Plan[EvaluationReport]:
        """An evaluation as it stands; with `wait`, once it has finished."""
        return (yield from _evaluation(evaluation_id, wait=wait, timeout=timeout))


def _evaluation(evaluation_id: Any, *, wait: bool, timeout: Seconds) -> Plan[EvaluationReport]:
    waiting = Waiting(timeout)
    path = f"/api/evaluations/{segment(evaluation_id)}"
    while True:
        report = yield Call("GET", path, parse=EvaluationReport.from_json)
        if report.finished or not wait:
            return report
        yield Sleep(waiting.pause(report))


class SandboxCalls:
    """The calls of `Sandbox` and `AsyncSandbox`, and the server's description of the sandbox
    (`info`) with its properties. A side sets `client` and `files`."""

    client: Any

    def __init__(self, info: SandboxInfo) -> None:
        self.info = info
        self._ended = False

    @property
    def _transport(self) -> Any:
        return self.client._transport

    @property
    def _path(self) -> str:
        return f"/api/sandboxes/{segment(self.id)}"

    @property
    def id(self) -> int:
        return self.info.id  # type: ignore[return-value]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def state(self) -> str:
        return self.info.state

    @property
    def labels(self) -> dict[str, str]:
        return self.info.labels

    def _update(self, info: SandboxInfo) -> SandboxInfo:
        if info.id is None:
            info.id = self.info.id
        self.info = info
        if info.state in ("closed", "deleted"):
            self._ended = True
        return info

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name or self.id} {self.state}>"

    @operation
    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: Seconds | None = None,
        stdin: str | bytes | None = None,
        user: str | None = None,
        stream: bool = False,
        on_output: OutputCallback | None = None,
        max_output: int | None = None,
    ) -> Plan[ExecResult]:
        """Run `command` (a shell string, or a list of arguments) in the sandbox.

        A non-zero exit is a normal result (see `ExecResult.ok`). With `stream=True` or an
        `on_output(stream, text)` callback the output arrives while it runs (printed to our
        stdout/stderr when no callback is given; with `AsyncSandbox`, `on_output` may be a
        coroutine function). `stdin` as bytes is sent as they are; `user` runs it as another
        (non-root) user of the image. Long output comes back as head and tail (`truncated`);
        streams of at most `max_output` bytes come back whole.
        """
        stdin_base64 = None
        if isinstance(stdin, (bytes, bytearray)):
            stdin_base64 = base64.b64encode(bytes(stdin)).decode("ascii")
            stdin = None
        if not isinstance(command, str):
            command = [str(part) for part in command]
        body = compact(
            {
                "command": command,
                "cwd": cwd,
                "env": {str(k): str(v) for k, v in env.items()} if env else None,
                "timeout": number(timeout),
                "stdin": stdin,
                "stdin_base64": stdin_base64,
                "user": user,
                "max_output": max_output,
            }
        )
        streaming = stream or on_output is not None
        if streaming:
            body["stream"] = True
        budget = seconds(timeout)
        call = Call(
            "POST",
            f"{self._path}/exec",
            json=body,
            wait=OPERATION if budget is None else budget,
            parse=ExecResult.from_json,
        )
        return (yield Stream(call, on_output) if streaming else call)

    @operation
    def check(self) -> Plan[CheckResult]:
        """Run the task's check on a clean copy of the changes so far."""
        call = Call("POST", f"{self._path}/check", wait=OPERATION, parse=CheckResult.from_json)
        return (yield call)

    @operation
    def diff(self) -> Plan[Diff]:
        """The changes so far against the task's base."""
        return (yield Call("GET", f"{self._path}/diff", parse=Diff.from_json))

    @operation
    def message(self, role: str, content: str) -> Plan[None]:
        """Add a message (`assistant`, `user`, ...) to the sandbox's timeline."""
        body = {"role": role, "content": content}
        yield Call("POST", f"{self._path}/messages", json=body, expect="none")

    @operation
    def close(self, check: bool = False) -> Plan[SandboxInfo]:
        """Stop the sandbox and keep it for review; with `check=True` run the final check
        first (in the returned info's `check`)."""
        info = self._update((yield self._close_call(check)))
        self._ended = True
        return info

    def _close_call(self, check: bool) -> Call:
        return Call(
            "POST",
            f"{self._path}/close",
            json={"check": bool(check)},
            wait=OPERATION if check else None,
            parse=SandboxInfo.from_json,
        )

    @operation
    def delete(self) -> Plan[None]:
        """Delete the sandbox: its container and its data."""
        yield Call("DELETE", self._path, expect="none")
        self._ended = True
        self.info.state = "deleted"

    @operation
    def refresh(self) -> Plan[SandboxInfo]:
        """Fetch the sandbox's description again (state, expiry...)."""
        return self._update((yield Call("GET", self._path, parse=SandboxInfo.from_json)))

    @operation
    def _leave(self, exc: BaseException | None) -> Plan[None]:
        """Leaving the `with` block: close the sandbox (without a check) unless it has ended; a
        failure to close never hides `exc`, the exception raised inside the block."""
        if self._ended:
            return
        try:
            self._update((yield self._close_call(False)))
            self._ended = True
        except (SandboxClosed, SandboxGone):
            self._ended = True
        except Exception as close_error:
            if exc is None:
                raise
            note_close_failure(exc, close_error, self.name)


class FilesCalls:
    """The calls of `sandbox.files` (`Files`, `AsyncFiles`). Relative paths are inside the
    task's working folder (/workspace, or a Harbor task's WORKDIR). A side sets `_sandbox`."""

    _sandbox: SandboxCalls

    @property
    def _transport(self) -> Any:
        return self._sandbox._transport

    def _call(self, method: str, endpoint: str, path: str, **options: Any) -> Call:
        """A call on the file or folder `path`: its errors name it (`exc.filename`)."""
        url = f"{self._sandbox._path}/{endpoint}"
        params = [("path", path), *options.pop("params", [])]
        return Call(method, url, params=params, filename=path, **options)

    @operation
    def read(
        self, path: str, *, text: bool = False, max_bytes: int | None = None
    ) -> Plan[bytes | str]:
        """The file's bytes; with `text=True` decoded as UTF-8 (invalid bytes replaced).

        Raises `FileNotFoundError`, `IsADirectoryError` or `PermissionError` (also BoltzErrors),
        and `FileTooLarge` for a file over `max_bytes` (or the server's limit).
        """
        data = yield self._read_call(path, max_bytes)
        return data.decode("utf-8", errors="replace") if text else data

    def _read_call(self, path: str, max_bytes: int | None = None) -> Call:
        params = [("max_bytes", str(int(max_bytes)))] if max_bytes is not None else []
        return self._call("GET", "files", path, params=params, expect="bytes")

    @operation
    def write(self, path: str, data: bytes | str, *, mode: int | None = 0o644) -> Plan[int]:
        """Write `data` (text is encoded as UTF-8) to `path`; returns the bytes written."""
        answer = yield self._write_call(path, data, mode)
        return int((answer or {}).get("bytes", len(data)))

    def _write_call(self, path: str, data: bytes | str, mode: int | None) -> Call:
        content = data.encode("utf-8") if isinstance(data, str) else data
        params = [("mode", f"{mode:04o}")] if mode is not None else []
        return self._call("PUT", "files", path, params=params, content=content)

    @operation
    def list(self, path: str = ".") -> Plan[list[FileInfo]]:
        """The entries of the folder `path`."""
        return (yield self._call("GET", "files/list", path, parse=_list_of(FileInfo.from_json)))

    @operation
    def delete(self, path: str) -> Plan[None]:
        yield self._call("DELETE", "files", path, expect="none")

    @operation
    def upload(self, local_path: str | os.PathLike[str], path: str) -> Plan[int]:
        """Copy a local file or folder into the sandbox at `path`; returns the files written.

        A folder's contents go into the folder `path` (sent as one tar); a file keeps its
        permission bits, and goes inside `path` when `path` ends with `/`.
        """
        local = Path(local_path)
        if local.is_dir():
            archive = yield Local(tar_directory, (local,))
            answer = yield self._call("PUT", "archive", path, content=archive)
            return int((answer or {}).get("files", 0))
        mode = local.stat().st_mode & 0o777
        data = yield Local(local.read_bytes)
        yield self._write_call(upload_target(local, path), data, mode)
        return 1

    @operation
    def download(self, path: str, local_path: str | os.PathLike[str]) -> Plan[Path]:
        """Copy a file or folder from the sandbox to `local_path`; returns where it went.

        A folder is fetched as one tar and extracted under `local_path`, refusing members that
        would land outside it (`UnsafeArchive`); a file goes to `local_path`, or inside it when
        it is an existing folder.
        """
        try:
            data = yield self._read_call(path)
        except BoltzIsADirectoryError:
            archive = yield self._call("GET", "archive", path, expect="bytes")
            target = Path(local_path)
            yield Local(safe_extract, (archive, target))
            return target
        return (yield Local(write_local, (download_target(path, local_path), data)))


class PoolCalls:
    """The calls of `Pool` and `AsyncPool`, and the pool's description (`info`). A side sets
    `_client`, and adds what runs steps concurrently (`submit`, `results`) and `close`."""

    _client: Any

    def __init__(self, info: PoolInfo) -> None:
        self.info = info

    @property
    def _transport(self) -> Any:
        return self._client._transport

    @property
    def _path(self) -> str:
        return f"/api/pools/{segment(self.id)}"

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def url(self) -> str:
        return self.info.url

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} of {self.size}>"

    @operation
    def reset(
        self, indices: Sequence[int] | None = None, *, wait: float = DEFAULT_RESET_WAIT
    ) -> Plan[list[Observation]]:
        """Fresh sandboxes for the environments at `indices` (all by default); their first
        observations, in the order of `indices`. Over capacity each waits for room up to
        `wait` seconds; one that got none has `error` set and `raw["info"]["masked"]`."""
        body = {"indices": list(indices) if indices is not None else None, "wait": wait}
        # Setting up each new sandbox runs the task's setup: the server decides how long.
        parse = _list_of(reset_observation)
        return (yield Call("POST", f"{self._path}/reset", json=body, wait=OPERATION, parse=parse))

    @operation
    def step(
        self, actions: Sequence[Any], *, timeout: float | None = None
    ) -> Plan[list[StepResult]]:
        """Exactly one action per environment (an `Action`, a command string, a dict, or None
        to sit one out); one `StepResult` per environment, in the same order. `timeout` bounds
        the wait for every environment (by default, what its action may take)."""
        sent = [action_json(a) for a in actions]
        body = compact({"actions": sent, "timeout": timeout})
        body["actions"] = sent  # None entries are kept: those environments sit out
        wait, parse = timeout or OPERATION, _list_of(StepResult.from_json)
        return (yield Call("POST", f"{self._path}/step", json=body, wait=wait, parse=parse))

    @operation
    def step_one(
        self, index: int, action: Any, *, timeout: float | None = None
    ) -> Plan[StepResult]:
        """One environment's step on its own."""
        body = compact({"action": action_json(action), "timeout": timeout})
        path, wait = f"{self._path}/envs/{int(index)}/step", timeout or OPERATION
        return (yield Call("POST", path, json=body, wait=wait, parse=StepResult.from_json))

    @operation
    def refresh(self) -> Plan[PoolInfo]:
        """The pool as it is now: environments, steps taken, masked steps, group rewards."""
        self.info = yield Call("GET", self._path, parse=PoolInfo.from_json)
        return self.info

    @operation
    def _close(self) -> Plan[PoolInfo]:
        """Close the pool on the server: every episode's sandbox is closed and kept for
        review."""
        path = f"{self._path}/close"
        self.info = yield Call("POST", path, json={}, wait=OPERATION, parse=PoolInfo.from_json)
        return self.info
