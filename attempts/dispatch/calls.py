"""Operation calls: the web process asks the worker of the host that owns a live sandbox to do
one operation (exec, a file, diff, check, a pool step) and waits for the answer.

A call is a request/answer pair in Redis, not a Celery task: the caller is always waiting with
a deadline, so nothing needs to survive a restart, and Celery's publish, result store and
result subscription cost more than the operation they carry (about 4 ms of a 5 ms round trip).

- The caller pushes {id, attempt, op, args, reply, deadline} onto the host's request list and
  blocks on its own reply list, at most until the deadline. `op` and `args` are a typed
  request of protocol.py in its wire form; the answer is its typed answer, or a refusal
  (errors.py), which `Call.get` raises.
- The host's operations worker runs `BOLTZ_OPS_CONCURRENCY` server threads; each pops a
  request, skips it if its caller has already given up, does it and pushes the answer onto
  the reply list, which expires soon after: an answer nobody waits for does not stay.
- Several calls can be waited on together (`first_done`): a pool step fans out to many
  sandboxes and collects the answers in the order they come.

Imported by the web process: it must not import Docker or the runner (the worker hands
`serve` the function that does the operations).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import redis
from django.conf import settings
from django.db import connections

from attempts.dispatch.errors import InternalError, Refusal
from attempts.dispatch.protocol import Answer, Request, answer_type, request_from_wire

log = logging.getLogger(__name__)

# Blocking reads are cut into slices this long, so a socket timeout never cuts one short and a
# stopping server notices within a slice.
SLICE_SECONDS = 2.0
REPLY_TTL_SECONDS = 120
REQUESTS_TTL_SECONDS = 3600  # a dead host's unread requests go after an hour


class CallTimeout(Exception):
    """The worker did not answer within the caller's time."""


class ChannelDown(Exception):
    """Redis could not be reached to send a call or read its answer."""


_redis: dict[bool, redis.Redis] = {}
_redis_lock = threading.Lock()


def _client(*, blocking: bool = False) -> redis.Redis:
    """The Redis client of this process. A command that does not answer within
    BOLTZ_REDIS_TIMEOUT (a Redis that accepts connections and never answers) raises, so a caller
    hears ChannelDown within seconds; a blocking read (`blocking`) waits a slice longer."""
    with _redis_lock:
        if blocking not in _redis:
            timeout = settings.BOLTZ_REDIS_TIMEOUT
            _redis[blocking] = redis.Redis.from_url(
                settings.BOLTZ_REDIS_URL,
                socket_timeout=timeout + (SLICE_SECONDS if blocking else 0),
                socket_connect_timeout=timeout,
                health_check_interval=30,
            )
        return _redis[blocking]


def ping_redis() -> None:
    """Does Redis answer? ChannelDown if it does not, within BOLTZ_REDIS_TIMEOUT."""
    try:
        _client().ping()
    except redis.RedisError as exc:
        raise ChannelDown(f"Redis: {exc}") from exc


def requests_key(host: str) -> str:
    return f"{settings.BOLTZ_QUEUE}.opcalls.{host}"


class Call:
    """One operation sent to a host; `get` waits for its answer."""

    def __init__(self, reply: str, deadline: float, answer: type[Answer]):
        self.reply = reply
        self.deadline = deadline  # time.time() past which the worker will not start it
        self.answer_type = answer
        self._answer: dict | None = None  # its wire form, once it came
        self.queued: float | None = None  # seconds it waited for a free server thread

    def done(self) -> bool:
        """Has the answer come? (Never blocks.)"""
        if self._answer is None:
            try:
                raw = _client().lpop(self.reply)
            except redis.RedisError as exc:
                raise ChannelDown(f"Redis: {exc}") from exc
            if raw is not None:
                self._took(raw)
        return self._answer is not None

    def _took(self, raw: bytes) -> None:
        envelope = json.loads(raw)
        self._answer, self.queued = envelope["answer"], envelope.get("queued")

    def get(self, timeout: float) -> Answer:
        """The answer; the Refusal the worker answered instead, or CallTimeout if none comes
        within `timeout` seconds."""
        if self._answer is None:
            done = first_done([self], timeout)
            if done is None:
                raise CallTimeout(f"no answer within {timeout:g}s")
        if "error" in self._answer:
            raise Refusal.from_wire(self._answer["error"])
        return self.answer_type.from_wire(self._answer)


def send(host: str, attempt_id: int, request: Request, *, timeout: float) -> Call:
    """Send an operation to the worker of `host`; the worker starts it only within `timeout`
    seconds from now (after that its caller has given up)."""
    return send_many([(host, attempt_id, request, timeout)])[0]


