"""boltz.gym against the real things (a web server process, the session's worker of capacity 2,
Docker): Gymnasium's own `check_env` passes on `BoltzEnv`; an episode is solved through text
actions; the vector env batches, masks and autoresets as Gymnasium's NEXT_STEP mode does.
No test holds more than two live sandboxes (the worker's capacity)."""

from __future__ import annotations

import math
import warnings

import docker
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from attempts.models import Attempt
from boltz.gym import BMPText, BoltzEnv, BoltzVectorEnv, observation_text
from tests.conftest import agent_commands, real, sdk_client
from tests.optional_extras import assert_the_extra_is_optional

FIX = "sed -i 's/return a - b/return a + b/' calc.py"


@pytest.fixture
def client(web, worker, load_example):
    load_example("fix-add")
    with sdk_client(web, "learner") as c:
        yield c


# --- without a server ---------------------------------------------------------------------------
def test_importing_boltz_never_imports_gymnasium_and_boltz_gym_says_how_to_install_it():
    assert_the_extra_is_optional("boltz.gym", "gymnasium", "gym")


def test_observation_text_stays_inside_the_observation_space():
    space = BMPText(60)
    text = observation_text("caf\u00e9 \U0001f600 \ud800 ok", 60)
    assert text == "caf\u00e9 \ufffd \ufffd ok" and text in space
    cut = observation_text("x" * 100, 60)
    assert len(cut) <= 60 and cut in space
    assert cut == "x" * 6 + "\n[observation cut: 100 characters, the first 6 shown]"
    assert "\x00" in BMPText(1) and "\x00" not in BMPText(1, exclude="\x00")


def test_batched_spaces_share_their_character_tables_not_their_random_state():
    space = BMPText(10)
    batched = batch_space(space, 64)  # a deep copy per environment: quick, and small
    first, second = batched.spaces[:2]
    assert first.character_set is space.character_set is second.character_set
    assert first.np_random is not second.np_random and first == space
    assert batched.sample() in batched and "<the Unicode BMP except surrogates>" in repr(space)


# --- against the real things --------------------------------------------------------------------
@real
def test_gymnasiums_check_env_passes_on_the_single_env(client):
    env = BoltzEnv(client, task="fix-add")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # No render check: render_mode is None and the env is not made by gymnasium.make,
            # so the check would only warn that it has no spec to make other render modes from.
            check_env(env, skip_render_check=True)
    finally:
        env.close()
        env.close()  # closing twice is allowed
    assert [str(w.message) for w in caught] == []
    assert env.pool.refresh().closed_at is not None


@real
def test_an_episode_is_solved_through_text_actions(client):
    env = BoltzEnv(client, task="fix-add", max_steps=10)
    try:
        observation, info = env.reset(seed=7)
        assert "add(2, 3) does not return 5" in observation
        assert info["masked"] is False and info["url"].endswith(f"/attempts/{info['episode']}/")

        observation, reward, terminated, truncated, info = env.step(
            "python3 -m pytest -q -p no:cacheprovider tests"
        )
        assert "1 failed" in observation and observation.endswith("[exit code 1]")
        assert (reward, terminated, truncated, info) == (
            0.0,
            False,
            False,
            {"step": 1, "masked": False},
        )
        # Output outside the BMP comes back as U+FFFD; a blank command runs as the shell would.
        observation, *_ = env.step(r"printf 'caf\303\251 \360\237\230\200'")
        assert observation == "caf\u00e9 \ufffd\n[exit code 0]"
        assert env.step("  ")[0] == "[exit code 0]"
        # Actions outside the action space are refused before anything is sent.
        with pytest.raises(TypeError, match="a shell command"):
            env.step(b"ls")
        with pytest.raises(ValueError, match="not in the action space"):
            env.step("echo \x00")

        env.step(FIX)
        observation, reward, terminated, truncated, info = env.step("submit")
        assert reward == 1.0 and terminated and not truncated and "check passed" in observation
        assert env.last_result.observation.check.passed
        # A step after the episode ended is masked: no reward (NaN), never a zero.
        observation, reward, terminated, truncated, info = env.step("echo late")
        assert math.isnan(reward) and truncated and not terminated
        assert info["masked"] and info["failure_kind"] == "refused"
        assert observation.startswith("error: ")
        # Every command is on the episode's timeline, as for any sandbox.
        assert agent_commands(env.episode) == [
            "python3 -m pytest -q -p no:cacheprovider tests",
            r"printf 'caf\303\251 \360\237\230\200'",
            "/bin/sh -c '  '",
            FIX,
        ]
        assert Attempt.objects.get(pk=env.episode).checks.filter(passed=True).exists()
    finally:
        env.close()


@real
def test_the_vector_env_batches_masks_and_autoresets_at_the_next_step(client):
    envs = BoltzVectorEnv(client, task="fix-add", num_envs=2)
    try:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert envs.single_action_space == envs.action_space.spaces[0]
        observations, infos = envs.reset(seed=1)
        assert observations in envs.observation_space and len(observations) == 2
        assert all("add(2, 3)" in o for o in observations)
        assert infos["masked"].tolist() == [False, False] and infos["_episode"].all()
        first = list(envs.episodes)

        observations, rewards, terminations, truncations, infos = envs.step([FIX, "echo one"])
        assert observations[1] == "one\n[exit code 0]"
        assert rewards.dtype == np.float64 and rewards.shape == (2,)
        assert terminations.dtype == truncations.dtype == np.bool_ and terminations.shape == (2,)
        assert infos["step"].tolist() == [1, 1] and infos["_step"].all()

        observations, rewards, terminations, truncations, infos = envs.step(["submit", "echo two"])
        assert rewards.tolist() == [1.0, 0.0] and terminations.tolist() == [True, False]
        assert "check passed" in observations[0] and observations[1] == "two\n[exit code 0]"

        # Environment 0 is reset instead of stepping (its action ignored); 1 steps meanwhile.
        observations, rewards, terminations, truncations, infos = envs.step(
            ["echo ignored", "echo three"]
        )
        assert "add(2, 3)" in observations[0] and observations[1] == "three\n[exit code 0]"
        assert rewards.tolist() == [0.0, 0.0] and not terminations.any() and not truncations.any()
        assert infos["_episode"].tolist() == [True, False] and infos["_step"].tolist() == [
            False,
            True,
        ]
        assert envs.episodes[0] != first[0] and envs.episodes[1] == first[1]
        assert infos["episode"][0] == envs.episodes[0] and agent_commands(envs.episodes[0]) == []

        # Environment 1's sandbox dies: its step is masked (NaN, truncated), 0's is not.
        container = Attempt.objects.get(pk=envs.episodes[1]).container_id
        docker.from_env().containers.get(container).kill()
        observations, rewards, terminations, truncations, infos = envs.step(["echo four", "true"])
        assert observations[0] == "four\n[exit code 0]" and rewards[0] == 0.0
        assert math.isnan(rewards[1]) and truncations.tolist() == [False, True]
        assert infos["masked"].tolist() == [False, True] and infos["_masked"].all()
        assert infos["_failure_kind"].tolist() == [False, True]
        assert infos["failure_kind"][1] == "infrastructure", infos
        observations, rewards, *_ = envs.step(["echo five", "ignored"])
        assert "add(2, 3)" in observations[1] and rewards.tolist() == [0.0, 0.0]
    finally:
        envs.close()
    assert envs.closed and envs.pool.refresh().closed_at is not None
