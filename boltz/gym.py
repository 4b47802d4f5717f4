"""Gymnasium environments over RL pools (docs/POOLS.md), so RL code that speaks Gymnasium can
train on Boltz tasks unchanged: `BoltzEnv` is one environment (a pool of one), and
`BoltzVectorEnv` a vector environment over a pool of N.

    from boltz import Client
    from boltz.gym import BoltzEnv

    with Client() as client, BoltzEnv(client, task="fix-add") as env:
        observation, info = env.reset()            # the task's instruction
        observation, reward, terminated, truncated, info = env.step("python3 -m pytest -q")
        ...
        observation, reward, terminated, truncated, info = env.step("submit")  # the check

Both spaces are `Text`. An action is a shell command run in the task's working folder; the
exact text `submit_action` ("submit") submits instead: the task's check runs, its score is the
reward and the episode terminates. An observation is the step rendered as text (`Observation.text`).

Masked steps: when the infrastructure fails (the sandbox died, its host went quiet, no answer
in time, no room to start) the step is no transition of the task: its reward is NaN, never 0;
it is `truncated`; and `info["masked"]` is True with `info["failure_kind"]` and
`info["error"]`. Drop it from the training batch and reset (a vector env resets it at the next
step). A step on an episode that has ended, or that failed to start, is masked the same way
(`failure_kind` "refused").

Infos stay reproducible (Gymnasium's `check_env` compares them across episodes): a step's
info is `step` (the episode's step number) and `masked`; a reset's is `episode` (the attempt
id: every episode is an attempt to review) and `url` (its page), and `masked`. The current
episodes and the latest steps' full `StepResult`s are attributes: `episode` and `last_result`
of a `BoltzEnv`, `episodes` and `last_results` of a `BoltzVectorEnv`.

Gymnasium is an optional extra: `pip install 'boltz-sdk[gym]'`. Importing `boltz` never
imports it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

try:
    import gymnasium
    import numpy as np
    from gymnasium import spaces
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"boltz.gym needs Gymnasium 1.1 or later ({exc}): pip install 'boltz-sdk[gym]'"
    ) from exc

from boltz.pools import DEFAULT_RESET_WAIT
from boltz.types import Action, Observation, StepResult

if TYPE_CHECKING:
    from boltz.client import Client
    from boltz.pools import Pool

__all__ = ["BMPText", "BoltzEnv", "BoltzVectorEnv"]

#: An observation's most characters; a longer one is cut and says so. The server already keeps
#: only the head and tail of a long output (BOLTZ_OUTPUT_HEAD_BYTES/TAIL_BYTES: 32k each).
OBSERVATION_MAX_LENGTH = 1_000_000
#: An action's most characters. Linux takes at most 128 KiB in one argument of a command line
#: (the command goes to `/bin/sh -c`) and a BMP character is at most 3 bytes of UTF-8.
ACTION_MAX_LENGTH = (128 * 1024 - 1) // 3

# Characters outside the Basic Multilingual Plane, and lone surrogates: not in the spaces.
_OUTSIDE_BMP = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


class BMPText(spaces.Text):
    """A `Text` space over the Unicode Basic Multilingual Plane except surrogates (and except
    `exclude`). Its copies share its character tables (63,488 characters): `batch_space`
    deep-copies the single space once per environment, which would otherwise take about half
    a second and megabytes each."""

    def __init__(self, max_length: int, *, min_length: int = 0, exclude: str = "") -> None:
        charset = "".join(
            chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in exclude
        )
        super().__init__(max_length, min_length=min_length, charset=charset)
        self._excluded = exclude

    def __deepcopy__(self, memo: dict[int, Any]) -> BMPText:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)  # the tables are never changed: shared
        clone._np_random = copy.deepcopy(self._np_random, memo)
        return clone

    def __repr__(self) -> str:
        without = f" and {self._excluded!r}" if self._excluded else ""
        return (
            f"BMPText({self.min_length}, {self.max_length}, "
            f"charset=<the Unicode BMP except surrogates{without}>)"
        )


_prototypes: dict[str, BMPText] = {}


def _space(kind: str) -> BMPText:
    """A fresh observation or action space (building the tables takes a few tenths of a
    second: once per process, then copied)."""
    if kind not in _prototypes:
        if kind == "observation":
            _prototypes[kind] = BMPText(OBSERVATION_MAX_LENGTH)
        else:  # a command line cannot hold a NUL
            _prototypes[kind] = BMPText(ACTION_MAX_LENGTH, exclude="\x00")
    return copy.deepcopy(_prototypes[kind])


def observation_text(text: str, max_length: int = OBSERVATION_MAX_LENGTH) -> str:
    """`text` as the observation space holds it: characters outside the BMP (and lone
    surrogates) become U+FFFD, and past `max_length` it is cut, saying so at its end."""
    text = _OUTSIDE_BMP.sub("\ufffd", text)
    if len(text) <= max_length:
        return text
    note = f"\n[observation cut: {len(text)} characters, the first {{}} shown]"
    kept = max(0, max_length - len(note.format(max_length)))
    return (text[:kept] + note.format(kept))[:max_length]


class _Episodes:
    """What both environments share: a pool, its actions and its results as Gymnasium has
    them."""

    def __init__(
        self,
        client: Client,
        *,
        task: str | None,
        tasks: Sequence[str] | None,
        size: int | None,
        max_steps: int | None,
        episode_seconds: float | None,
        labels: dict[str, str] | None,
        agent: str | None,
        name: str | None,
        submit_action: str,
        command_timeout: float | None,
        reset_wait: float,
    ) -> None:
        if not isinstance(submit_action, str) or not submit_action:
            raise ValueError("submit_action: give the text that submits, e.g. 'submit'")
        self.submit_action = submit_action
        self.command_timeout = command_timeout
        self.reset_wait = reset_wait
        self.pool: Pool = client.pool(
            task,
            size=size,
            tasks=tasks,
            labels=labels,
            agent=agent,
            name=name,
            max_steps=max_steps,
            episode_seconds=episode_seconds,
        )

    def action(self, action: Any, space: spaces.Text, where: str = "action") -> Any:
        """The pool action for a text action; TypeError or ValueError for one outside the
        action space (before anything is sent)."""
        if not isinstance(action, str):
            raise TypeError(f"{where}: a shell command (str), not {type(action).__name__}")
        if action not in space:
            bad = next((c for c in action if c not in space.character_set), None)
            why = f"it has {bad!r}" if bad is not None else f"{len(action)} characters"
            raise ValueError(f"{where} is not in the action space {space}: {why}")
        if action == self.submit_action:
            return Action(submit=True)
        if not action.strip():
            # The API takes no blank command line; the shell runs it as it would: nothing.
            return Action(run=["/bin/sh", "-c", action], timeout=self.command_timeout)
        return Action(run=action, timeout=self.command_timeout)

    @staticmethod
    def reset_result(observation: Observation) -> tuple[str, dict[str, Any]]:
        got = observation.raw.get("info", {})
        info: dict[str, Any] = {
            "episode": got.get("episode"),
            "url": got.get("url", ""),
            "masked": bool(got.get("masked")),
        }
        if info["masked"]:
            info["failure_kind"] = got.get("failure_kind", "")
            info["error"] = got.get("error", "")
        return observation_text(observation.text), info

    @staticmethod
    def step_result(result: StepResult) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = result.observation.text
        if result.masked:
            error = result.info.get("error", "")
            info = {
                "masked": True,
                "failure_kind": result.info.get("failure_kind", ""),
                "error": error,
            }
            return observation_text(text or f"error: {error}"), math.nan, False, True, info
        info = {"step": result.info.get("step"), "masked": False}
        reward = float(result.reward) if result.reward is not None else math.nan
        return (
            observation_text(text),
            reward,
            bool(result.terminated),
            bool(result.truncated),
            info,
        )


class BoltzEnv(gymnasium.Env[str, str]):
    """One environment of a Boltz task: each `reset` starts a fresh sandbox (an episode, an
    attempt to review); each `step` runs a shell command in it, or submits (`submit_action`).

    - observation: the reset's task instruction, then each step's result as text (the
      command's output and exit code, the check's verdict after a submit), in a `Text` space
      over the Unicode BMP (characters outside it become U+FFFD; a text longer than
      `OBSERVATION_MAX_LENGTH` is cut and says so);
    - action: a `Text` shell command (`/bin/sh -c`, at most `command_timeout` seconds; the
      server's default otherwise), or exactly `submit_action`;
    - reward: the check's score after a submit (terminated), 0.0 after a command;
    - a masked step (an infrastructure failure, or a step on an episode that has ended or
      failed to start): reward NaN, never 0; truncated; `info["masked"]` True with
      `failure_kind` (infrastructure, host_lost, timeout, internal, refused) and `error`.
      A reset that got no sandbox (no room within `reset_wait` seconds, or the sandbox failed
      to start) gives the error as its observation and `info["masked"]`; the next step is
      then masked too.

    `max_steps` truncates an episode past that many steps (the pool's default otherwise);
    `labels`, `agent`, `name` and `episode_seconds` are the pool's. `seed` seeds `np_random`
    only: a task's sandbox is the same for every seed. `close()` closes the pool (its
    episodes stay for review)."""

    metadata: dict[str, Any] = {"render_modes": []}
    render_mode = None

    def __init__(
        self,
        client: Client,
        task: str,
        *,
        max_steps: int | None = None,
        episode_seconds: float | None = None,
        labels: dict[str, str] | None = None,
        agent: str | None = None,
        name: str | None = None,
        submit_action: str = "submit",
        command_timeout: float | None = None,
        reset_wait: float = DEFAULT_RESET_WAIT,
    ) -> None:
        self.observation_space = _space("observation")
        self.action_space = _space("action")
        self._episodes = _Episodes(
            client,
            task=task,
            tasks=None,
            size=1,
            max_steps=max_steps,
            episode_seconds=episode_seconds,
            labels=labels,
            agent=agent,
            name=name,
            submit_action=submit_action,
            command_timeout=command_timeout,
            reset_wait=reset_wait,
        )
        self.pool = self._episodes.pool
        self.episode: int | None = None
        self.episode_url = ""
        self.last_result: StepResult | None = None
        self._closed = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        (observation,) = self.pool.reset(wait=self._episodes.reset_wait)
        text, info = self._episodes.reset_result(observation)
        self.episode, self.episode_url = info["episode"], info["url"]
        self.last_result = None
        return text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        (result,) = self.pool.step([self._episodes.action(action, self.action_space)])
        self.last_result = result
        return self._episodes.step_result(result)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool.close()
        super().close()


class BoltzVectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` environments of a Boltz task (a group of independent episodes of it, as
    GRPO-style training wants), or one per task in `tasks`, stepped together over one pool.

    Each environment is a `BoltzEnv` in spaces, actions, rewards and masking (see it);
    observations and actions are tuples of texts (`batch_space` of `Text`), rewards a float
    array (NaN where masked), infos Gymnasium's dict of arrays with `_key` masks, `masked` in
    every one. Autoreset is `NEXT_STEP`: an environment that terminated or truncated at one
    step is reset at the next instead of stepping (its action is ignored; its reward 0.0 and
    its info the reset's), while the others step at the same time."""

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        client: Client,
        task: str | None = None,
        *,
        num_envs: int | None = None,
        tasks: Sequence[str] | None = None,
        max_steps: int | None = None,
        episode_seconds: float | None = None,
        labels: dict[str, str] | None = None,
        agent: str | None = None,
        name: str | None = None,
        submit_action: str = "submit",
        command_timeout: float | None = None,
        reset_wait: float = DEFAULT_RESET_WAIT,
    ) -> None:
        self._episodes = _Episodes(
            client,
            task=task,
            tasks=tasks,
            size=num_envs,
            max_steps=max_steps,
            episode_seconds=episode_seconds,
            labels=labels,
            agent=agent,
            name=name,
            submit_action=submit_action,
            command_timeout=command_timeout,
            reset_wait=reset_wait,
        )
        self.pool = self._episodes.pool
        self.num_envs = self.pool.size
        self.single_observation_space = _space("observation")
        self.single_action_space = _space("action")
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.episodes: list[int | None] = [None] * self.num_envs
        self.last_results: list[StepResult | None] = [None] * self.num_envs
        self._observations = [""] * self.num_envs
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)
        self._executor: ThreadPoolExecutor | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        super().reset(seed=seed)
        infos: dict[str, Any] = {}
        for i, info in self._reset(list(range(self.num_envs))):
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        return tuple(self._observations), infos

    def step(
        self, actions: Sequence[str]
    ) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"actions: give {self.num_envs}, one per environment")
        resetting = [i for i in range(self.num_envs) if self._autoreset[i]]
        sent = [
            None
            if self._autoreset[i]
            else self._episodes.action(a, self.single_action_space, f"actions[{i}]")
            for i, a in enumerate(actions)
        ]
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        # The resets and the steps go at once: the steps need not wait for new sandboxes.
        reset_done = None
        if resetting:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="boltz-gym-reset")
            reset_done = self._executor.submit(self._reset, resetting)
        try:
            stepped = self.pool.step(sent) if any(a is not None for a in sent) else []
        finally:  # a failed step still waits for the resets it went with
            reset = reset_done.result() if reset_done is not None else []
        for i, result in enumerate(stepped):
            if sent[i] is None:
                continue  # sat out: being reset
            self.last_results[i] = result
            text, rewards[i], terminations[i], truncations[i], info = self._episodes.step_result(
                result
            )
            self._observations[i] = text
            infos = self._add_info(infos, info, i)
        for i, info in reset:
            infos = self._add_info(infos, info, i)
        self._autoreset = terminations | truncations
        return tuple(self._observations), rewards, terminations, truncations, infos

    def _reset(self, indices: list[int]) -> list[tuple[int, dict[str, Any]]]:
        """Fresh episodes for `indices` (their observations kept): each one's index and info."""
        got = self.pool.reset(indices, wait=self._episodes.reset_wait)
        infos = []
        for i, observation in zip(indices, got, strict=True):
            self._observations[i], info = self._episodes.reset_result(observation)
            self.episodes[i] = info["episode"]
            self.last_results[i] = None
            infos.append((i, info))
        return infos

    def close_extras(self, **kwargs: Any) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.pool.close()

    def __enter__(self) -> BoltzVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
