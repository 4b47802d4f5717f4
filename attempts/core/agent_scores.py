"""Scores per agent: pass rate, pass@k and mean score from counted outcomes. Pure: no database.

An attempt's agent is its label (`Attempt.agent`). Agents fall in four groups, never mixed in
one number: named agents (saved agents, API sandbox labels, SWE-bench model names, `patch`),
the built-in `noop` and `command`, pool episodes (an RL pool's environments, under the pool's
agent label or `pool` when it gave none: training rollouts within a step budget, listed apart
and never ranked with the agents), and the `reference` agent, which applies the task's own
solution and is shown as the oracle. Only passed, failed and timed-out attempts are scored;
infrastructure errors, cancellations and sandboxes closed without a check are counted apart as
excluded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from math import comb

ORACLE = "reference"
BUILTIN = ("noop", "command")
POOL = "pool"
GROUPS = {
    "agent": "Agents",
    "built-in": "Built-in agents",
    POOL: "Pool episodes",
    "oracle": "Oracle",
}
UNRANKED = ("oracle", POOL)  # listed apart, never the best agent of a task
K = 5  # pass@K beside pass@1; shown only where an agent has at least K scored attempts


def agent_group(agent: str, *, episodes: bool = False) -> str:
    """'pool' for a pool's episodes (whatever their label), 'oracle' for the reference agent,
    'built-in' for noop and command, else 'agent'."""
    if episodes:
        return POOL
    if agent == ORACLE:
        return "oracle"
    if agent in BUILTIN:
        return "built-in"
    return "agent"


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimate from n attempts of which c passed (Chen et al. 2021:
    1 - C(n-c, k) / C(n, k)); None when n < k, where it cannot be estimated."""
    if n < k or k < 1:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class Tally:
    """One agent's attempts at one task: scored (passed + failed + timed out), passed, the mean
    score of the scored ones, excluded (infrastructure errors, cancellations) and running."""

    scored: int = 0
    passed: int = 0
    mean_score: float | None = None
    excluded: int = 0
    running: int = 0

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.scored, self.passed, k)

    @property
    def percent(self) -> str:
        return percent(self.pass_rate)


@dataclass
class AgentScores:
    """One agent over tasks. Pass rate pools its attempts; pass@1, pass@K and the mean score are
    averaged over the tasks where they exist (pass@K: tasks with at least K scored attempts)."""

    agent: str
    tallies: dict[str, Tally] = field(default_factory=dict)  # by task slug
    episodes: bool = False  # a pool's episodes under this label

    @property
    def group(self) -> str:
        return agent_group(self.agent, episodes=self.episodes)

    @property
    def ranked(self) -> bool:
        """Compared with the agents: not the oracle, not a pool's episodes."""
        return self.group not in UNRANKED

    @property
    def is_oracle(self) -> bool:
        return self.group == "oracle"

    @property
    def tasks(self) -> int:
        return sum(1 for t in self.tallies.values() if t.scored)

    @property
    def scored(self) -> int:
        return sum(t.scored for t in self.tallies.values())

    @property
    def passed(self) -> int:
        return sum(t.passed for t in self.tallies.values())

    @property
    def excluded(self) -> int:
        return sum(t.excluded for t in self.tallies.values())

    @property
    def running(self) -> int:
        return sum(t.running for t in self.tallies.values())

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None

    def pass_at(self, k: int) -> float | None:
        return mean(t.pass_at(k) for t in self.tallies.values())

    def tasks_at(self, k: int) -> int:
        """How many tasks pass@k is averaged over."""
        return sum(1 for t in self.tallies.values() if t.scored >= k)

    @property
    def pass_at_1(self) -> float | None:
        return self.pass_at(1)

    @property
    def pass_at_k(self) -> float | None:
        return self.pass_at(K)

    @property
    def tasks_at_k(self) -> int:
        return self.tasks_at(K)

    @property
    def mean_score(self) -> float | None:
        return mean(t.mean_score for t in self.tallies.values())

    @cached_property
    def text(self) -> dict[str, str]:
        """The scores as pages show them ('–' where there is none): computed once per page."""
        return {
            "passed": f"{self.passed}/{self.scored}",
            "pass_rate": percent(self.pass_rate),
            "pass_at_1": score_text(self.pass_at_1),
            "pass_at_k": score_text(self.pass_at_k),
            "mean_score": score_text(self.mean_score),
        }


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


SCORE_PLACES = 2  # every score, reward and pass@k on every page: "0.75" (the API stays numeric)


