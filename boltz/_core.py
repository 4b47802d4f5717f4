"""What the sync and async clients share: configuration, the requests each call sends, turning
answers into results or exceptions, and the exec stream reader. Nothing here does I/O."""

from __future__ import annotations

import base64
import datetime
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from boltz._version import __version__
from boltz.errors import (
    BoltzError,
    ConnectionFailed,
    OperationTimeout,
    error_from_response,
    make_error,
)
from boltz.types import Attempt, ExecResult, SandboxInfo

logger = logging.getLogger("boltz")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 60.0
DEFAULT_OPERATION_TIMEOUT = 3600.0

#: `Call.wait` for calls whose length the server decides (an exec without timeout, a check).
OPERATION = -1.0

OutputCallback = Callable[[str, str], Any]


def resolve_url(url: str | None) -> str:
    """The server's base URL: the argument, else BOLTZ_URL, else the local default."""
    url = (url or os.environ.get("BOLTZ_URL") or DEFAULT_URL).strip()
    if "://" not in url:
        url = f"http://{url}"
    url = url.rstrip("/")
    if url.endswith("/api"):
        url = url[: -len("/api")]
    return url


def resolve_token(token: str | None) -> str | None:
    """The API token: the argument, else BOLTZ_TOKEN, else none."""
    if token is None:
        token = os.environ.get("BOLTZ_TOKEN")
    token = (token or "").strip()
    return token or None


