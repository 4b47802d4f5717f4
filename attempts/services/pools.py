"""RL pools, as the web process handles them: environments a training loop steps together.

A pool is a set of API sandboxes, not a second way to run containers: each episode of each
environment is an API sandbox (an Attempt with `pool` and `pool_index`), reset opens new ones,
and a step sends one operation call ("step", operations.py) to the host that owns each
environment's sandbox, all at once, then gathers the answers in input order.

Results never lie about what happened:
- an action's own failure (non-zero exit, a patch that does not apply, a command timeout) is a
  normal observation;
- an infrastructure failure (the container died, the host went quiet, no answer in time, no
  room to start) is `masked` with its `failure_kind`, and its reward is None, never 0; the
  episode ends (`episode_end = "failed"`) and its sandbox is closed for review;
- a step on an environment whose episode ended (or never began) is refused for that
  environment only.

A request that cannot be done at all (a bad action, a closed pool) raises a refusal of
dispatch/errors.py; the API says it as its HTTP status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from attempts.core.episodes import end_episode
from attempts.core.errors import MULTI_STEP_ATTEMPTS_ONLY
from attempts.dispatch import calls as opcalls
from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import (
    InfrastructureFault,
    InvalidRequest,
    NoCapacity,
    NotFound,
    PoolClosed,
    Refusal,
    SandboxDeleted,
    TooLarge,
    WorkerUnreachable,
    WrongState,
)
from attempts.dispatch.hosts import host_alive
from attempts.dispatch.limits import (
    EPISODE_SANDBOX_MARGIN,
    EPISODE_SECONDS,
    EXEC_TIMEOUT,
    MAX_COMMAND_SECONDS,
    MAX_POOL_SIZE,
    MAX_STEPS,
    MAX_STEPS_LIMIT,
    OPERATION_MARGIN,
    command_too_long,
)
from attempts.dispatch.protocol import StepAction, StepRequest
from attempts.models import (
    CHECK_BUDGET_FIELDS,
    SESSION_TASK_FIELDS,
    Actor,
    Attempt,
    CheckResult,
    Event,
    EventKind,
    Outcome,
    Pool,
    Status,
    Task,
)
from attempts.services.sandboxes import (
    sandbox_attempt,
    wait_live_all,
    workspace_path,
)

ACTION_FIELDS = ("write", "patch", "run", "timeout", "submit")
# What a worker refuses of a step: the action's own doing (the environment is refused, no
# sample), or an infrastructure failure (masked); anything else is a bug of Boltz's (masked).
ACTION_REFUSALS = (InvalidRequest, NotFound, WrongState, TooLarge)
INFRASTRUCTURE_REFUSALS = (InfrastructureFault, WorkerUnreachable, SandboxDeleted)
# What a pool episode reads of its attempt to route a step.
EPISODE_FIELDS = (
    "id",
    "pool_index",
    "task",
    "status",
    "host",
    "started_at",
    "episode_end",
    "episode_steps",
    "close_requested_at",
    "sandbox_deleted_at",
    "outcome",
    "failure_reason",
    "container_id",
)
# ... and of its task: its session's fields, and what a submit's wait reads (Task.check_budget).
EPISODE_TASK_FIELDS = (*SESSION_TASK_FIELDS, *CHECK_BUDGET_FIELDS)


# --- creating and finding -----------------------------------------------------------------------
def pool_create(
    *,
    user,
    task: str | None = None,
    tasks: list[str] | None = None,
    size: int | None = None,
    labels: dict[str, str] | None = None,
    agent: str = "",
    name: str = "",
    max_steps: int | None = None,
    episode_seconds: float | None = None,
) -> Pool:
    """A pool of `size` environments of one task (a group: N independent episodes of the same
    task), or one environment per task in `tasks`. No sandbox starts until `reset`."""
    if (task is None) == (tasks is None):
        raise InvalidRequest("task or tasks", "give one task and a size, or a list of tasks")
    if task is not None:
        if size is None or not isinstance(size, int) or not 1 <= size <= MAX_POOL_SIZE:
            raise InvalidRequest("size", f"give a number of environments, 1 to {MAX_POOL_SIZE}")
        slugs = [task] * size
    else:
        if not tasks or len(tasks) > MAX_POOL_SIZE:
            raise InvalidRequest("tasks", f"give 1 to {MAX_POOL_SIZE} task names")
        if size is not None and size != len(tasks):
            raise InvalidRequest("size", f"{size} is not the number of tasks ({len(tasks)})")
        slugs = list(tasks)
    known = {
        slug: (check, rewards)
        for slug, check, rewards in Task.objects.filter(slug__in=set(slugs)).values_list(
            "slug", "check_command", "step_rewards"
        )
    }
    for i, slug in enumerate(slugs):
        field = "task" if task is not None else f"tasks[{i}]"
        if slug not in known:
            raise NotFound(f"{field}: no task {slug!r}: GET /api/tasks lists them")
        check, rewards = known[slug]
        if not check.strip():
            raise InvalidRequest(field, f"{slug} has no check (it holds image sandboxes)")
        if rewards:
            raise InvalidRequest(field, MULTI_STEP_ATTEMPTS_ONLY.format(slug=slug))
    max_steps = MAX_STEPS if max_steps is None else max_steps
    if not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_STEPS_LIMIT:
        raise InvalidRequest(
            "max_steps", f"give the steps an episode may take, 1 to {MAX_STEPS_LIMIT}"
        )
    seconds = EPISODE_SECONDS if episode_seconds is None else float(episode_seconds)
    if not math.isfinite(seconds) or not 1 <= seconds <= settings.BOLTZ_SANDBOX_MAX_TTL:
        raise InvalidRequest(
            "episode_seconds",
            f"give seconds, 1 to {settings.BOLTZ_SANDBOX_MAX_TTL:g} (BOLTZ_SANDBOX_MAX_TTL)",
        )
    return Pool.objects.create(
        owner=user,
        name=name[:100],
        labels={str(k)[:100]: str(v)[:300] for k, v in (labels or {}).items()},
        agent=agent[:100],
        tasks=slugs,
        size=len(slugs),
        max_steps=max_steps,
        episode_seconds=seconds,
    )


def visible_pools(user):
    return Pool.objects.all() if user.is_staff else Pool.objects.filter(owner=user)


def pool_for(user, pool_id: int) -> Pool:
    found = visible_pools(user).filter(pk=pool_id).first()
    if found is None:
        raise NotFound(f"no pool {pool_id}")
    return found


def _open(pool: Pool) -> None:
    if pool.closed_at:
        raise PoolClosed(f"pool {pool.pk} is closed")


def current_episodes(pool: Pool, indices: Iterable[int] | None = None) -> dict[int, Attempt]:
    """Each environment's latest episode (by index)."""
    rows = (
        Attempt.objects.filter(pool=pool)
        .select_related("task")
        .only(*EPISODE_FIELDS, *(f"task__{name}" for name in EPISODE_TASK_FIELDS))
        .order_by("pool_index", "-pk")
    )
    if indices is not None:
        rows = rows.filter(pool_index__in=list(indices))
    episodes: dict[int, Attempt] = {}
    for episode in rows:
        episodes.setdefault(episode.pool_index, episode)
    return episodes


