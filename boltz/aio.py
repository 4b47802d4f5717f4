"""The asynchronous client: `AsyncClient`, `AsyncSandbox` and `AsyncFiles`, the same surface as
the synchronous one with `async` methods: the calls described once in boltz._calls, run here
over httpx.AsyncClient.

    async with AsyncClient() as client:
        async with client.sandbox(task="fix-add") as sb:
            result = await sb.exec("python3 -m pytest -q tests")

`client.sandbox(...)` can also be awaited: `sb = await client.sandbox(task="fix-add")`.
"""

from __future__ import annotations

from typing import Any

import httpx

from boltz._calls import ClientCalls, FilesCalls, SandboxCalls
from boltz._core import Asynchronous
from boltz._transport import AsyncTransport
from boltz.pools import AsyncPool
from boltz.types import SandboxInfo

__all__ = ["AsyncClient", "AsyncFiles", "AsyncSandbox"]


class AsyncFiles(Asynchronous, FilesCalls):
    """The files of a sandbox (`sandbox.files`), async. See `boltz.Files`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox


class AsyncSandbox(Asynchronous, SandboxCalls):
    """A live sandbox (async). As an async context manager it closes the sandbox on exit; a
    failure to close never hides an exception raised inside the block."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        super().__init__(info)
        self.client = client
        self.files = AsyncFiles(self)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        await self._leave(exc)


class AsyncClient(Asynchronous, ClientCalls[httpx.AsyncBaseTransport, AsyncSandbox, AsyncPool]):
    """A connection to a Boltz server for asyncio code; see `boltz.Client` for the arguments.

    Use it as an async context manager, or `await client.close()`.
    """

    _Transport = AsyncTransport
    _Sandbox = AsyncSandbox
    _Pool = AsyncPool

    async def close(self) -> None:
        await self._transport.close()

    aclose = close

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