def seconds(value: float | datetime.timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return value


def _number(value: float | datetime.timedelta | None) -> int | float | None:
    value = seconds(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass
class Call:
    """One HTTP request of the API.

    `wait` is how long the operation itself may take on the server, added to the client's timeout
    for reading the answer (`OPERATION`: the client's operation timeout).
    """

    method: str
    path: str
    params: list[tuple[str, str]] | None = None
    json: Any = None
    content: bytes | None = None
    wait: float | None = None
    expect: str = "json"  # "json", "bytes" or "none"


def _compact(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _id(value: Any) -> str:
    return quote(str(value), safe="")


class Settings:
    """Connection settings and answer handling, shared by `Client` and `AsyncClient`."""

    def __init__(
        self,
        url: str | None,
        token: str | None,
        timeout: float,
        operation_timeout: float,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token)
        self.timeout = float(timeout)
        self.operation_timeout = float(operation_timeout)

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"boltz-sdk/{__version__}", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def timeout_for(self, call: Call) -> httpx.Timeout:
        if call.wait is None:
            return httpx.Timeout(self.timeout)
        extra = self.operation_timeout if call.wait == OPERATION else max(0.0, call.wait)
        return httpx.Timeout(self.timeout, read=self.timeout + extra)

    def request_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": self.timeout_for(call)}
        if call.params:
            kwargs["params"] = call.params
        if call.json is not None:
            kwargs["json"] = call.json
        if call.content is not None:
            kwargs["content"] = call.content
            kwargs["headers"] = {"Content-Type": "application/octet-stream"}
        return kwargs

    def transport_error(self, exc: httpx.HTTPError, call: Call) -> BoltzError:
        """A BoltzError for a request that got no answer."""
        where = f"{call.method} {call.path}"
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return ConnectionFailed(f"could not reach Boltz at {self.url} ({where}): {exc}")
        if isinstance(exc, httpx.TimeoutException):
            limit = self.timeout_for(call).read
            return OperationTimeout(
                f"no answer from Boltz at {self.url} to {where} within {limit:g}s: {exc}"
            )
        if isinstance(exc, httpx.UnsupportedProtocol):
            return ConnectionFailed(f"could not reach Boltz at {self.url}: {exc}")
        return ConnectionFailed(f"lost the connection to Boltz at {self.url} ({where}): {exc}")

    def error_for(self, response: httpx.Response, body: bytes) -> BoltzError:
        hint = ""
        if response.status_code == 401 and not self.token:
            hint = (
                "no API token was given: set BOLTZ_TOKEN or pass token= "
                "(create one with `python manage.py create_token USER`)"
            )
        return error_from_response(
            response.status_code,
            body,
            response.headers,
            reason=response.reason_phrase,
            hint=hint,
        )

    def redirect_error(self, response: httpx.Response) -> BoltzError:
        location = response.headers.get("location", "")
        return BoltzError(
            f"the server answered {response.status_code} redirecting to {location!r}: "
            f"is {self.url} the address of the Boltz server?",
            status=response.status_code,
        )

    def result(self, response: httpx.Response, call: Call) -> Any:
        """The answer's payload, or the exception for an error answer (raised)."""
        status = response.status_code
        if status >= 400:
            raise self.error_for(response, response.content)
        if status >= 300:
            raise self.redirect_error(response)
        if call.expect == "bytes":
            return response.content
        if call.expect == "none" or status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            snippet = response.text[:200]
            raise BoltzError(
                f"the server at {self.url} answered {call.method} {call.path} with something "
                f"that is not JSON: {snippet!r}",
                status=status,
            ) from None


# The calls of the API (docs/API.md), one function each.


def create_sandbox(
    task: str | None,
    labels: Mapping[str, str] | None,
    agent: str | None,
    ttl: float | datetime.timedelta | None,
    idle_timeout: float | datetime.timedelta | None,
    wait: float | datetime.timedelta | None,
    image: str | None = None,
) -> Call:
    body = _compact(
        {
            "task": task,
            "image": image,
            "labels": dict(labels) if labels else None,
            "agent": agent,
            "ttl": _number(ttl),
            "idle_timeout": _number(idle_timeout),
            "wait": _number(wait),
        }
    )
    # Starting runs the task's setup command: its length is the server's to decide.
    return Call("POST", "/api/sandboxes", json=body, wait=OPERATION)


def list_sandboxes(task: str | None, labels: Mapping[str, str] | None, status: str | None) -> Call:
    params: list[tuple[str, str]] = []
    if task:
        params.append(("task", task))
    for key, value in (labels or {}).items():
        params.append(("label", f"{key}={value}"))
    if status:
        params.append(("status", status))
    return Call("GET", "/api/sandboxes", params=params)


def get_sandbox(sandbox_id: Any) -> Call:
    return Call("GET", f"/api/sandboxes/{_id(sandbox_id)}")


def exec_command(
    sandbox_id: Any,
    command: str | Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | datetime.timedelta | None,
    stdin: str | bytes | None,
    user: str | None,
    stream: bool,
    max_output: int | None = None,
) -> Call:
    stdin_base64 = None
    if isinstance(stdin, (bytes, bytearray)):
        stdin, stdin_base64 = None, base64.b64encode(bytes(stdin)).decode("ascii")
    if not isinstance(command, str):
        command = [str(part) for part in command]
    body = _compact(
        {
            "command": command,
            "cwd": cwd,
            "env": {str(k): str(v) for k, v in env.items()} if env else None,
            "timeout": _number(timeout),
            "stdin": stdin,
            "stdin_base64": stdin_base64,
            "user": user,
            "max_output": max_output,
        }
    )
    if stream:
        body["stream"] = True
    budget = seconds(timeout)
    return Call(
        "POST",
        f"/api/sandboxes/{_id(sandbox_id)}/exec",
        json=body,
        wait=OPERATION if budget is None else budget,
    )


def read_file(sandbox_id: Any, path: str, max_bytes: int | None = None) -> Call:
    params = [("path", path)]
    if max_bytes is not None:
        params.append(("max_bytes", str(int(max_bytes))))
    return Call("GET", f"/api/sandboxes/{_id(sandbox_id)}/files", params=params, expect="bytes")


def write_file(sandbox_id: Any, path: str, data: bytes | str, mode: int | None) -> Call:
    if isinstance(data, str):
        data = data.encode("utf-8")
    params = [("path", path)]
    if mode is not None:
        params.append(("mode", f"{mode:04o}"))
    return Call("PUT", f"/api/sandboxes/{_id(sandbox_id)}/files", params=params, content=data)


def list_files(sandbox_id: Any, path: str) -> Call:
    return Call("GET", f"/api/sandboxes/{_id(sandbox_id)}/files/list", params=[("path", path)])


def delete_file(sandbox_id: Any, path: str) -> Call:
    return Call(
        "DELETE", f"/api/sandboxes/{_id(sandbox_id)}/files", params=[("path", path)], expect="none"
    )


def get_archive(sandbox_id: Any, path: str) -> Call:
    return Call(
        "GET", f"/api/sandboxes/{_id(sandbox_id)}/archive", params=[("path", path)], expect="bytes"
    )


def put_archive(sandbox_id: Any, path: str, data: bytes) -> Call:
    return Call(
        "PUT", f"/api/sandboxes/{_id(sandbox_id)}/archive", params=[("path", path)], content=data
    )


def check(sandbox_id: Any) -> Call:
    return Call("POST", f"/api/sandboxes/{_id(sandbox_id)}/check", wait=OPERATION)


def diff(sandbox_id: Any) -> Call:
    return Call("GET", f"/api/sandboxes/{_id(sandbox_id)}/diff")


def message(sandbox_id: Any, role: str, content: str) -> Call:
    return Call(
        "POST",
        f"/api/sandboxes/{_id(sandbox_id)}/messages",
        json={"role": role, "content": content},
        expect="none",
    )


def close(sandbox_id: Any, run_check: bool) -> Call:
    return Call(
        "POST",
        f"/api/sandboxes/{_id(sandbox_id)}/close",
        json={"check": bool(run_check)},
        wait=OPERATION if run_check else None,
    )


def delete_sandbox(sandbox_id: Any) -> Call:
    return Call("DELETE", f"/api/sandboxes/{_id(sandbox_id)}", expect="none")


def list_tasks() -> Call:
    return Call("GET", "/api/tasks")


def run_attempts(
    task: str, agent: str, n: int, command: str | None, callback_url: str | None
) -> Call:
    body = _compact({"agent": agent, "command": command, "n": int(n), "callback_url": callback_url})
    return Call("POST", f"/api/tasks/{_id(task)}/attempts", json=body)


def get_attempt(attempt_id: Any) -> Call:
    return Call("GET", f"/api/attempts/{_id(attempt_id)}")


def attempt_ids(attempts_or_ids: Attempt | int | Iterable[Attempt | int]) -> list[int]:
    if isinstance(attempts_or_ids, (Attempt, int, str)):
        attempts_or_ids = [attempts_or_ids]
    ids: list[int] = []
    for item in attempts_or_ids:
        value = item.id if isinstance(item, Attempt) else item
        if value is None:
            raise ValueError(f"{item!r} has no id")
        ids.append(int(value))
    return ids


def wait_attempts(ids: list[int], timeout: float | datetime.timedelta) -> Call:
    budget = seconds(timeout) or 0.0
    return Call(
        "POST", "/api/attempts/wait", json={"ids": ids, "timeout": _number(timeout)}, wait=budget
    )


def in_order(ids: list[int], attempts: list[Attempt]) -> list[Attempt]:
    """The attempts in the order their ids were asked for (the server's order otherwise)."""
    by_id = {attempt.id: attempt for attempt in attempts}
    if len(by_id) == len(attempts) and all(i in by_id for i in ids) and len(ids) == len(by_id):
        return [by_id[i] for i in ids]
    return attempts


# The exec stream: ndjson lines {"stream": "stdout", "text": "..."} then {"result": ExecResult}.


def print_output(stream: str, text: str) -> None:
    """The default `on_output` with `stream=True`: the command's output, live, on ours."""
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(text)
    out.flush()


def answered_whole(response: httpx.Response) -> bool:
    """Whether a streaming exec was answered as plain JSON instead of ndjson lines."""
    content_type = response.headers.get("content-type", "").lower()
    return "json" in content_type and "ndjson" not in content_type and "jsonl" not in content_type


class ExecStream:
    """Reads the lines of an exec stream, calling `on_output(stream, text)` for each output line
    and keeping the final result."""

    def __init__(self, on_output: OutputCallback | None) -> None:
        self.on_output = on_output or print_output
        self.result: ExecResult | None = None
        #: What an async `on_output` returned, for the async client to await (`take_pending`).
        self.pending: list[Any] = []

    def _emit(self, stream: str, text: str) -> None:
        returned = self.on_output(stream, text)
        if inspect.isawaitable(returned):
            self.pending.append(returned)

    def take_pending(self) -> list[Any]:
        pending, self.pending = self.pending, []
        return pending

    def feed(self, line: str | bytes) -> None:
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        line = line.strip()
        if not line:
            return
        try:
            item = json.loads(line)
        except ValueError:
            raise BoltzError(
                f"the exec stream sent a line that is not JSON: {line[:200]!r}"
            ) from None
        if not isinstance(item, dict):
            return
        if "result" in item:
            self.result = ExecResult.from_json(item["result"])
        elif "stream" in item:
            self._emit(str(item["stream"]), str(item.get("text") or ""))
        elif "code" in item or "detail" in item:
            raise make_error(
                item.get("status"), item.get("code"), str(item.get("detail") or "exec failed")
            )

    def whole(self, body: bytes) -> ExecResult:
        """The result of a server that answered a streaming request in one JSON piece: its
        output goes to `on_output` at once, stdout then stderr."""
        try:
            item = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise BoltzError(f"the exec answer is not JSON: {body[:200]!r}") from None
        if isinstance(item, dict) and isinstance(item.get("result"), dict):
            item = item["result"]
        self.result = ExecResult.from_json(item)
        for stream in ("stdout", "stderr"):
            text = getattr(self.result, stream)
            if text:
                self._emit(stream, text)
        return self.result

    def finish(self) -> ExecResult:
        if self.result is None:
            raise BoltzError("the exec stream ended without a result (the connection was cut?)")
        return self.result


# Helpers of the sandbox handles.


class SandboxBase:
    """What `Sandbox` and `AsyncSandbox` share: the server's description and its properties."""

    def __init__(self, info: SandboxInfo) -> None:
        self.info = info
        self._ended = False

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

    def _update(self, data: Any) -> SandboxInfo:
        info = SandboxInfo.from_json(data)
        if info.id is None:
            info.id = self.info.id
        self.info = info
        if info.state in ("closed", "deleted"):
            self._ended = True
        return info

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name or self.id} {self.state}>"


def upload_target(local: Path, path: str) -> str:
    """A file uploaded to a path ending in `/` keeps its own name inside that folder."""
    if path.endswith("/"):
        return path + local.name
    return path


def download_target(path: str, local_path: str | os.PathLike[str]) -> Path:
    """Where a downloaded file goes: `local_path`, or inside it when it is an existing folder."""
    target = Path(local_path)
    if target.is_dir():
        name = path.rstrip("/").rsplit("/", 1)[-1] or "download"
        target = target / name
    return target


def write_local(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def note_close_failure(body_error: BaseException, close_error: BaseException, name: str) -> None:
    """Record on the body's exception that closing the sandbox failed too (never raise it)."""
    logger.warning("closing sandbox %s failed: %r", name, close_error)
    add_note = getattr(body_error, "add_note", None)
    if add_note is not None:
        add_note(f"boltz: closing sandbox {name} also failed: {close_error!r}")


# The calls of RL pools (docs/POOLS.md).


def create_pool(
    task: str | None,
    tasks: Sequence[str] | None,
    size: int | None,
    labels: Mapping[str, str] | None,
    agent: str | None,
    name: str | None,
    max_steps: int | None,
    episode_seconds: float | datetime.timedelta | None,
) -> Call:
    body = _compact(
        {
            "task": task,
            "tasks": list(tasks) if tasks is not None else None,
            "size": size,
            "labels": dict(labels) if labels else None,
            "agent": agent,
            "name": name,
            "max_steps": max_steps,
            "episode_seconds": _number(episode_seconds),
        }
    )
    return Call("POST", "/api/pools", json=body)


def get_pool(pool_id: Any) -> Call:
    return Call("GET", f"/api/pools/{_id(pool_id)}")


def reset_pool(pool_id: Any, indices: Sequence[int] | None, wait: float) -> Call:
    body = {"indices": list(indices) if indices is not None else None, "wait": wait}
    # Setting up each new sandbox runs the task's setup: the server decides how long.
    return Call("POST", f"/api/pools/{_id(pool_id)}/reset", json=body, wait=OPERATION)


def step_pool(pool_id: Any, actions: list[Any], timeout: float | None) -> Call:
    body = _compact({"actions": actions, "timeout": timeout})
    body["actions"] = actions  # None entries are kept: those environments sit out
    return Call("POST", f"/api/pools/{_id(pool_id)}/step", json=body, wait=timeout or OPERATION)


def step_env(pool_id: Any, index: int, action: Any, timeout: float | None) -> Call:
    body = _compact({"action": action, "timeout": timeout})
    path = f"/api/pools/{_id(pool_id)}/envs/{int(index)}/step"
    return Call("POST", path, json=body, wait=timeout or OPERATION)


def close_pool(pool_id: Any) -> Call:
    return Call("POST", f"/api/pools/{_id(pool_id)}/close", json={}, wait=OPERATION)


# The calls of SWE-bench predictions evaluations (docs/API.md).


def create_evaluation(
    predictions: Any, dataset: Any, run_id: str | None, image: str | None
) -> Call:
    from boltz.evaluations import evaluation_input

    body = _compact(
        {
            "predictions": evaluation_input(predictions),
            "dataset": evaluation_input(dataset),
            "run_id": run_id,
            "image": image,
        }
    )
    # The server imports the dataset rows the predictions name before it answers.
    return Call("POST", "/api/evaluations", json=body, wait=OPERATION)


def get_evaluation(evaluation_id: Any) -> Call:
    return Call("GET", f"/api/evaluations/{_id(evaluation_id)}")
