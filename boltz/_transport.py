"""The SDK's two transports. Each runs the plans of boltz._calls, doing their steps: a request,
an exec stream, a pause, local file work. `SyncTransport` over httpx.Client, `AsyncTransport`
over httpx.AsyncClient; everything else about a call is decided in boltz._calls and
boltz._core, once for both.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

import httpx

from boltz._core import Call, ExecStream, Plan, Settings, Sleep, Step, Stream, answered_whole

R = TypeVar("R")


class SyncTransport:
    def __init__(self, settings: Settings, transport: httpx.BaseTransport | None) -> None:
        self.settings = settings
        self.http = httpx.Client(**settings.client_options(), transport=transport)

    def run(self, plan: Plan[R]) -> R:
        """The plan's result: each step it yields done and answered (its exception thrown in)."""
        send, answer = plan.send, None
        while True:
            try:
                step = send(answer)
            except StopIteration as done:
                return done.value
            try:
                send, answer = plan.send, self.do(step)
            except Exception as exc:
                send, answer = plan.throw, exc

    def do(self, step: Step) -> Any:
        if isinstance(step, Call):
            return self.request(step)
        if isinstance(step, Stream):
            return self.stream(step)
        if isinstance(step, Sleep):
            return time.sleep(step.seconds)
        return step.function(*step.args)

    def request(self, call: Call) -> Any:
        settings = self.settings
        try:
            response = self.http.request(call.method, call.path, **settings.request_kwargs(call))
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return settings.result(response, call)

    def stream(self, step: Stream) -> Any:
        settings, call = self.settings, step.call
        reader = ExecStream(step.on_output)
        try:
            with self.http.stream(
                call.method, call.path, **settings.request_kwargs(call)
            ) as response:
                if response.status_code >= 300:
                    raise settings.refusal(response, response.read(), call)
                if answered_whole(response):
                    return reader.whole(response.read())
                for line in response.iter_lines():
                    reader.feed(line)
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return reader.finish()

    def close(self) -> None:
        self.http.close()


class AsyncTransport:
    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None) -> None:
        self.settings = settings
        self.http = httpx.AsyncClient(**settings.client_options(), transport=transport)

    async def run(self, plan: Plan[R]) -> R:
        """The plan's result: each step it yields done and answered (its exception thrown in)."""
        send, answer = plan.send, None
        while True:
            try:
                step = send(answer)
            except StopIteration as done:
                return done.value
            try:
                send, answer = plan.send, await self.do(step)
            except Exception as exc:
                send, answer = plan.throw, exc

    async def do(self, step: Step) -> Any:
        if isinstance(step, Call):
            return await self.request(step)
        if isinstance(step, Stream):
            return await self.stream(step)
        if isinstance(step, Sleep):
            return await asyncio.sleep(step.seconds)
        return await asyncio.to_thread(step.function, *step.args)

    async def request(self, call: Call) -> Any:
        settings = self.settings
        try:
            response = await self.http.request(
                call.method, call.path, **settings.request_kwargs(call)
            )
        except httpx.HTTPError as exc:
            raise settings.transport_error(exc, call) from exc
        return settings.result(response, call)

    async def stream(self, step: Stream) -> Any:
        settings, call = self.settings, step.call
        reader = ExecStream(step.on_output)
        try:
            async with self.http.stream(
                call.method, call.path, **settings.request_kwargs(call)
            ) as response:
                if response.status_code >= 300:
                    raise settings.refusal(response, await response.aread(), call)
                if answered_whole(response):
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

    async def close(self) -> None:
        await self.http.aclose()
