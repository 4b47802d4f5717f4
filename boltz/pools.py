"""RL pools: many environments stepped together from a training loop (`Pool`, and `AsyncPool`
for asyncio trainers). Each environment's episode is a Boltz sandbox of its task; every step
lands on that sandbox's timeline, so each episode is an attempt a reviewer can open.

    with client.pool(task="fix-add", size=8) as pool:
        observations = pool.reset()
        results = pool.step([Action(run="pytest -q")] * 8)   # in the order of the actions

The streaming form, for trainers that do not step in lockstep: `submit(index, action)` then
`results(timeout)`, which yields each result as it is done.

The pool's calls (reset, step, step_one, refresh) are described once in boltz._calls; here are
what each side does its own way: running submitted steps concurrently (threads for `Pool`,
tasks for `AsyncPool`) and finishing them before `close`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from boltz._calls import DEFAULT_RESET_WAIT, PoolCalls
from boltz._core import Asynchronous, Synchronous
from boltz.errors import OperationTimeout
from boltz.types import PoolInfo, StepResult

if TYPE_CHECKING:
    from boltz.aio import AsyncClient
    from boltz.client import Client

__all__ = ["DEFAULT_RESET_WAIT", "AsyncPool", "Pool"]


class Pool(Synchronous, PoolCalls):
    """A pool of environments (see the module's docstring). Use it as a context manager, or
    call `close()`: every episode's sandbox is then closed and kept for review."""

    def __init__(self, client: Client, info: PoolInfo) -> None:
        super().__init__(info)
        self._client = client
        self._executor: ThreadPoolExecutor | None = None
        self._done: queue.Queue[Future] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()

    def submit(self, index: int, action: Any, *, timeout: float | None = None) -> None:
        """Start one environment's step and return at once; `results()` yields it when done."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(max(self.size, 1), 64), thread_name_prefix="boltz-pool"
                )
            self._pending += 1
        future = self._executor.submit(self.step_one, index, action, timeout=timeout)
        future.add_done_callback(self._done.put)

    def results(self, timeout: float) -> Iterator[StepResult]:
        """The submitted steps' results in the order they finish (each tagged with
        `info["index"]` and `info["step"]`), until none is pending; `OperationTimeout` if
        `timeout` seconds pass first. Steps submitted while iterating are waited for too."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._pending == 0:
                    return
            try:
                future = self._done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise OperationTimeout(
                    f"{self._pending} submitted step(s) of pool {self.id} not done within "
                    f"{timeout:g}s"
                ) from None
            with self._lock:
                self._pending -= 1
            yield future.result()

    def close(self) -> PoolInfo:
        """Close the pool once its submitted steps are done: every episode's sandbox is closed
        and kept for review."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        return self._close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncPool(Asynchronous, PoolCalls):
    """`Pool` for asyncio trainers: the same methods, as coroutines; `results()` is an async
    iterator."""

    def __init__(self, client: AsyncClient, info: PoolInfo) -> None:
        super().__init__(info)
        self._client = client
        self._done: asyncio.Queue[asyncio.Task] = asyncio.Queue()
        self._pending: set[asyncio.Task] = set()

    async def submit(self, index: int, action: Any, *, timeout: float | None = None) -> None:
        task = asyncio.ensure_future(self.step_one(index, action, timeout=timeout))
        self._pending.add(task)
        task.add_done_callback(self._done.put_nowait)

    async def results(self, timeout: float) -> AsyncIterator[StepResult]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._pending:
            try:
                task = await asyncio.wait_for(
                    self._done.get(), timeout=max(0.0, deadline - loop.time())
                )
            except asyncio.TimeoutError:
                raise OperationTimeout(
                    f"{len(self._pending)} submitted step(s) of pool {self.id} not done within "
                    f"{timeout:g}s"
                ) from None
            self._pending.discard(task)
            yield task.result()

    async def close(self) -> PoolInfo:
        """`Pool.close`: the submitted steps finish first."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
            self._pending.clear()
        return await self._close()

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
