"""RL pools: many environments stepped together from a training loop (`Pool`, and `AsyncPool`
for asyncio trainers). Each environment's episode is a Boltz sandbox of its task; every step
lands on that sandbox's timeline, so each episode is an attempt a reviewer can open.

    with client.pool(task="fix-add", size=8) as pool:
        observations = pool.reset()
        results = pool.step([Action(run="pytest -q")] * 8)   # in the order of the actions

The streaming form, for trainers that do not step in lockstep: `submit(index, action)` then
`results(timeout)`, which yields each result as it is done.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from boltz import _core
from boltz.errors import OperationTimeout
from boltz.pool_types import Observation, PoolInfo, StepResult, action_json, reset_observation

if TYPE_CHECKING:
    from boltz.aio import AsyncClient
    from boltz.client import Client

__all__ = ["AsyncPool", "Pool"]

DEFAULT_RESET_WAIT = 60.0


class _PoolBase:
    def __init__(self, info: PoolInfo) -> None:
        self.info = info

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

    def _actions(self, actions: Sequence[Any]) -> list[Any]:
        return [action_json(a) for a in actions]


class Pool(_PoolBase):
    """A pool of environments (see the module's docstring). Use it as a context manager, or
    call `close()`: every episode's sandbox is then closed and kept for review."""

    def __init__(self, client: Client, info: PoolInfo) -> None:
        super().__init__(info)
        self._client = client
        self._executor: ThreadPoolExecutor | None = None
        self._done: queue.Queue[Future] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()

    def reset(
        self, indices: Sequence[int] | None = None, *, wait: float = DEFAULT_RESET_WAIT
    ) -> list[Observation]:
        """Fresh sandboxes for the environments at `indices` (all by default); their first
        observations, in the order of `indices`. Over capacity each waits for room up to
        `wait` seconds; one that got none has `error` set and `raw["info"]["masked"]`."""
        data = self._client._request(_core.reset_pool(self.id, indices, wait))
        return [reset_observation(item) for item in data or []]

    def step(self, actions: Sequence[Any], *, timeout: float | None = None) -> list[StepResult]:
        """Exactly one action per environment (an `Action`, a command string, a dict, or None
        to sit one out); one `StepResult` per environment, in the same order. `timeout` bounds
        the wait for every environment (by default, what its action may take)."""
        data = self._client._request(_core.step_pool(self.id, self._actions(actions), timeout))
        return [StepResult.from_json(item) for item in data or []]

    def step_one(self, index: int, action: Any, *, timeout: float | None = None) -> StepResult:
        """One environment's step on its own."""
        call = _core.step_env(self.id, index, action_json(action), timeout)
        return StepResult.from_json(self._client._request(call))

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

    def refresh(self) -> PoolInfo:
        """The pool as it is now: environments, steps taken, masked steps, group rewards."""
        self.info = PoolInfo.from_json(self._client._request(_core.get_pool(self.id)))
        return self.info

    def close(self) -> PoolInfo:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.info = PoolInfo.from_json(self._client._request(_core.close_pool(self.id)))
        return self.info

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncPool(_PoolBase):
    """`Pool` for asyncio trainers: the same methods, as coroutines; `results()` is an async
    iterator."""

    def __init__(self, client: AsyncClient, info: PoolInfo) -> None:
        super().__init__(info)
        self._client = client
        self._done: asyncio.Queue[asyncio.Task] = asyncio.Queue()
        self._pending: set[asyncio.Task] = set()

    async def reset(
        self, indices: Sequence[int] | None = None, *, wait: float = DEFAULT_RESET_WAIT
    ) -> list[Observation]:
        data = await self._client._request(_core.reset_pool(self.id, indices, wait))
        return [reset_observation(item) for item in data or []]

    async def step(
        self, actions: Sequence[Any], *, timeout: float | None = None
    ) -> list[StepResult]:
        call = _core.step_pool(self.id, self._actions(actions), timeout)
        data = await self._client._request(call)
        return [StepResult.from_json(item) for item in data or []]

    async def step_one(
        self, index: int, action: Any, *, timeout: float | None = None
    ) -> StepResult:
        call = _core.step_env(self.id, index, action_json(action), timeout)
        return StepResult.from_json(await self._client._request(call))

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

    async def refresh(self) -> PoolInfo:
        self.info = PoolInfo.from_json(await self._client._request(_core.get_pool(self.id)))
        return self.info

    async def close(self) -> PoolInfo:
        if self._pending:  # submitted steps finish first, as in Pool.close
            await asyncio.gather(*self._pending, return_exceptions=True)
            self._pending.clear()
        self.info = PoolInfo.from_json(await self._client._request(_core.close_pool(self.id)))
        return self.info

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