# --- reset ---------------------------------------------------------------------------------------
def pool_reset(pool: Pool, indices: list[int] | None, *, wait: float) -> list[dict]:
    """Fresh sandboxes for the environments at `indices` (all when None): the episode each had
    ends (its sandbox closed and kept for review) and a new one starts. Over capacity, each
    waits for room at most `wait` seconds; one that got none is masked ("capacity") and the
    others go on. Answers, in the order of `indices`, each environment's first observation."""
    _open(pool)
    indices = _indices(pool, indices)
    if not math.isfinite(wait) or wait < 0:
        raise InvalidRequest("wait", "give seconds to wait for room (0 or more)")
    queueing.require_queue()  # Redis down: refused before any episode ends or starts
    ended = current_episodes(pool, indices)
    for episode in ended.values():
        end_episode(episode.pk, "reset")
    tasks = {t.slug: t for t in Task.objects.filter(slug__in={pool.tasks[i] for i in indices})}
    ttl = min(pool.episode_seconds + EPISODE_SANDBOX_MARGIN, settings.BOLTZ_SANDBOX_MAX_TTL)
    fresh: dict[int, Attempt] = {}
    for i in indices:
        attempt = sandbox_attempt(
            tasks[pool.tasks[i]],
            user=pool.owner,
            agent=pool.agent or "pool",
            labels={**pool.labels, "pool": str(pool.pk), "env": str(i)},
            ttl=ttl,
            idle=settings.BOLTZ_SANDBOX_IDLE_TIMEOUT,
            pool=pool,
            pool_index=i,
        )
        fresh[i] = attempt
    # If Redis cannot take them, each ends "not started": masked below (infrastructure).
    with contextlib.suppress(WorkerUnreachable):
        queueing.enqueue_attempts(list(fresh.values()))
    live = wait_live_all(list(fresh.values()), wait=wait)
    results = []
    for i in indices:
        got = live[fresh[i].pk]
        task = tasks[pool.tasks[i]]
        info: dict[str, Any] = {"index": i, "episode": fresh[i].pk, "masked": False}
        if isinstance(got, Refusal):
            kind = "capacity" if isinstance(got, NoCapacity) else "infrastructure"
            info.update(masked=True, failure_kind=kind, error=got.detail)
            end_episode(fresh[i].pk, "failed")
            observation = {}
        else:
            info["queued_seconds"] = round((got.started_at - got.created_at).total_seconds(), 3)
            observation = {
                "task": task.slug,
                "instruction": task.instruction,
                "cwd": task.workdir or "/workspace",
            }
        results.append({"index": i, "observation": observation, "info": info})
    return results


