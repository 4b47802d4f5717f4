"""What the sync and async SDK share below its calls: configuration, the steps a call is made of
(a `Call` to the server, a `Stream`ed exec, a `Sleep`, `Local` file work), `operation`, which
makes one described call both a method and a coroutine method, turning answers into results or
exceptions, and the exec stream reader. Nothing here does I/O: the transports
(boltz._transport) do each step.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from boltz._version import __version__
from boltz.errors import (
    BoltzError,
    BoltzFileNotFoundError,
    BoltzIsADirectoryError,
    BoltzPermissionError,
    ConnectionFailed,
    OperationTimeout,
    error_from_response,
    make_error,
)
from boltz.types import Attempt, ExecResult

if TYPE_CHECKING:
    from collections.abc import Coroutine

logger = logging.getLogger("boltz")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 60.0
DEFAULT_OPERATION_TIMEOUT = 3600.0

#: `Call.wait` for calls whose length the server decides (an exec without timeout, a check).
OPERATION = -1.0

OutputCallback = Callable[[str, str], Any]

R = TypeVar("R")
H = TypeVar("H")
P = ParamSpec("P")


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


def number(value: float | datetime.timedelta | None) -> int | float | None:
    """Seconds as the API takes them (a whole number as an int)."""
    value = seconds(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def compact(values: Mapping[str, Any]) -> dict[str, Any]:
    """A request body without the options left unset."""
    return {key: value for key, value in values.items() if value is not None}


def segment(value: Any) -> str:
    """An id as one segment of a path."""
    return quote(str(value), safe="")


# The steps of a call.


@dataclass
class Call:
    """One HTTP request of the API, and what its answer becomes.

    `wait` is how long the operation itself may take on the server, added to the client's timeout
    for reading the answer (`OPERATION`: the client's operation timeout). `parse` turns the
    answer's payload (JSON, bytes, or None) into the call's result. `filename` is the sandbox
    path a file error names (`FileNotFoundError.filename` and the like).
    """

    method: str
    path: str
    params: list[tuple[str, str]] | None = None
    json: Any = None
    content: bytes | None = None
    wait: float | None = None
    expect: str = "json"  # "json", "bytes" or "none"
    parse: Callable[[Any], Any] | None = None
    filename: str | None = None


@dataclass
class Stream:
    """An exec whose output is read while it runs: `on_output(stream, text)` per piece (may
    be a coroutine function for the async client); the step's result is the `ExecResult`."""

    call: Call
    on_output: OutputCallback | None


@dataclass
class Sleep:
    """A pause between two calls (polling)."""

    seconds: float


@dataclass
class Local:
    """Work on local files (packing, unpacking, reading, writing): done in place by the sync
    transport, in a thread by the async one, so an event loop never waits on the disk."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()


Step = Call | Stream | Sleep | Local

#: A call of the SDK as the transports run it: a generator that yields the steps it needs (each
#: answered with the step's result, or an exception thrown in at the `yield`) and returns the
#: call's result.
Plan = Generator[Step, Any, R]


# One description, two forms: the handles and their methods.


class Synchronous:
    """A handle (client, sandbox, files, pool) whose operations are plain methods, run over
    `httpx.Client`. Its `_transport` runs a plan and returns the result."""


class Asynchronous:
    """A handle whose operations are coroutine methods, run over `httpx.AsyncClient`. Its
    `_transport` runs a plan as a coroutine."""


def _result_annotation(plan: Callable[..., Any]) -> Any:
    """What a plan's return annotation says the call gives: X of `Plan[X]`."""
    annotation = inspect.signature(plan).return_annotation
    if isinstance(annotation, str):
        found = re.fullmatch(r"Plan\[(.*)\]", annotation)
        if found:
            return found.group(1)
    return annotation


def _shaped_like(method: Callable[..., Any], plan: Callable[..., Any], result: Any) -> Any:
    """`method` with the plan's name, docstring and signature, giving `result`."""
    functools.update_wrapper(method, plan)
    method.__annotations__ = {**plan.__annotations__, "return": result}
    method.__signature__ = inspect.signature(plan).replace(  # type: ignore[attr-defined]
        return_annotation=result
    )
    return method


class operation(Generic[H, P, R]):
    """A call of the SDK described once, as a plan: a plain method of the `Synchronous` handles
    and a coroutine method of the `Asynchronous` ones, both with the plan's name, signature and
    docstring.

        @operation
        def check(self) -> Plan[CheckResult]:
            return (yield Call("POST", ..., parse=CheckResult.from_json))
    """

    def __init__(self, plan: Callable[Concatenate[H, P], Plan[R]]) -> None:
        result = _result_annotation(plan)

        def sync_method(handle: Any, *args: Any, **kwargs: Any) -> Any:
            return handle._transport.run(plan(handle, *args, **kwargs))

        self.sync_method = _shaped_like(sync_method, plan, result)
        self.async_method = _shaped_like(self.async_form(plan), plan, self.async_result(result))

    @staticmethod
    def async_form(plan: Callable[..., Plan[Any]]) -> Callable[..., Any]:
        async def async_method(handle: Any, *args: Any, **kwargs: Any) -> Any:
            return await handle._transport.run(plan(handle, *args, **kwargs))

        return async_method

    @staticmethod
    def async_result(result: Any) -> Any:
        return result

    @overload
    def __get__(self, handle: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(
        self, handle: Asynchronous, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __get__(self, handle: object, owner: type | None = None) -> Callable[P, R]: ...
    def __get__(self, handle: Any, owner: type | None = None) -> Any:
        owner = owner if owner is not None else type(handle)
        method = self.async_method if issubclass(owner, Asynchronous) else self.sync_method
        return method if handle is None else method.__get__(handle, owner)


# Answers.

FILE_ERRORS = (BoltzFileNotFoundError, BoltzIsADirectoryError, BoltzPermissionError)


class Settings:
    """Connection settings and answer handling, shared by both transports."""

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

    def client_options(self) -> dict[str, Any]:
        """The options of the httpx client (sync or async) that sends the calls."""
        return {"base_url": self.url, "headers": self.headers(), "timeout": self.timeout}

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

    def refusal(self, response: httpx.Response, body: bytes, call: Call) -> BoltzError:
        """The exception for an answer that is not a success (status 300 and up)."""
        if response.status_code < 400:
            location = response.headers.get("location", "")
            return BoltzError(
                f"the server answered {response.status_code} redirecting to {location!r}: "
                f"is {self.url} the address of the Boltz server?",
                status=response.status_code,
            )
        hint = ""
        if response.status_code == 401 and not self.token:
            hint = (
                "no API token was given: set BOLTZ_TOKEN or pass token= "
                "(create one with `python manage.py create_token USER`)"
            )
        error = error_from_response(
            response.status_code,
            body,
            response.headers,
            reason=response.reason_phrase,
            hint=hint,
        )
        if call.filename is not None and isinstance(error, FILE_ERRORS):
            error.filename = call.filename
        return error

    def result(self, response: httpx.Response, call: Call) -> Any:
        """The call's result from its answer, or the exception for an error answer (raised)."""
        if response.status_code >= 300:
            raise self.refusal(response, response.content, call)
        payload = self.payload(response, call)
        return call.parse(payload) if call.parse is not None else payload

    def payload(self, response: httpx.Response, call: Call) -> Any:
        if call.expect == "bytes":
            return response.content
        if call.expect == "none" or response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            snippet = response.text[:200]
            raise BoltzError(
                f"the server at {self.url} answered {call.method} {call.path} with something "
                f"that is not JSON: {snippet!r}",
                status=response.status_code,
            ) from None


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
        except (ValueError, RecursionError):
            raise BoltzError(
                f"the exec stream sent a line that is not JSON: {line[:200]!r}"
            ) from None
        if not isinstance(item, dict):
            return
        if "result" in item:
            self.result = ExecResult.from_json(item["result"])
        elif "stream" in item:
            self._emit(str(item["stream"]), str(item.get("text") or ""))
        elif isinstance(item.get("error"), dict) or "code" in item or "detail" in item:
            # The server's refusal once the stream had begun: {"error": {"detail", "code",
            # "status"}}, raised as the same typed error a plain call's answer gives.
            error = item["error"] if isinstance(item.get("error"), dict) else item
            status, code = error.get("status"), error.get("code")
            raise make_error(
                status if isinstance(status, int) and not isinstance(status, bool) else None,
                code if isinstance(code, str) else None,
                str(error.get("detail") or "exec failed"),
            )

    def whole(self, body: bytes) -> ExecResult:
        """The result of a server that answered a streaming request in one JSON piece: its
        output goes to `on_output` at once, stdout then stderr."""
        try:
            item = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError):
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


# Helpers of the calls.


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


def in_order(ids: list[int], attempts: list[Attempt]) -> list[Attempt]:
    """The attempts in the order their ids were asked for (the server's order otherwise)."""
    by_id = {attempt.id: attempt for attempt in attempts}
    if len(by_id) == len(attempts) and all(i in by_id for i in ids) and len(ids) == len(by_id):
        return [by_id[i] for i in ids]
    return attempts


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