def score_text(value: float | None) -> str:
    """A score, reward or pass@k as every page shows it: two decimals ("0.75"), "–" for none."""
    return "–" if value is None else f"{value:.{SCORE_PLACES}f}"


GROUP_ORDER = {group: i for i, group in enumerate(GROUPS)}


def agent_scores(cells: Iterable[tuple]) -> list[AgentScores]:
    """(task, agent, tally) cells, or (task, agent, tally, episodes) where `episodes` says they
    are a pool's, gathered per agent (a pool's episodes apart from attempts with the same
    label): named agents first, then the built-in ones, pool episodes, the oracle; by name
    within a group."""
    agents: dict[tuple[str, bool], AgentScores] = {}
    for task, agent, tally, *rest in cells:
        episodes = bool(rest and rest[0])
        row = agents.setdefault((agent, episodes), AgentScores(agent, episodes=episodes))
        row.tallies[task] = tally
    return sorted(agents.values(), key=lambda a: (GROUP_ORDER[a.group], a.agent))


SORTS = {
    "agent": lambda a: a.agent.casefold(),
    "tasks": lambda a: a.tasks,
    "attempts": lambda a: a.scored,
    "pass_rate": lambda a: a.pass_rate,
    "pass_at_1": lambda a: a.pass_at_1,
    "pass_at_k": lambda a: a.pass_at_k,
    "mean_score": lambda a: a.mean_score,
}
TASK_SORT = "task:"  # sort=task:SLUG (or -task:SLUG) sorts by the pass rate on that task


def sort_key(sort: str) -> tuple[str, bool]:
    """A sort parameter (`pass_at_1`, `-pass_at_1`, `task:fix-add`) as (column, descending);
    an unknown column falls back to pass@1, best first."""
    descending = sort.startswith("-")
    column = sort.lstrip("-")
    if column in SORTS or (column.startswith(TASK_SORT) and len(column) > len(TASK_SORT)):
        return column, descending
    return "pass_at_1", True


def sorted_agents(rows: list[AgentScores], column: str, descending: bool) -> list[AgentScores]:
    """Rows sorted by one column; rows without a value for it go last either way, and ties
    keep the agents' names in order."""
    if column.startswith(TASK_SORT):
        slug = column[len(TASK_SORT) :]

        def value(a):
            tally = a.tallies.get(slug)
            return tally.pass_rate if tally else None
    else:
        value = SORTS[column]
    by_name = sorted(rows, key=lambda a: a.agent.casefold())
    present = [a for a in by_name if value(a) is not None]
    missing = [a for a in by_name if value(a) is None]
    return sorted(present, key=value, reverse=descending) + missing


def grouped(rows: Iterable[AgentScores]) -> list[tuple[str, list[AgentScores]]]:
    """Rows split by group, in the groups' order, as (heading, rows); empty groups left out.
    The order of the rows within each group is kept."""
    groups: dict[str, list[AgentScores]] = {group: [] for group in GROUPS}
    for row in rows:
        groups[row.group].append(row)
    return [(GROUPS[group], rows) for group, rows in groups.items() if rows]


def csv_cell(value) -> str:
    """A CSV cell: numbers to 4 places, None empty, and text a spreadsheet would run as a
    formula (agent labels are untrusted) prefixed with an apostrophe."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


def leaderboard_csv(groups: list[tuple[str, list[AgentScores]]], tasks: list[str]) -> list[list]:
    """The leaderboard as CSV rows: a header, then one row per agent with its totals and its
    pass rate on each task (empty where it has no scored attempt)."""
    header = [
        "agent",
        "group",
        "tasks",
        "scored_attempts",
        "passed",
        "pass_rate",
        "pass_at_1",
        f"pass_at_{K}",
        f"pass_at_{K}_tasks",
        "mean_score",
        "excluded_attempts",
        *tasks,
    ]
    rows = [[csv_cell(h) for h in header]]
    for _heading, agents in groups:
        for a in agents:
            per_task = [a.tallies[t].pass_rate if t in a.tallies else None for t in tasks]
            rows.append(
                [
                    csv_cell(v)
                    for v in (
                        a.agent,
                        a.group,
                        a.tasks,
                        a.scored,
                        a.passed,
                        a.pass_rate,
                        a.pass_at_1,
                        a.pass_at_k,
                        a.tasks_at_k,
                        a.mean_score,
                        a.excluded,
                        *per_task,
                    )
                ]
            )
    return rows