def _indices(pool: Pool, indices: list[int] | None) -> list[int]:
    if indices is None:
        return list(range(pool.size))
    seen = set()
    for n, i in enumerate(indices):
        if not isinstance(i, int) or not 0 <= i < pool.size:
            raise InvalidRequest(
                f"indices[{n}]", f"{i!r} is not an environment (0 to {pool.size - 1})"
            )
        if i in seen:
            raise InvalidRequest(f"indices[{n}]", f"environment {i} is given twice")
        seen.add(i)
    return list(indices)


# --- actions -------------------------------------------------------------------------------------
def parse_actions(pool: Pool, actions: Any) -> list[StepAction | None]:
    """Every action checked before any environment is touched: InvalidRequest naming the
    environment's index and the field."""
    if not isinstance(actions, list):
        raise InvalidRequest("actions", "give a list with one action per environment")
    if len(actions) != pool.size:
        raise InvalidRequest(
            "actions",
            f"give exactly {pool.size} actions, one per environment (None skips one); "
            f"got {len(actions)}",
        )
    return [parse_action(action, where=f"actions[{i}]") for i, action in enumerate(actions)]


def parse_action(action: Any, *, where: str) -> StepAction | None:
    """One action as the worker takes it: {write: {path: text}, patch, run, timeout, submit}
    (parts run in that order), or None (the environment sits this step out)."""
    if action is None:
        return None
    if isinstance(action, str):
        action = {"run": action}
    if not isinstance(action, dict):
        raise InvalidRequest(where, f"give an object with {', '.join(ACTION_FIELDS)}")
    unknown = sorted(set(action) - set(ACTION_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{where}.{unknown[0]}", f"not an action field (known: {', '.join(ACTION_FIELDS)})"
        )
    parsed: dict[str, Any] = {}
    write = action.get("write")
    if write is not None:
        if not isinstance(write, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in write.items()
        ):
            raise InvalidRequest(f"{where}.write", "give an object of path: text")
        parsed["write"] = {}
        for path, text in write.items():
            try:
                target = workspace_path(path)
            except InvalidRequest as exc:
                raise InvalidRequest(f"{where}.write", exc.detail) from None
            if len(text.encode("utf-8", errors="surrogatepass")) > settings.BOLTZ_MAX_FILE_BYTES:
                raise TooLarge(f"{where}.write: {path} is larger than BOLTZ_MAX_FILE_BYTES")
            parsed["write"][target] = text
    patch = action.get("patch")
    if patch is not None:
        if not isinstance(patch, str) or not patch.strip():
            raise InvalidRequest(f"{where}.patch", "give a unified diff as text")
        try:
            files = PatchSet(patch)
        except (UnidiffParseError, ValueError) as exc:
            raise InvalidRequest(f"{where}.patch", f"not a unified diff: {exc}") from None
        if not len(files):
            raise InvalidRequest(f"{where}.patch", "not a unified diff (no file in it)")
        parsed["patch"] = patch
    run = action.get("run")
    if run is not None:
        if isinstance(run, list):
            if not run or not all(isinstance(a, str) for a in run):
                raise InvalidRequest(f"{where}.run", "give a shell command or an argv list")
        elif not isinstance(run, str) or not run.strip():
            raise InvalidRequest(f"{where}.run", "give a shell command or an argv list")
        if why := command_too_long(run):
            raise TooLarge(f"{where}.run: {why}")
        parsed["run"] = run
    timeout = action.get("timeout")
    if timeout is not None:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or not 0 < timeout <= MAX_COMMAND_SECONDS
        ):
            raise InvalidRequest(f"{where}.timeout", "give the run's seconds, up to a day")
        if run is None:
            raise InvalidRequest(f"{where}.timeout", "a timeout needs a run")
        parsed["timeout"] = float(timeout)
    submit = action.get("submit", False)
    if not isinstance(submit, bool):
        raise InvalidRequest(f"{where}.submit", "give true or false")
    if submit:
        parsed["submit"] = True
    if not parsed:
        raise InvalidRequest(where, "give at least one of write, patch, run or submit")
    return StepAction(**parsed)


