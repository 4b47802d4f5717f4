"""The asynchronous client: `AsyncClient`, `AsyncSandbox` and `AsyncFiles`, the same surface as
the synchronous one with `async` methods.

    async with AsyncClient() as client:
        async with client.sandbox(task="fix-add") as sb:
            result = await sb.exec("python3 -m pytest -q tests")

`client.sandbox(...)` can also be awaited: `sb = await client.sandbox(task="fix-add")`.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from boltz import _core
from boltz._core import (
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_TIMEOUT,
    Call,
    ExecStream,
    OutputCallback,
    SandboxBase,
    Settings,
)
from boltz.archives import safe_extract, tar_directory
from boltz.errors import (
    BoltzFileNotFoundError,
    BoltzIsADirectoryError,
    BoltzPermissionError,
    SandboxClosed,
    SandboxGone,
)
from boltz.evaluations import EvaluationReport, Waiting
from boltz.pool_types import PoolInfo
from boltz.pools import AsyncPool
from boltz.types import Attempt, CheckResult, Diff, ExecResult, FileInfo, SandboxInfo, Task

__all__ = ["AsyncClient", "AsyncFiles", "AsyncSandbox"]

Seconds = float | datetime.timedelta


class AsyncClient:
    """A connection to a Boltz server for asyncio code; see `boltz.Client` for the arguments.

    Use it as an async context manager, or `await client.close()`.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = Settings(url, token, timeout, operation_timeout)
        self._http = httpx.AsyncClient(
            base_url=self._settings.url,
            headers=self._settings.headers(),
            timeout=self._settings.timeout,
            transport=transport,
        )

    @property
    def url(self) -> str:
        return self._settings.url

    @property
    def timeout(self) -> float:
        return self._settings.timeout

    def __repr__(self) -> str:
        return f"<AsyncClient {self.url}>"

    # Plumbing

    async def _request(self, call: Call) -> Any:
        settings = self._settings
        try:
            response = await self._http.request(
                call.method, call.path, **settings.request_kwargs(call)
            )
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return settings.result(response, call)

    async def _stream_exec(self, call: Call, on_output: OutputCallback | None) -> ExecResult:
        settings = self._settings
        reader = ExecStream(on_output)
        try:
            async with self._http.stream(
                call.method, call.path, **settings.request_kwargs(call)
            ) as response:
                if response.status_code >= 400:
                    raise settings.error_for(response, await response.aread())
                if response.status_code >= 300:
                    raise settings.redirect_error(response)
                if _core.answered_whole(response):
                    result = reader.whole(await response.aread())
                    for pending in reader.take_pending():
                        await pending
                    return result
                async for line in response.aiter_lines():
                    reader.feed(line)
                    for pending in reader.take_pending():
                        await pending
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return reader.finish()

    # Sandboxes

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
    ) -> _SandboxStart:
        """Start a sandbox from `task`: `await` it, or use it in `async with` (closed on exit)."""
        return _SandboxStart(
            self, _core.create_sandbox(task, labels, agent, ttl, idle_timeout, wait, image=image)
        )

    async def get_sandbox(self, sandbox_id: int) -> AsyncSandbox:
        data = await self._request(_core.get_sandbox(sandbox_id))
        return AsyncSandbox(self, SandboxInfo.from_json(data))

    async def sandboxes(
        self,
        task: str | None = None,
        labels: Mapping[str, str] | None = None,
        status: str | None = None,
    ) -> list[AsyncSandbox]:
        data = await self._request(_core.list_sandboxes(task, labels, status))
        return [AsyncSandbox(self, SandboxInfo.from_json(item)) for item in data or []]

    # Tasks and attempts

    async def tasks(self) -> list[Task]:
        return [Task.from_json(item) for item in await self._request(_core.list_tasks()) or []]

    async def run(
        self,
        task: str,
        agent: str,
        n: int = 1,
        command: str | None = None,
        callback_url: str | None = None,
    ) -> list[Attempt]:
        data = await self._request(_core.run_attempts(task, agent, n, command, callback_url))
        return [Attempt.from_json(item) for item in data or []]

    async def attempt(self, attempt_id: int) -> Attempt:
        return Attempt.from_json(await self._request(_core.get_attempt(attempt_id)))

    async def wait(
        self,
        attempts_or_ids: Attempt | int | Iterable[Attempt | int],
        timeout: Seconds = 600,
    ) -> list[Attempt]:
        ids = _core.attempt_ids(attempts_or_ids)
        data = await self._request(_core.wait_attempts(ids, timeout))
        return _core.in_order(ids, [Attempt.from_json(item) for item in data or []])

    # RL pools

    async def pool(
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
    ) -> AsyncPool:
        """A pool of `size` environments of `task` (a group: independent episodes of one task),
        or one environment per task in `tasks`. No sandbox starts until `reset()`. Episodes
        past `max_steps` steps or `episode_seconds` are truncated. See docs/POOLS.md."""
        call = _core.create_pool(task, tasks, size, labels, agent, name, max_steps, episode_seconds)
        return AsyncPool(self, PoolInfo.from_json(await self._request(call)))

    async def get_pool(self, pool_id: int) -> AsyncPool:
        return AsyncPool(self, PoolInfo.from_json(await self._request(_core.get_pool(pool_id))))

    # SWE-bench predictions

    async def evaluate(
        self,
        predictions: Any,
        dataset: Any,
        *,
        run_id: str | None = None,
        image: str | None = None,
        wait: bool = True,
        timeout: Seconds = 3600,
    ) -> EvaluationReport:
        """`Client.evaluate`, awaited."""
        call = _core.create_evaluation(predictions, dataset, run_id, image)
        report = EvaluationReport.from_json(await self._request(call))
        if not wait or report.finished:
            return report
        return await self.evaluation(report.id, wait=True, timeout=timeout)

    async def evaluation(
        self, evaluation_id: int, *, wait: bool = False, timeout: Seconds = 3600
    ) -> EvaluationReport:
        """An evaluation as it stands; with `wait`, once it has finished."""
        waiting = Waiting(timeout)
        while True:
            data = await self._request(_core.get_evaluation(evaluation_id))
            report = EvaluationReport.from_json(data)
            if report.finished or not wait:
                return report
            await asyncio.sleep(waiting.pause(report))

    # Lifecycle

    async def close(self) -> None:
        await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class _SandboxStart:
    """What `AsyncClient.sandbox()` returns: awaitable, and an async context manager."""

    def __init__(self, client: AsyncClient, call: Call) -> None:
        self._client = client
        self._call = call
        self._sandbox: AsyncSandbox | None = None

    async def _start(self) -> AsyncSandbox:
        if self._sandbox is None:
            data = await self._client._request(self._call)
            self._sandbox = AsyncSandbox(self._client, SandboxInfo.from_json(data))
        return self._sandbox

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncSandbox:
        return await (await self._start()).__aenter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(exc_type, exc, tb)


