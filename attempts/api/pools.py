"""The API's RL pools (/api/pools): thin handlers over services/pools.py. docs/POOLS.md says how
to use them; every environment's episode is an API sandbox with its own attempt page. Their
defaults and limits come from dispatch/limits.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from ninja import Router, Schema
from pydantic import ConfigDict, Field

from attempts.api.errors import ERRORS
from attempts.api.fields import Body, documented
from attempts.dispatch import limits
from attempts.models import Pool
from attempts.services import pools

router = Router(tags=["pools"])


class PoolIn(Body):
    """Give `task` and `size` (that many environments of one task), or `tasks` (one
    environment per task in the list), not both."""

    model_config = {
        "json_schema_extra": {
            "oneOf": [
                {
                    "required": ["task", "size"],
                    "properties": {"task": {"type": "string"}, "tasks": {"type": "null"}},
                },
                {
                    "required": ["tasks"],
                    "properties": {
                        "tasks": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": limits.MAX_POOL_SIZE,
                        },
                        "task": {"type": "null"},
                    },
                },
            ]
        }
    }
    task: str | None = None
    tasks: list[str] | None = None
    size: int | None = documented(
        None,
        "environments of `task` (with `tasks`: their number, if given)",
        ge=1,
        le=limits.MAX_POOL_SIZE,
    )
    labels: dict[str, str] = {}
    agent: str = ""
    name: str = ""
    max_steps: int | None = documented(
        limits.MAX_STEPS, "steps an episode may take", ge=1, le=limits.MAX_STEPS_LIMIT
    )
    episode_seconds: float | None = documented(
        limits.EPISODE_SECONDS,
        "seconds an episode may last (at most BOLTZ_SANDBOX_MAX_TTL)",
        ge=1,
        le=settings.BOLTZ_SANDBOX_MAX_TTL,
    )


class EnvOut(Schema):
    index: int
    task: str
    episode: int | None
    state: str
    steps: int
    reward: float | None
    url: str


class GroupOut(Schema):
    task: str
    envs: list[int]
    rewards: list[float | None]
    n: int
    mean: float | None
    std: float | None


class PoolOut(Schema):
    id: int
    name: str
    size: int
    tasks: list[str]
    labels: dict[str, str]
    agent: str
    max_steps: int
    episode_seconds: float
    created_at: datetime
    closed_at: datetime | None
    steps: int
    masked: int
    rewards: int
    mean_reward: float | None
    url: str
    envs: list[EnvOut]
    groups: list[GroupOut]


class ResetIn(Body):
    indices: list[int] | None = Field(
        None,
        description="the environments to reset, each once (none: every one)",
        json_schema_extra={"uniqueItems": True, "items": {"type": "integer", "minimum": 0}},
    )
    wait: float = documented(
        limits.SANDBOX_WAIT,
        f"seconds each environment waits for room (at most {limits.MAX_SANDBOX_WAIT:g})",
        ge=0,
    )


class ResetOut(Schema):
    index: int
    observation: dict[str, Any]
    info: dict[str, Any]


class ActionIn(Body):
    """Its parts run in this order: write, patch, run, submit."""

    model_config = ConfigDict(extra="forbid")
    write: dict[str, str] | None = None
    patch: str | None = None
    run: str | list[str] | None = Field(
        None,
        description="a shell command (at most "
        f"{limits.MAX_ARG_BYTES} bytes) or an argv list (at most {limits.MAX_COMMAND_BYTES}, "
        f"each item at most {limits.MAX_ARG_BYTES}); longer: 413 too_large",
    )
    timeout: float | None = documented(
        None,
        f"seconds the run may take (none: {limits.EXEC_TIMEOUT:g}; at most a day)",
        gt=0,
        le=limits.MAX_COMMAND_SECONDS,
    )
    submit: bool = False


STEP_WAIT = "seconds to wait for the answer (none: what the action's parts may take)"


class StepIn(Body):
    actions: list[ActionIn | None]
    timeout: float | None = documented(None, STEP_WAIT, gt=0)


class EnvStepIn(Body):
    action: ActionIn
    timeout: float | None = documented(None, STEP_WAIT, gt=0)


class StepOut(Schema):
    index: int
    step: int | None
    observation: dict[str, Any]
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def _url(request, name: str, pk: int) -> str:
    return request.build_absolute_uri(reverse(f"attempts:{name}", args=[pk]))


def pool_out(request, pool: Pool) -> dict:
    summary = pools.pool_summary(pool)
    for env in summary["envs"]:
        env["url"] = _url(request, "attempt", env["episode"]) if env["episode"] else ""
    return {
        "id": pool.pk,
        "name": pool.name,
        "size": pool.size,
        "tasks": pool.tasks,
        "labels": pool.labels,
        "agent": pool.agent,
        "max_steps": pool.max_steps,
        "episode_seconds": pool.episode_seconds,
        "created_at": pool.created_at,
        "closed_at": pool.closed_at,
        "steps": pool.steps,
        "masked": pool.masked,
        "rewards": pool.rewards,
        "mean_reward": pool.mean_reward,
        "url": _url(request, "pool", pool.pk),
        **summary,
    }


def _with_urls(request, results: list[dict]) -> list[dict]:
    for result in results:
        episode = result["info"].get("episode")
        if episode:
            result["info"]["url"] = _url(request, "attempt", episode)
    return results


def _actions(items: list[ActionIn | None]) -> list[dict | None]:
    return [None if a is None else a.model_dump(exclude_defaults=True) for a in items]


@router.post("", response={201: PoolOut, **ERRORS})
def create_pool(request, body: PoolIn):
    pool = pools.pool_create(user=request.user, **body.model_dump())
    return 201, pool_out(request, pool)


@router.get("", response=list[PoolOut])
def list_pools(request):
    return [pool_out(request, p) for p in pools.visible_pools(request.user)[:100]]


@router.get("/{pool_id}", response={200: PoolOut, **ERRORS})
def get_pool(request, pool_id: int):
    return pool_out(request, pools.pool_for(request.user, pool_id))


@router.post("/{pool_id}/reset", response={200: list[ResetOut], **ERRORS})
def reset_pool(request, pool_id: int, body: ResetIn):
    pool = pools.pool_for(request.user, pool_id)
    return _with_urls(request, pools.pool_reset(pool, body.indices, wait=body.wait))


@router.post("/{pool_id}/step", response={200: list[StepOut], **ERRORS})
def step_pool(request, pool_id: int, body: StepIn):
    pool = pools.pool_for(request.user, pool_id)
    results = pools.pool_step(pool, _actions(body.actions), timeout=body.timeout)
    return _with_urls(request, results)


@router.post("/{pool_id}/envs/{index}/step", response={200: StepOut, **ERRORS})
def step_env(request, pool_id: int, index: int, body: EnvStepIn):
    pool = pools.pool_for(request.user, pool_id)
    result = pools.pool_env_step(pool, index, _actions([body.action])[0], timeout=body.timeout)
    return _with_urls(request, [result])[0]


@router.post("/{pool_id}/close", response={200: PoolOut, **ERRORS})
def close_pool(request, pool_id: int):
    return pool_out(request, pools.pool_close(pools.pool_for(request.user, pool_id)))