# --- stepping -----------------------------------------------------------------------------------
def pool_step(pool: Pool, actions: Any, *, timeout: float | None = None) -> list[dict]:
    """One action per environment, done at once on every environment's host; the results in
    input order, one per environment."""
    _open(pool)
    parsed = parse_actions(pool, actions)
    queueing.require_queue()  # Redis down: refused before any step is taken (none is lost)
    wanted = [i for i, action in enumerate(parsed) if action is not None]
    episodes = current_episodes(pool, wanted)
    results: list[dict | None] = [None] * pool.size
    requests: dict[int, tuple[tuple, Attempt]] = {}
    for i, action in enumerate(parsed):
        if action is None:
            results[i] = _unstepped(i, None, "skipped", "no action was given for this step")
            continue
        request = _request(pool, i, episodes.get(i), action, timeout)
        if isinstance(request, dict):
            results[i] = request
        else:
            requests[i] = request
    _gather(_send(requests, results), results)
    _count(pool, results)
    return results


def pool_env_step(pool: Pool, index: int, action: Any, *, timeout: float | None = None) -> dict:
    """One environment's step on its own (the streaming form): its result."""
    _open(pool)
    if not isinstance(index, int) or not 0 <= index < pool.size:
        raise NotFound(f"pool {pool.pk} has no environment {index}")
    parsed = parse_action(action, where="action")
    if parsed is None:
        raise InvalidRequest("action", "give an action")
    queueing.require_queue()
    results: list[dict | None] = [None] * pool.size
    request = _request(pool, index, current_episodes(pool, [index]).get(index), parsed, timeout)
    if isinstance(request, dict):
        results[index] = request
    else:
        _gather(_send({index: request}, results), results)
    _count(pool, results)
    return results[index]


def _answer_time(episode: Attempt, action: StepAction, timeout: float | None) -> float:
    """How long the web waits for a step's answer: `timeout` when given, else what the parts
    of the action may take."""
    if timeout is not None:
        if not math.isfinite(timeout) or timeout <= 0:
            raise InvalidRequest("timeout", "give seconds to wait for the step")
        return timeout
    seconds = (
        OPERATION_MARGIN
        + 60.0 * len(action.write or {})
        + (60.0 if action.patch is not None else 0)
    )
    if action.run is not None:
        seconds += action.timeout if action.timeout is not None else EXEC_TIMEOUT
    if action.submit:
        seconds += episode.task.check_budget
    return seconds


def _request(pool: Pool, index: int, episode: Attempt | None, action: StepAction, timeout):
    """The operation call to send for one environment ((host, id, StepRequest, wait), its
    episode), or its result at once (refused or masked)."""
    unable = _not_steppable(index, episode)
    if unable is not None:
        return unable
    if not host_alive(episode.host):
        return _masked(
            index, episode, "host_lost", f"its host {episode.host} has not been heard from"
        )
    deadline = episode.started_at.timestamp() + pool.episode_seconds
    wait = _answer_time(episode, action, timeout)
    task = episode.task  # where and as whom the agent works, and what it must never show
    request = StepRequest(
        action=action,
        max_steps=pool.max_steps,
        episode_deadline=deadline,
        container=episode.container_id,
        task={**{name: getattr(task, name) for name in SESSION_TASK_FIELDS}, "id": task.pk},
    )
    return (episode.host, episode.pk, request, wait), episode


