"""The synchronous client: `Client`, `Sandbox` and `Files`. Their calls are described once in
boltz._calls and run here over httpx.Client (boltz.aio runs the same over httpx.AsyncClient)."""

from __future__ import annotations

from typing import Any

import httpx

from boltz._calls import ClientCalls, FilesCalls, SandboxCalls
from boltz._core import Synchronous
from boltz._transport import SyncTransport
from boltz.pools import Pool
from boltz.types import SandboxInfo

__all__ = ["Client", "Files", "Sandbox"]


class Files(Synchronous, FilesCalls):
    """The files of a sandbox (`sandbox.files`). Relative paths are inside the task's working
    folder (/workspace, or a Harbor task's WORKDIR)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox


class Sandbox(Synchronous, SandboxCalls):
    """A live sandbox. As a context manager it closes the sandbox (without a check) on exit;
    a failure to close never hides an exception raised inside the block."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        super().__init__(info)
        self.client = client
        self.files = Files(self)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._leave(exc)


class Client(Synchronous, ClientCalls[httpx.BaseTransport, Sandbox, Pool]):
    """A connection to a Boltz server.

    `url` defaults to BOLTZ_URL (else http://127.0.0.1:8000), `token` to BOLTZ_TOKEN. `timeout`
    bounds an ordinary request; calls that run something (exec, check, close with a check,
    starting a sandbox, waiting for attempts) wait their own limit on top of it, or
    `operation_timeout` when they have none. `transport` is handed to httpx (tests pass an
    `httpx.MockTransport`). Use it as a context manager, or call `close()`.
    """

    _Transport = SyncTransport
    _Sandbox = Sandbox
    _Pool = Pool

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
