"""The exceptions the SDK raises.

Every one is a `BoltzError` (with `status`, `code` and `detail`). An error the server sends is
mapped from its status and `code` (see docs/API.md, "Errors"); the file errors are also the
built-in `FileNotFoundError`, `IsADirectoryError` and `PermissionError`, and a client-side timeout
or an unreachable server are also the built-in `TimeoutError` and `ConnectionError`, so ordinary
`except` clauses work.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any

__all__ = [
    "AuthError",
    "BoltzError",
    "BoltzFileNotFoundError",
    "BoltzIsADirectoryError",
    "BoltzPermissionError",
    "CapacityError",
    "ConnectionFailed",
    "FileTooLarge",
    "InfrastructureError",
    "InvalidRequest",
    "NotFound",
    "OperationTimeout",
    "SandboxClosed",
    "SandboxGone",
    "UnsafeArchive",
    "error_from_response",
]


class BoltzError(Exception):
    """Base of every SDK error.

    `status` is the HTTP status (None when no answer came back), `code` the API's error code
    (`"not_found"`, `"capacity"`, ...), `detail` the server's explanation.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.detail = detail if detail is not None else message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, status={self.status!r}, code={self.code!r})"
        )


class InvalidRequest(BoltzError):
    """400 / 422 `invalid`: a bad request; the detail names the field."""


class AuthError(BoltzError):
    """401 `unauthorized`: no token, or not a valid one."""


class NotFound(BoltzError):
    """404 `not_found`: no such task, sandbox or attempt (or not yours)."""


class BoltzFileNotFoundError(BoltzError, FileNotFoundError):
    """404 `file_not_found`: the path does not exist in the sandbox."""


class BoltzIsADirectoryError(BoltzError, IsADirectoryError):
    """400 `is_a_directory`: a folder was read as a file."""


class BoltzPermissionError(BoltzError, PermissionError):
    """403 `permission_denied`: the sandbox user may not read or write that path."""


class SandboxClosed(BoltzError):
    """409 `closed`: the sandbox is closed (stopped and kept for review)."""


class SandboxGone(BoltzError):
    """410 `gone`: the sandbox was deleted."""


class FileTooLarge(BoltzError):
    """413 `too_large`: a file or archive over the server's BOLTZ_MAX_FILE_BYTES."""


class CapacityError(BoltzError):
    """429 `capacity`: no host had room in time. `retry_after` is seconds to wait (or None)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class InfrastructureError(BoltzError):
    """502 / 503 `infrastructure`: Docker or the sandbox's host failed (not the agent's doing)."""


class OperationTimeout(BoltzError, TimeoutError):
    """504 `timeout`, or no answer within the client's timeout."""


class ConnectionFailed(BoltzError, ConnectionError):
    """The server could not be reached at all; the message names the URL."""


class UnsafeArchive(BoltzError):
    """A downloaded archive holds a member that would land outside the target folder."""


_BY_CODE: dict[str, type[BoltzError]] = {
    "invalid": InvalidRequest,
    "unauthorized": AuthError,
    "not_found": NotFound,
    "file_not_found": BoltzFileNotFoundError,
    "is_a_directory": BoltzIsADirectoryError,
    "permission_denied": BoltzPermissionError,
    "closed": SandboxClosed,
    "gone": SandboxGone,
    "too_large": FileTooLarge,
    "capacity": CapacityError,
    "infrastructure": InfrastructureError,
    "timeout": OperationTimeout,
}

_BY_STATUS: dict[int, type[BoltzError]] = {
    400: InvalidRequest,
    401: AuthError,
    403: BoltzPermissionError,
    404: NotFound,
    409: SandboxClosed,
    410: SandboxGone,
    413: FileTooLarge,
    422: InvalidRequest,
    429: CapacityError,
    502: InfrastructureError,
    503: InfrastructureError,
    504: OperationTimeout,
}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (a number of seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def error_class(status: int | None, code: str | None) -> type[BoltzError]:
    """The exception class for an error answer: by its code first, then by its status."""
    if code and code in _BY_CODE:
        return _BY_CODE[code]
    if status is not None and status in _BY_STATUS:
        return _BY_STATUS[status]
    return BoltzError


def make_error(
    status: int | None,
    code: str | None,
    detail: str,
    *,
    retry_after: float | None = None,
    hint: str = "",
) -> BoltzError:
    cls = error_class(status, code)
    label = " ".join(str(part) for part in (status, code) if part)
    message = f"{detail} ({label})" if label else detail
    if hint:
        message = f"{message}: {hint}"
    kwargs: dict[str, Any] = {"status": status, "code": code, "detail": detail}
    if issubclass(cls, CapacityError):
        kwargs["retry_after"] = retry_after
    return cls(message, **kwargs)


def error_from_response(
    status: int,
    body: bytes,
    headers: Any = None,
    *,
    reason: str = "",
    hint: str = "",
) -> BoltzError:
    """Build the exception for an HTTP error answer (JSON `{"detail", "code"}` or anything else)."""
    code: str | None = None
    detail = ""
    try:
        payload = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, RecursionError):  # also bytes not UTF-8, and nesting past the parser's
        payload = None
    if isinstance(payload, dict):
        raw_code = payload.get("code")
        code = str(raw_code) if raw_code else None
        raw_detail = payload.get("detail")
        if isinstance(raw_detail, str):
            detail = raw_detail
        elif raw_detail is not None:
            detail = json.dumps(raw_detail)
    if not detail:
        text = body.decode("utf-8", errors="replace").strip()
        detail = text[:300] if text and not text.lstrip().startswith("<") else ""
    if not detail:
        detail = reason or f"HTTP {status}"
    retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
    return make_error(status, code, detail, retry_after=retry_after, hint=hint)