def _send(
    requests: dict[int, tuple[tuple, Attempt]], results: list[dict | None]
) -> dict[int, tuple[opcalls.Call, Attempt]]:
    """Every environment's call, sent at once (its step taken first); if Redis cannot take
    them, each is masked."""
    requests = _take_steps(requests, results)
    try:
        calls = opcalls.send_many([request for request, _ in requests.values()])
    except opcalls.ChannelDown as exc:
        for i, (_, episode) in requests.items():
            results[i] = _masked(i, episode, "infrastructure", str(exc))
        return {}
    pairs = zip(requests.items(), calls, strict=True)
    return {i: (call, episode) for (i, (_, episode)), call in pairs}


# Tries of a step's numbers: each lost only to a timeline write that came between its read and
# its write (a worker writes an environment's events while its last step's output comes in).
STEP_TRIES = 10


def _take_steps(
    requests: dict[int, tuple[tuple, Attempt]], results: list[dict | None]
) -> dict[int, tuple[tuple, Attempt]]:
    """Every environment's next step number (and exec number, when it runs a command) taken
    in one write for all, where its episode is still live, with the step's mark on each
    timeline; the worker then only does the action. One that ended meanwhile is refused."""
    if not requests:
        return {}
    for tries in range(STEP_TRIES):
        try:
            return _take_steps_once(requests, results)
        except IntegrityError:  # another writer took a timeline seq meanwhile: read them again
            if tries == STEP_TRIES - 1:
                raise
    return {}


