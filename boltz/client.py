"""The synchronous client: `Client`, `Sandbox` and `Files`."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterable, Mapping, Sequence
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
from boltz.pools import Pool
from boltz.types import Attempt, CheckResult, Diff, ExecResult, FileInfo, SandboxInfo, Task

__all__ = ["Client", "Files", "Sandbox"]

Seconds = float | datetime.timedelta


class Client:
    """A connection to a Boltz server.

    `url` defaults to BOLTZ_URL (else http://127.0.0.1:8000), `token` to BOLTZ_TOKEN. `timeout`
    bounds an ordinary request; calls that run something (exec, check, close with a check,
    starting a sandbox, waiting for attempts) wait their own limit on top of it, or
    `operation_timeout` when they have none. `transport` is handed to httpx (tests pass an
    `httpx.MockTransport`). Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = Settings(url, token, timeout, operation_timeout)
        self._http = httpx.Client(
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
        return f"<Client {self.url}>"

    # Plumbing

    def _request(self, call: Call) -> Any:
        settings = self._settings
        try:
            response = self._http.request(call.method, call.path, **settings.request_kwargs(call))
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return settings.result(response, call)

    def _stream_exec(self, call: Call, on_output: OutputCallback | None) -> ExecResult:
        settings = self._settings
        reader = ExecStream(on_output)
        try:
            with self._http.stream(
                call.method, call.path, **settings.request_kwargs(call)
            ) as response:
                if response.status_code >= 400:
                    raise settings.error_for(response, response.read())
                if response.status_code >= 300:
                    raise settings.redirect_error(response)
                if _core.answered_whole(response):
                    return reader.whole(response.read())
                for line in response.iter_lines():
                    reader.feed(line)
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
    ) -> Sandbox:
        """Start a sandbox from `task` (or, with `image` instead, an empty one from that image,
        with no check); a context manager that closes it on exit.

        `ttl` and `idle_timeout` are seconds after which the server closes it; `wait` how long
        to wait for room when every host is full (then `CapacityError`).
        """
        data = self._request(
            _core.create_sandbox(task, labels, agent, ttl, idle_timeout, wait, image=image)
        )
        return Sandbox(self, SandboxInfo.from_json(data))

    def get_sandbox(self, sandbox_id: int) -> Sandbox:
        """A handle on an existing sandbox."""
        return Sandbox(self, SandboxInfo.from_json(self._request(_core.get_sandbox(sandbox_id))))

    def sandboxes(
        self,
        task: str | None = None,
        labels: Mapping[str, str] | None = None,
        status: str | None = None,
    ) -> list[Sandbox]:
        """Your sandboxes, filtered by task, labels (all must match) and status."""
        data = self._request(_core.list_sandboxes(task, labels, status))
        return [Sandbox(self, SandboxInfo.from_json(item)) for item in data or []]

    # Tasks and attempts

    def tasks(self) -> list[Task]:
        return [Task.from_json(item) for item in self._request(_core.list_tasks()) or []]

    def run(
        self,
        task: str,
        agent: str,
        n: int = 1,
        command: str | None = None,
        callback_url: str | None = None,
    ) -> list[Attempt]:
        """Queue `n` attempts of `task` by `agent` (a built-in agent, or a command)."""
        data = self._request(_core.run_attempts(task, agent, n, command, callback_url))
        return [Attempt.from_json(item) for item in data or []]

    def attempt(self, attempt_id: int) -> Attempt:
        return Attempt.from_json(self._request(_core.get_attempt(attempt_id)))

    def wait(
        self,
        attempts_or_ids: Attempt | int | Iterable[Attempt | int],
        timeout: Seconds = 600,
    ) -> list[Attempt]:
        """Wait until all the attempts have ended; `OperationTimeout` after `timeout` seconds."""
        ids = _core.attempt_ids(attempts_or_ids)
        data = self._request(_core.wait_attempts(ids, timeout))
        return _core.in_order(ids, [Attempt.from_json(item) for item in data or []])

    # RL pools

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
    ) -> Pool:
        """A pool of `size` environments of `task` (a group: independent episodes of one task),
        or one environment per task in `tasks`. No sandbox starts until `reset()`. Episodes
        past `max_steps` steps or `episode_seconds` are truncated. See docs/POOLS.md."""
        call = _core.create_pool(task, tasks, size, labels, agent, name, max_steps, episode_seconds)
        return Pool(self, PoolInfo.from_json(self._request(call)))

    def get_pool(self, pool_id: int) -> Pool:
        return Pool(self, PoolInfo.from_json(self._request(_core.get_pool(pool_id))))

    # SWE-bench predictions

    def evaluate(
        self,
        predictions: Any,
        dataset: Any,
        *,
        run_id: str | None = None,
        image: str | None = None,
        wait: bool = True,
        timeout: Seconds = 3600,
    ) -> EvaluationReport:
        """Evaluate SWE-bench predictions (instance_id, model_name_or_path, model_patch) against
        `dataset` rows: one attempt each, reported as the harness reports. Each of the two is a
        list of objects, a path to a JSONL / JSON file, or such a file's text. With `wait`,
        returns once every attempt has ended (`OperationTimeout` after `timeout` seconds);
        without, at once (`client.evaluation(id, wait=True)` waits later). See docs/SDK.md."""
        call = _core.create_evaluation(predictions, dataset, run_id, image)
        report = EvaluationReport.from_json(self._request(call))
        if not wait or report.finished:
            return report
        return self.evaluation(report.id, wait=True, timeout=timeout)

    def evaluation(
        self, evaluation_id: int, *, wait: bool = False, timeout: Seconds = 3600
    ) -> EvaluationReport:
        """An evaluation as it stands; with `wait`, once it has finished."""
        waiting = Waiting(timeout)
        while True:
            data = self._request(_core.get_evaluation(evaluation_id))
            report = EvaluationReport.from_json(data)
            if report.finished or not wait:
                return report
            time.sleep(waiting.pause(report))

    # Lifecycle

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class Sandbox(SandboxBase):
    """A live sandbox. As a context manager it closes the sandbox (without a check) on exit;
    a failure to close never hides an exception raised inside the block."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        super().__init__(info)
        self.client = client
        self.files = Files(self)

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
    ) -> ExecResult:
        """Run `command` (a shell string, or a list of arguments) in the sandbox.

        A non-zero exit is a normal result (see `ExecResult.ok`). With `stream=True` or an
        `on_output(stream, text)` callback the output arrives while it runs (printed to our
        stdout/stderr when no callback is given). `stdin` as bytes is sent as they are; `user`
        runs it as another (non-root) user of the image. Long output comes back as head and
        tail (`truncated`); streams of at most `max_output` bytes come back whole.
        """
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
            return self.client._stream_exec(call, on_output)
        return ExecResult.from_json(self.client._request(call))

    def check(self) -> CheckResult:
        """Run the task's check on a clean copy of the changes so far."""
        return CheckResult.from_json(self.client._request(_core.check(self.id)))

    def diff(self) -> Diff:
        """The changes so far against the task's base."""
        return Diff.from_json(self.client._request(_core.diff(self.id)))

    def message(self, role: str, content: str) -> None:
        """Add a message (`assistant`, `user`, ...) to the sandbox's timeline."""
        self.client._request(_core.message(self.id, role, content))

    def close(self, check: bool = False) -> SandboxInfo:
        """Stop the sandbox and keep it for review; with `check=True` run the final check
        first (in the returned info's `check`)."""
        info = self._update(self.client._request(_core.close(self.id, check)))
        self._ended = True
        return info

    def delete(self) -> None:
        """Delete the sandbox: its container and its data."""
        self.client._request(_core.delete_sandbox(self.id))
        self._ended = True
        self.info.state = "deleted"

    def refresh(self) -> SandboxInfo:
        """Fetch the sandbox's description again (state, expiry...)."""
        return self._update(self.client._request(_core.get_sandbox(self.id)))

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._ended:
            return
        try:
            self.close(check=False)
        except (SandboxClosed, SandboxGone):
            self._ended = True
        except Exception as close_error:
            if exc is None:
                raise
            _core.note_close_failure(exc, close_error, self.name)