class AsyncSandbox(SandboxBase):
    """A live sandbox (async). As an async context manager it closes the sandbox on exit; a
    failure to close never hides an exception raised inside the block."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        super().__init__(info)
        self.client = client
        self.files = AsyncFiles(self)

    async def exec(
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
    ) -> ExecResult:
        """See `Sandbox.exec`. `on_output` may be a plain function or a coroutine function."""
        streaming = stream or on_output is not None
        call = _core.exec_command(
            self.id,
            command,
            cwd=cwd,
            env=env,
            timeout=timeout,
            stdin=stdin,
            user=user,
            stream=streaming,
            max_output=max_output,
        )
        if streaming:
            return await self.client._stream_exec(call, on_output)
        return ExecResult.from_json(await self.client._request(call))

    async def check(self) -> CheckResult:
        return CheckResult.from_json(await self.client._request(_core.check(self.id)))

    async def diff(self) -> Diff:
        return Diff.from_json(await self.client._request(_core.diff(self.id)))

    async def message(self, role: str, content: str) -> None:
        await self.client._request(_core.message(self.id, role, content))

    async def close(self, check: bool = False) -> SandboxInfo:
        info = self._update(await self.client._request(_core.close(self.id, check)))
        self._ended = True
        return info

    async def delete(self) -> None:
        await self.client._request(_core.delete_sandbox(self.id))
        self._ended = True
        self.info.state = "deleted"

    async def refresh(self) -> SandboxInfo:
        return self._update(await self.client._request(_core.get_sandbox(self.id)))

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._ended:
            return
        try:
            await self.close(check=False)
        except (SandboxClosed, SandboxGone):
            self._ended = True
        except Exception as close_error:
            if exc is None:
                raise
            _core.note_close_failure(exc, close_error, self.name)


class AsyncFiles:
    """The files of a sandbox (`sandbox.files`), async. See `boltz.Files`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def _request(self, call: Call, path: str) -> Any:
        try:
            return await self._sandbox.client._request(call)
        except (BoltzFileNotFoundError, BoltzIsADirectoryError, BoltzPermissionError) as exc:
            exc.filename = path
            raise

    async def read(
        self, path: str, *, text: bool = False, max_bytes: int | None = None
    ) -> bytes | str:
        data = await self._request(_core.read_file(self._sandbox.id, path, max_bytes), path)
        return data.decode("utf-8", errors="replace") if text else data

    async def write(self, path: str, data: bytes | str, *, mode: int | None = 0o644) -> int:
        answer = await self._request(_core.write_file(self._sandbox.id, path, data, mode), path)
        return int((answer or {}).get("bytes", len(data)))

    async def list(self, path: str = ".") -> list[FileInfo]:
        data = await self._request(_core.list_files(self._sandbox.id, path), path)
        return [FileInfo.from_json(item) for item in data or []]

    async def delete(self, path: str) -> None:
        await self._request(_core.delete_file(self._sandbox.id, path), path)

    async def upload(self, local_path: str | os.PathLike[str], path: str) -> int:
        local = Path(local_path)
        if local.is_dir():
            archive = await asyncio.to_thread(tar_directory, local)
            answer = await self._request(_core.put_archive(self._sandbox.id, path, archive), path)
            return int((answer or {}).get("files", 0))
        mode = local.stat().st_mode & 0o777
        data = await asyncio.to_thread(local.read_bytes)
        await self.write(_core.upload_target(local, path), data, mode=mode)
        return 1

    async def download(self, path: str, local_path: str | os.PathLike[str]) -> Path:
        try:
            data = await self._request(_core.read_file(self._sandbox.id, path), path)
        except BoltzIsADirectoryError:
            archive = await self._request(_core.get_archive(self._sandbox.id, path), path)
            target = Path(local_path)
            await asyncio.to_thread(safe_extract, archive, target)
            return target
        target = _core.download_target(path, local_path)
        return await asyncio.to_thread(_core.write_local, target, data)