def _take_steps_once(requests, results):
    """One try of `_take_steps`, in one transaction."""
    ids = {episode.pk: i for i, (_, episode) in requests.items()}
    runs = [
        episode.pk for (_, _, step, _), episode in requests.values() if step.action.run is not None
    ]
    live = {
        "episode_end": "",
        "status": Status.RUNNING,
        "close_requested_at__isnull": True,
        "sandbox_deleted_at__isnull": True,
    }
    now = timezone.now()
    taken: dict[int, tuple[tuple, Attempt]] = {}
    with transaction.atomic():
        # The rows locked first, all of them, in one order (PostgreSQL; SQLite has one writer
        # at a time): two steps of one pool, each updating its runs' rows and then the rest,
        # would otherwise take them in opposite orders and deadlock. NO KEY UPDATE, as the
        # updates below take: a worker adding an event to one of these timelines meanwhile
        # (its foreign key takes KEY SHARE on the row) goes on, and the seq it took is read
        # again here; FOR UPDATE would block it while it holds that seq, and both would wait.
        list(
            Attempt.objects.select_for_update(no_key=True)
            .filter(pk__in=list(ids))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        rest = [pk for pk in ids if pk not in set(runs)]
        for pks, execs in ((runs, 1), (rest, 0)):
            if pks:
                Attempt.objects.filter(pk__in=pks, **live).update(
                    episode_steps=F("episode_steps") + 1,
                    exec_count=F("exec_count") + execs,
                    last_used_at=now,
                )
        rows = Attempt.objects.filter(pk__in=list(ids)).values(
            "pk",
            "episode_steps",
            "exec_count",
            "episode_end",
            "status",
            "close_requested_at",
            "sandbox_deleted_at",
        )
        tops = dict(
            Event.objects.filter(attempt_id__in=list(ids))
            .values("attempt_id")
            .annotate(top=Max("seq"))
            .values_list("attempt_id", "top")
        )
        marks = []
        for row in rows:
            i = ids[row["pk"]]
            request, episode = requests[i]
            if (
                row["episode_end"]
                or row["status"] != Status.RUNNING
                or row["close_requested_at"]
                or row["sandbox_deleted_at"]
            ):
                # Ended between the read and the write (in the same transaction, the write
                # matched the row exactly when it is still live): told as if it had ended before
                # (a sandbox that died is masked, infrastructure, whichever noticed it first).
                how = row["episode_end"] or row["status"]
                results[i] = _as_ended(i, row["pk"]) or _unstepped(
                    i, episode, "refused", f"environment {i}'s episode ended ({how}): reset it"
                )
                continue
            host, pk, step, wait = request
            seq = (tops.get(row["pk"]) or 0) + 1
            parts = ", ".join(step.action.parts())
            marks.append(
                Event(
                    attempt_id=row["pk"],
                    seq=seq,
                    kind=EventKind.MESSAGE,
                    actor=Actor.AGENT,
                    data={"role": "step", "content": f"step {row['episode_steps']}: {parts}"},
                )
            )
            step = dataclasses.replace(
                step, step_number=row["episode_steps"], exec_number=row["exec_count"], seq=seq + 1
            )
            taken[i] = ((host, pk, step, wait), episode)
        Event.objects.bulk_create(marks)
    seen = {row["pk"] for row in rows}
    for pk, i in ids.items():
        if pk not in seen:
            results[i] = _unstepped(
                i, requests[i][1], "refused", f"environment {i}'s sandbox was deleted"
            )
    return taken


def _as_ended(index: int, pk: int) -> dict | None:
    """The result of an environment whose episode ended while its step was on its way, told
    as if it had ended before (None if it is live after all)."""
    ended = Attempt.objects.filter(pk=pk).first()
    return _not_steppable(index, ended) if ended else None


def _not_steppable(index: int, episode: Attempt | None) -> dict | None:
    """The result of an environment that cannot take a step, or None if it can."""
    if episode is None:
        return _unstepped(index, None, "refused", f"environment {index} has no episode: reset it")
    if episode.episode_end:
        why = f"environment {index}'s episode ended ({episode.episode_end}): reset it"
        return _unstepped(index, episode, "refused", why)
    if episode.status == Status.RUNNING and not episode.close_requested_at:
        return None
    if episode.outcome == Outcome.INFRA_ERROR or episode.status in (
        Status.QUEUED,
        Status.STARTING,
    ):
        why = episode.failure_reason or f"its sandbox is {episode.status}, not live"
        return _masked(index, episode, "infrastructure", why)
    # Closed by its time to live, its idle timeout or a reviewer: the episode is over.
    why = episode.failure_reason or "its sandbox was closed"
    return _unstepped(index, episode, "refused", f"environment {index}: {why}: reset it")


def _gather(calls: dict[int, tuple[opcalls.Call, Attempt]], results: list[dict | None]) -> None:
    """Wait for every call, each at most until its own deadline; fill in `results`."""
    pending = {call.reply: (i, call, episode) for i, (call, episode) in calls.items()}
    while pending:
        last = max(call.deadline for _, call, _ in pending.values())
        try:
            done = opcalls.first_done([c for _, c, _ in pending.values()], last - time.time())
        except opcalls.ChannelDown as exc:
            for i, _, episode in pending.values():
                results[i] = _masked(i, episode, "infrastructure", str(exc))
            return
        now = time.time()
        if done is None:
            for i, _call, episode in pending.values():
                results[i] = _masked(i, episode, "timeout", "no answer within the step's time")
            return
        i, call, episode = pending.pop(done.reply)
        results[i] = _result(i, episode, done)
        results[i]["info"]["queued_seconds"] = done.queued  # waited for a free worker thread
        for reply, (j, other, other_episode) in list(pending.items()):
            if other.deadline < now and not other.done():
                results[j] = _masked(
                    j, other_episode, "timeout", "no answer within the step's time"
                )
                del pending[reply]


def _result(index: int, episode: Attempt, call: opcalls.Call) -> dict:
    """An environment's result from its answered call."""
    try:
        answer = call.get(0)
    except Refusal as refusal:
        told = isinstance(refusal, WrongState) and _as_ended(index, episode.pk)
        if told:  # ended meanwhile: told as if before the step
            return told
        if isinstance(refusal, ACTION_REFUSALS):
            return _unstepped(index, episode, "refused", refusal.detail)
        kind = "infrastructure" if isinstance(refusal, INFRASTRUCTURE_REFUSALS) else "internal"
        return _masked(index, episode, kind, refusal.detail)
    return {"index": index, **dataclasses.asdict(answer)}


def _unstepped(index: int, episode: Attempt | None, kind: str, why: str) -> dict:
    """A result for an environment that took no step: skipped or refused (no sample)."""
    return {
        "index": index,
        "step": None,
        "observation": {},
        "reward": None,
        "terminated": bool(episode and episode.episode_end == "terminated"),
        "truncated": bool(episode and episode.episode_end in ("truncated", "failed")),
        "info": {
            "episode": episode.pk if episode else None,
            "masked": True,
            "failure_kind": kind,
            "error": why,
            kind: True,
        },
    }


def _masked(index: int, episode: Attempt, kind: str, why: str) -> dict:
    """An infrastructure failure: no reward (never 0); the episode ends, its sandbox is closed
    for review, and the environment must be reset."""
    end_episode(episode.pk, "failed")
    return {
        "index": index,
        "step": None,
        "observation": {},
        "reward": None,
        "terminated": False,
        "truncated": True,
        "info": {"episode": episode.pk, "masked": True, "failure_kind": kind, "error": why},
    }


def _count(pool: Pool, results: list[dict | None]) -> None:
    taken = [r for r in results if r is not None and not r["info"].get("skipped")]
    if not taken:
        return
    rewards = [r["reward"] for r in taken if r["reward"] is not None and r.get("terminated")]
    Pool.objects.filter(pk=pool.pk).update(
        steps=F("steps") + len(taken),
        masked=F("masked")
        + sum(1 for r in taken if r["info"].get("failure_kind") not in (None, "refused")),
        rewards=F("rewards") + len(rewards),
        reward_sum=F("reward_sum") + sum(rewards),
    )


# --- closing and reading -----------------------------------------------------------------------
def pool_close(pool: Pool) -> Pool:
    """Every live episode ends (its sandbox closed and kept for review); no step is taken
    after. Its episodes stay for review."""
    for episode in current_episodes(pool).values():
        end_episode(episode.pk, "reset")
    Pool.objects.filter(pk=pool.pk, closed_at__isnull=True).update(closed_at=timezone.now())
    pool.refresh_from_db()
    return pool


def episode_state(episode: Attempt | None) -> str:
    if episode is None:
        return "new"
    if episode.episode_end:
        return episode.episode_end
    if episode.status == Status.RUNNING and not episode.close_requested_at:
        return "live"
    if episode.status in (Status.QUEUED, Status.STARTING):
        return "starting"
    if episode.outcome == Outcome.INFRA_ERROR:  # its container died between steps, say
        return "failed"
    return "ended"


def pool_summary(pool: Pool) -> dict:
    """The pool with each environment's latest episode and, per task (a group of independent
    episodes of one task), the rewards of those episodes: their mean and spread."""
    episodes = current_episodes(pool)
    rewards = _episode_rewards([e.pk for e in episodes.values()])
    envs = []
    for i in range(pool.size):
        episode = episodes.get(i)
        envs.append(
            {
                "index": i,
                "task": pool.tasks[i],
                "episode": episode.pk if episode else None,
                "state": episode_state(episode),
                "steps": episode.episode_steps if episode else 0,
                "reward": rewards.get(episode.pk) if episode else None,
            }
        )
    groups = []
    for slug in dict.fromkeys(pool.tasks):
        members = [e for e in envs if e["task"] == slug]
        got = [e["reward"] for e in members if e["reward"] is not None]
        groups.append(
            {
                "task": slug,
                "envs": [e["index"] for e in members],
                "rewards": [e["reward"] for e in members],
                "n": len(got),
                "mean": statistics.fmean(got) if got else None,
                "std": statistics.pstdev(got) if len(got) > 1 else (0.0 if got else None),
            }
        )
    return {"envs": envs, "groups": groups}


def _episode_rewards(attempt_ids: list[int]) -> dict[int, float]:
    """The reward of each submitted episode: its latest check's."""
    rewards: dict[int, float] = {}
    checks = CheckResult.objects.filter(
        attempt_id__in=attempt_ids, attempt__episode_end="terminated"
    ).order_by("attempt_id", "-pk")
    for check in checks.only("attempt_id", "score", "passed", "verifier_error"):
        rewards.setdefault(check.attempt_id, check.as_reward)
    return {pk: reward for pk, reward in rewards.items() if reward is not None}
