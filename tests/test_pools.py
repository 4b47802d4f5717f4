"""RL pools against the real things: a web server process, a worker of capacity 8 with its
operations threads, Redis, Docker. Results come back in input order whatever each environment
takes; one environment's failure masks that one only; an action's own failure is an
observation; a reset gives a fresh tree; bad input changes nothing."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest
from django.conf import settings

from attempts.models import Attempt, EventKind, Outcome, Pool
from boltz import Action, AsyncClient, InvalidRequest
from tests.conftest import (
    ROOT,
    agent_commands,
    run_web,
    run_worker,
    sdk_client,
    wait_finished,
    wait_until,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.docker,
    pytest.mark.worker,
    pytest.mark.timeout(240),
]

CAPACITY = 8


@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker, docker_ready, redis_ready):
    """A host of capacity 8 on a queue of its own, and a web server sending to it."""
    queue = f"{settings.BOLTZ_QUEUE}-pools"
    env = {"BOLTZ_OPS_CONCURRENCY": "16"}
    with (
        run_worker(queue=queue, host="pools-host", capacity=CAPACITY, env=env),
        run_web(env={"BOLTZ_QUEUE": queue}) as url,
    ):
        yield url


@pytest.fixture
def client(served, load_example):
    load_example("fix-add")
    with sdk_client(served, "trainer") as c:
        yield c


def test_results_keep_input_order_when_environments_take_different_times(client):
    with client.pool(task="fix-add", size=4, labels={"run": "order"}) as pool:
        first = pool.reset()
        assert [o.index for o in first] == [0, 1, 2, 3]
        assert all("add(2, 3)" in o.text and not o.error for o in first)
        # The first environment sleeps longest: answers arrive in reverse, results do not.
        actions = [f"sleep 0.{8 - 2 * i}; echo env {i}" for i in range(4)]
        results = pool.step(actions)
        assert [r.info["index"] for r in results] == [0, 1, 2, 3]
        assert [r.observation.stdout for r in results] == [f"env {i}\n" for i in range(4)]
        assert all(r.reward == 0.0 and not r.masked and r.info["step"] == 1 for r in results)
        assert all(0 <= r.info["queued_seconds"] < 5 for r in results)
        # Every step is on its episode's timeline, as for any sandbox.
        for i, r in enumerate(results):
            assert agent_commands(r.info["episode"]) == [actions[i]]
            assert r.info["url"].endswith(f"/attempts/{r.info['episode']}/")
        info = pool.refresh()
        assert info.steps == 4 and info.masked == 0
        assert [e.state for e in info.envs] == ["live"] * 4


def test_killing_one_environments_container_mid_step_masks_that_one_only(client):
    with client.pool(task="fix-add", size=3) as pool:
        pool.reset()
        episodes = dict(
            Attempt.objects.filter(pool_id=pool.id).values_list("pool_index", "container_id")
        )
        victim = Attempt.objects.get(pool_id=pool.id, pool_index=1)

        def kill_when_running():
            wait_until(
                lambda: victim.events.filter(kind=EventKind.EXEC, data__phase="start").exists(),
                what="env 1's command to start",
            )
            docker.from_env().containers.get(episodes[1]).kill()

        killer = threading.Thread(target=kill_when_running)
        killer.start()
        results = pool.step(["sleep 2; echo done"] * 3)
        killer.join()
        assert [r.observation.stdout for r in (results[0], results[2])] == ["done\n", "done\n"]
        assert [r.reward for r in results] == [0.0, None, 0.0]
        masked = results[1]
        assert masked.masked and masked.info["failure_kind"] == "infrastructure"
        assert masked.truncated and not masked.terminated
        assert not results[0].masked and not results[2].masked
        # The next step refuses env 1 only; the pool counts one masked step.
        again = pool.step(["echo still here"] * 3)
        assert again[1].info["failure_kind"] == "refused" and again[1].reward is None
        assert again[0].observation.stdout == again[2].observation.stdout == "still here\n"
        info = pool.refresh()
        assert info.masked == 1 and info.envs[1].state == "failed"
    # Its episode ends as an infrastructure error, never as the agent's failure.
    (ended,) = wait_finished([victim])
    assert ended.outcome == Outcome.INFRA_ERROR and ended.score is None


def test_a_patch_that_does_not_apply_is_an_observation_and_bad_input_changes_nothing(client):
    with client.pool(task="fix-add", size=2) as pool:
        pool.reset()
        stale = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-nothing like this\n+x\n"
        fix = (ROOT / "examples" / "fix-add" / "solution.patch").read_text()
        results = pool.step([Action(patch=stale, run="echo not reached"), Action(patch=fix)])
        refused, applied = results
        assert (
            refused.observation.patch_applied is False
            and "calc.py" in refused.observation.patch_output
        )
        assert refused.observation.exit_code is None  # the run after it was not done
        assert refused.reward == 0.0 and not refused.masked and not refused.terminated
        assert applied.observation.patch_applied is True
        before = list(
            Attempt.objects.filter(pool_id=pool.id).values_list("episode_steps", flat=True)
        )
        with pytest.raises(InvalidRequest, match=r"actions\[1\]\.patch: not a unified diff"):
            pool.step(["true", Action(patch="this is not a diff")])
        with pytest.raises(InvalidRequest, match="exactly 2 actions"):
            pool.step(["true"])
        with pytest.raises(InvalidRequest, match=r"actions\.0\.fly"):
            pool.step([{"fly": "away"}, "true"])
        after = list(
            Attempt.objects.filter(pool_id=pool.id).values_list("episode_steps", flat=True)
        )
        assert after == before  # no environment was changed
        assert Pool.objects.get(pk=pool.id).steps == 2


def test_submit_terminates_and_reset_gives_a_fresh_tree(client):
    with client.pool(task="fix-add", size=2) as pool:
        pool.reset()
        fix = (ROOT / "examples" / "fix-add" / "solution.patch").read_text()
        results = pool.step([Action(patch=fix, write={"notes.txt": "mine"}, submit=True), "ls"])
        done = results[0]
        assert done.terminated and done.reward == 1.0 and done.observation.check.passed
        assert "notes.txt" not in results[1].observation.stdout
        first_episode = done.info["episode"]
        refused = pool.step(["ls", "true"])[0]
        assert refused.info["failure_kind"] == "refused" and refused.terminated
        (fresh,) = pool.reset([0])
        assert fresh.raw["info"]["episode"] != first_episode
        listing = pool.step(["ls; cat calc.py", "true"])[0]
        assert "notes.txt" not in listing.observation.stdout
        assert "return a - b" in listing.observation.stdout  # the base again, not the fix
        group = pool.refresh().groups[0]
        assert group.task == "fix-add" and group.envs == [0, 1]
    ended = Attempt.objects.get(pk=first_episode)
    assert ended.episode_end == "terminated"
    (ended,) = wait_finished([ended])
    assert ended.outcome == Outcome.PASSED  # the episode's attempt keeps its check's verdict


def test_streaming_and_async_pools_tag_each_result(client, served):
    with client.pool(task="fix-add", size=3) as pool:
        pool.reset()
        for i, seconds in enumerate((2.5, 0.1, 1.3)):
            pool.submit(i, f"sleep {seconds}; echo {i}")
        finished = [(r.info["index"], r.info["step"]) for r in pool.results(timeout=60)]
        assert finished == [(1, 1), (2, 1), (0, 1)]  # in the order they were done
        token = client._settings.token

    async def drive() -> list:
        async with AsyncClient(served, token=token) as aclient:
            apool = await aclient.pool(task="fix-add", size=2)
            async with apool:
                await apool.reset()
                stepped = await apool.step(["echo a", "echo b"])
                await apool.submit(1, "echo again")
                streamed = [r async for r in apool.results(timeout=60)]
            return [r.observation.stdout for r in stepped + streamed]

    # In a thread of its own: an event loop may already run in this one (a browser test's).
    with ThreadPoolExecutor(1) as thread:
        assert thread.submit(asyncio.run, drive()).result() == ["a\n", "b\n", "again\n"]


def test_the_headline_example_compares_eight_candidates(client, served):
    """docs/POOLS.md's example, run as a user would run it: eight environments, each given
    different code, the same check, the rewards compared."""
    token = client._settings.token
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pool_compare.py")],
        env={**os.environ, "BOLTZ_URL": served, "BOLTZ_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rewards = dict(re.findall(r"^(\S.*?)\s{2,}reward (\d\.\d)\s", run.stdout, re.M))
    assert rewards == {
        "a + b": "1.0",
        "a - b": "0.0",
        "b + a": "1.0",
        "sum((a, b))": "1.0",
        "a * b": "0.0",
        "abs(a) + abs(b)": "0.0",
        "(a ^ b) + 2 * (a & b)": "1.0",
        "a + b if a > 0 else b": "0.0",
    }
    assert "mean reward 0.500, spread 0.500 over 8 episodes" in run.stdout
    doc = (ROOT / "docs" / "POOLS.md").read_text()
    assert (ROOT / "examples" / "pool_compare.py").read_text().split('"""', 2)[2].strip() in doc


def test_over_capacity_an_environment_waits_then_is_masked_with_its_wait(client):
    # Earlier tests' sandboxes go as their holders see their records flushed: room for 8 first.
    running = {"label": "boltz.host=pools-host", "status": "running"}
    wait_until(  # the plain list (no inspect of each, which races a removal)
        lambda: not docker.from_env().api.containers(filters=running),
        what="the earlier tests' sandboxes to go",
    )
    # The host's 8 slots are taken first (however long a loaded machine takes to start them);
    # then one more environment can only wait, and is masked with what it waited.
    with (
        client.pool(task="fix-add", size=CAPACITY) as full,
        client.pool(task="fix-add", size=1) as extra,
    ):
        assert not any(o.raw["info"]["masked"] for o in full.reset(wait=180))
        (waited,) = [o.raw["info"] for o in extra.reset(wait=2)]
        assert waited["masked"] and waited["failure_kind"] == "capacity"
        assert "no sandbox was free within 2s" in waited["error"], waited
        (result,) = extra.step(["true"])
        assert result.masked and result.info["failure_kind"] == "refused"
        assert not any(r.masked for r in full.step(["true"] * CAPACITY))