def send_many(requests: list[tuple[str, int, Request, float]]) -> list[Call]:
    """Send several operations at once, each (host, attempt id, request, timeout), in one
    round trip to Redis; their Calls in the same order."""
    calls, pipe = [], _client().pipeline(transaction=False)
    for host, attempt_id, request, timeout in requests:
        call_id = uuid.uuid4().hex
        reply = f"{settings.BOLTZ_QUEUE}.opreply.{call_id}"
        deadline = time.time() + timeout
        message = {
            "id": call_id,
            "attempt": attempt_id,
            "op": request.op,
            "args": request.to_wire(),
            "reply": reply,
            "deadline": deadline,
            "sent": time.time(),
        }
        key = requests_key(host)
        pipe.lpush(key, json.dumps(message))
        pipe.expire(key, REQUESTS_TTL_SECONDS)
        calls.append(Call(reply, deadline, answer_type(request)))
    try:
        pipe.execute()
    except redis.RedisError as exc:
        raise ChannelDown(f"Redis: {exc}") from exc
    return calls


def call(host: str, attempt_id: int, request: Request, *, timeout: float) -> Answer:
    """Run an operation on the worker of `host` and wait for its answer, at most `timeout`
    seconds (CallTimeout past that); the Refusal it answered is raised."""
    return send(host, attempt_id, request, timeout=timeout).get(timeout)


def first_done(calls: Iterable[Call], timeout: float) -> Call | None:
    """The first of `calls` to have its answer, waiting at most `timeout` seconds; None if
    none answered in time. A call already answered is returned at once."""
    calls = list(calls)
    for c in calls:
        if c._answer is not None:
            return c
    by_reply = {c.reply: c for c in calls}
    end = time.monotonic() + max(timeout, 0.0)
    while True:
        left = end - time.monotonic()
        # BLPOP's 0 means "forever": never send it; a finished wait makes one last quick look.
        wait = min(max(left, 0.001), SLICE_SECONDS)
        try:
            got = _client(blocking=True).blpop(list(by_reply), timeout=wait)
        except redis.RedisError as exc:
            raise ChannelDown(f"Redis: {exc}") from exc
        if got is not None:
            done = by_reply[got[0].decode()]
            done._took(got[1])
            return done
        if left <= 0:
            return None


# --- the worker's side -------------------------------------------------------------------------
Handler = Callable[[int, Request], Answer]


class Server:
    """Threads that serve a host's operation calls with `handler(attempt_id, request)`, which
    answers or raises a Refusal."""

    def __init__(self, host: str, handler: Handler, threads: int):
        self.host, self.handler, self.count = host, handler, threads
        self.stopping = threading.Event()
        self.redis_down = threading.Event()  # said once when it goes, once when it is back
        self.threads: list[threading.Thread] = []

    def start(self) -> Server:
        for i in range(self.count):
            thread = threading.Thread(target=self._serve, name=f"boltz-opcalls-{i}", daemon=True)
            thread.start()
            self.threads.append(thread)
        log.info("serving operation calls for host %s with %d threads", self.host, self.count)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Take no new call; wait up to `timeout` seconds for the ones being done."""
        self.stopping.set()
        end = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))

    def _serve(self) -> None:
        key = requests_key(self.host)
        while not self.stopping.is_set():
            try:
                got = _client(blocking=True).brpop([key], timeout=SLICE_SECONDS)
            except redis.RedisError as exc:  # Redis down: tried again every second
                if not self.redis_down.is_set():
                    self.redis_down.set()
                    log.warning("reading operation calls of host %s failed: %s", self.host, exc)
                self.stopping.wait(1.0)
                continue
            if self.redis_down.is_set():
                self.redis_down.clear()
                log.warning("operation calls of host %s are read again", self.host)
            if got is not None:
                self.answer(json.loads(got[1]))

    def answer(self, message: dict) -> None:
        started = time.time()
        if started > message["deadline"]:
            log.warning(
                "skipped %s on sandbox %s: its caller gave up", message["op"], message["attempt"]
            )
            return
        try:
            request = request_from_wire(message["op"], message["args"])
            answered = self.handler(message["attempt"], request)
            if type(answered) is not answer_type(request):
                raise TypeError(f"{request.op} answered with {type(answered).__name__}")
            answer = answered.to_wire()
        except Refusal as exc:
            answer = {"error": exc.to_wire()}
        except Exception as exc:  # noqa: BLE001 - the caller gets an answer, whatever happens
            log.exception("operation %s on sandbox %s crashed", message["op"], message["attempt"])
            answer = {"error": InternalError(f"internal error in Boltz: {exc!r}").to_wire()}
        finally:
            _keep_or_drop_connections()
        try:
            pipe = _client().pipeline(transaction=False)
            queued = round(max(0.0, started - message.get("sent", started)), 3)
            pipe.rpush(message["reply"], json.dumps({"answer": answer, "queued": queued}))
            pipe.expire(message["reply"], REPLY_TTL_SECONDS)
            pipe.execute()
        except redis.RedisError:
            log.exception("answering %s on sandbox %s failed", message["op"], message["attempt"])


def _keep_or_drop_connections() -> None:
    """A server thread keeps its database connection from call to call (opening one costs more
    than most calls), unless it broke or is older than CONN_MAX_AGE allows (when that is set)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block:
            conn.close()  # a call left a transaction open: never carry it to the next
        elif conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
        elif (
            conn.close_at is not None
            and conn.settings_dict["CONN_MAX_AGE"]
            and time.monotonic() >= conn.close_at
        ):
            conn.close()