class Files:
    """The files of a sandbox (`sandbox.files`). Relative paths are inside the task's working
    folder (/workspace, or a Harbor task's WORKDIR)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def _request(self, call: Call, path: str) -> Any:
        try:
            return self._sandbox.client._request(call)
        except (BoltzFileNotFoundError, BoltzIsADirectoryError, BoltzPermissionError) as exc:
            exc.filename = path
            raise

    def read(self, path: str, *, text: bool = False, max_bytes: int | None = None) -> bytes | str:
        """The file's bytes; with `text=True` decoded as UTF-8 (invalid bytes replaced).

        Raises `FileNotFoundError`, `IsADirectoryError` or `PermissionError` (also BoltzErrors),
        and `FileTooLarge` for a file over `max_bytes` (or the server's limit).
        """
        data = self._request(_core.read_file(self._sandbox.id, path, max_bytes), path)
        return data.decode("utf-8", errors="replace") if text else data

    def write(self, path: str, data: bytes | str, *, mode: int | None = 0o644) -> int:
        """Write `data` (text is encoded as UTF-8) to `path`; returns the bytes written."""
        answer = self._request(_core.write_file(self._sandbox.id, path, data, mode), path)
        return int((answer or {}).get("bytes", len(data)))

    def list(self, path: str = ".") -> list[FileInfo]:
        """The entries of the folder `path`."""
        data = self._request(_core.list_files(self._sandbox.id, path), path)
        return [FileInfo.from_json(item) for item in data or []]

    def delete(self, path: str) -> None:
        self._request(_core.delete_file(self._sandbox.id, path), path)

    def upload(self, local_path: str | os.PathLike[str], path: str) -> int:
        """Copy a local file or folder into the sandbox at `path`; returns the files written.

        A folder's contents go into the folder `path` (sent as one tar); a file keeps its
        permission bits, and goes inside `path` when `path` ends with `/`.
        """
        local = Path(local_path)
        if local.is_dir():
            answer = self._request(
                _core.put_archive(self._sandbox.id, path, tar_directory(local)), path
            )
            return int((answer or {}).get("files", 0))
        mode = local.stat().st_mode & 0o777
        target = _core.upload_target(local, path)
        self.write(target, local.read_bytes(), mode=mode)
        return 1

    def download(self, path: str, local_path: str | os.PathLike[str]) -> Path:
        """Copy a file or folder from the sandbox to `local_path`; returns where it went.

        A folder arrives as a tar extracted into `local_path`, refusing (`UnsafeArchive`)
        members that would land outside it. A file goes to `local_path`, or inside it when it
        is an existing folder.
        """
        try:
            data = self._request(_core.read_file(self._sandbox.id, path), path)
        except BoltzIsADirectoryError:
            archive = self._request(_core.get_archive(self._sandbox.id, path), path)
            target = Path(local_path)
            safe_extract(archive, target)
            return target
        return _core.write_local(_core.download_target(path, local_path), data)
