"""Reads shared by pages and the command line."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from django.db.models import Avg, BooleanField, Count, ExpressionWrapper, Max, Q, QuerySet
from django.shortcuts import get_object_or_404

from attempts.core.agent_scores import (
    AgentScores,
    K,
    Tally,
    agent_scores,
    grouped,
    sort_key,
    sorted_agents,
)
from attempts.core.attempt_states import STATES, state_counts, state_filter
from attempts.models import (
    DONE_STATUSES,
    SCORED_OUTCOMES,
    Attempt,
    CheckResult,
    Evaluation,
    Outcome,
    Task,
    TestOutcome,
)


def attempt_or_404(pk, *, diff: bool = False) -> Attempt:
    """One attempt with its task. Its diff (up to BOLTZ_MAX_DIFF_BYTES) is left in the
    database unless the caller shows it: pages and their polls never carry it for nothing."""
    attempts = Attempt.objects.select_related("task")
    return get_object_or_404(attempts if diff else attempts.defer("diff"), pk=pk)


def attempt_label(attempt: Attempt) -> str:
    """How the command line names an attempt: its name, `fix-add #3` (Attempt.name)."""
    return attempt.name


def attempts_summary(attempts: QuerySet[Attempt]) -> str:
    """A plain-text table of attempts, then counts by outcome and the mean score."""
    rows = list(attempts.select_related("task").order_by("task__slug", "number"))
    labels = [attempt_label(a) for a in rows]
    width = max([len("attempt"), *map(len, labels)])
    lines = [
        f"{'attempt':<{width}}  {'status':<9} {'outcome':<14} {'score':>6} {'secs':>7}  reason"
    ]
    for a, label in zip(rows, labels, strict=True):
        score = "" if a.score is None else f"{a.score:.2f}"
        secs = "" if a.duration is None else f"{a.duration:.1f}"
        lines.append(
            f"{label:<{width}}  {a.status:<9} {a.outcome or '-':<14} "
            f"{score:>6} {secs:>7}  {a.failure_reason[:80]}"
        )
    counts = Counter(a.outcome or a.status for a in rows)
    scored = [a for a in rows if a.outcome in SCORED_OUTCOMES and a.score is not None]
    mean = f"{sum(a.score for a in scored) / len(scored):.3f}" if scored else "n/a"
    durations = [a.duration for a in rows if a.duration is not None]
    lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append(
        f"mean score (infrastructure errors excluded): {mean}; "
        f"mean duration: {sum(durations) / len(durations):.1f}s"
        if durations
        else f"mean score (infrastructure errors excluded): {mean}"
    )
    return "\n".join(lines)


TASK_SORTS = {
    "slug": lambda r: r["task"].slug,
    "attempts": lambda r: r["n"],
    "pass_rate": lambda r: -1 if r["pass_rate"] is None else r["pass_rate"],
    "mean_score": lambda r: -1 if r["mean_score"] is None else r["mean_score"],
    "activity": lambda r: r["last_activity"] or datetime.min.replace(tzinfo=UTC),
}
TASK_LIST_AGENTS = 6  # agents listed per task on the tasks page (beside the oracle)


def agent_tallies(attempts: QuerySet[Attempt]) -> list[tuple[str, str, Tally, bool]]:
    """(task slug, agent, tally, episodes) for each task and agent among `attempts`, a pool's
    episodes (`episodes`: True) apart from other attempts with the same label: one grouped
    query. Scored: passed, failed, timed out; excluded: every other ended attempt
    (infrastructure errors, cancellations, sandboxes closed without a check); running: not
    ended yet."""
    scored = Q(outcome__in=SCORED_OUTCOMES)
    rows = (
        attempts.order_by()
        .annotate(episode=ExpressionWrapper(Q(pool_index__isnull=False), BooleanField()))
        .values("task__slug", "agent", "episode")
        .annotate(
            scored=Count("pk", filter=scored),
            passed=Count("pk", filter=Q(outcome=Outcome.PASSED)),
            mean_score=Avg("score", filter=scored),
            excluded=Count("pk", filter=Q(status__in=DONE_STATUSES) & ~scored),
            running=Count("pk", filter=~Q(status__in=DONE_STATUSES)),
        )
    )
    return [
        (
            r["task__slug"],
            r["agent"],
            Tally(r["scored"], r["passed"], r["mean_score"], r["excluded"], r["running"]),
            bool(r["episode"]),
        )
        for r in rows
    ]


def _best(agents: list[AgentScores], attr: str) -> float | None:
    """The best value of `attr` among the agents that are ranked (not the oracle, not a pool's
    episodes)."""
    values = [getattr(a, attr) for a in agents if a.ranked]
    return max((v for v in values if v is not None), default=None)


def task_rows(*, search: str = "", sort: str = "slug") -> list[dict]:
    """Every task with its attempt counts by state (each attempt in exactly one: they add up
    to its total) and last activity (one query), and its
    scores per agent, the oracle apart (one grouped query). Sorting by pass rate or mean
    score uses the task's best agent that is not the oracle."""
    found = Task.objects.all()
    if search:
        found = found.filter(Q(slug__icontains=search) | Q(title__icontains=search))
    tasks = found.annotate(
        n_total=Count("attempts"),
        **{f"n_{s}": Count("attempts", filter=state_filter(s, "attempts__")) for s in STATES},
        last_activity=Max("attempts__created_at"),
    ).only("slug", "title", "validation", "validation_note")
    cells: dict[str, list] = {}
    for cell in agent_tallies(Attempt.objects.filter(task__in=found.values("pk"))):
        cells.setdefault(cell[0], []).append(cell)
    rows = []
    for t in tasks:
        agents = agent_scores(cells.get(t.slug, []))
        shown = [a for a in agents if not a.is_oracle][:TASK_LIST_AGENTS]
        more = sum(1 for a in agents if not a.is_oracle) - len(shown)
        shown += [a for a in agents if a.is_oracle]
        rows.append(
            {
                "task": t,
                "url": t.get_absolute_url(),
                "n": t.n_total,
                "states": state_counts({s: getattr(t, f"n_{s}") for s in STATES}),
                "agents": agents,
                "lines": shown or [None],  # a task without attempts still takes one line
                "more_agents": more,
                "span": max(len(shown), 1) + (1 if more else 0),
                "pass_rate": _best(agents, "pass_rate"),
                "mean_score": _best(agents, "mean_score"),
                "last_activity": t.last_activity,
            }
        )
    descending = sort.startswith("-")
    key = TASK_SORTS.get(sort.lstrip("-"), TASK_SORTS["slug"])
    return sorted(rows, key=key, reverse=descending)


def latest_checks(attempt_ids) -> dict[int, CheckResult]:
    """The last check of each attempt (one query)."""
    latest: dict[int, CheckResult] = {}
    # Pages need the counts, not every check's output and report: those load when read.
    checks = CheckResult.objects.filter(attempt_id__in=attempt_ids).defer("output", "junit_xml")
    for check in checks.order_by("created_at", "pk"):
        latest[check.attempt_id] = check
    return latest


def test_grid(attempts: list[Attempt]) -> dict:
    """Tests x attempts: each attempt's outcome per test in its last check ('not run' when
    absent), and the tests whose outcome differed between checks of the same files. A
    multi-step task's tests are named with their step (`scaffold: test_x`): each step's check
    verifies other files, so a test that differs between steps is no flaky test."""
    ids = [a.pk for a in attempts]
    rows = TestOutcome.objects.filter(check_result__attempt_id__in=ids).values_list(
        "check_result__attempt_id", "check_result__step", "name", "outcome"
    )
    cells: dict[tuple[int, str], str] = {}
    per_attempt: dict[tuple[int, str], set[str]] = {}
    for attempt_id, step, test, outcome in rows.order_by("check_result_id"):
        name = f"{step}: {test}" if step else test
        per_attempt.setdefault((attempt_id, name), set()).add(outcome)
        cells[(attempt_id, name)] = outcome  # ordered by check: the last one wins
    names = sorted({name for _, name in cells})
    flaky = sorted({name for (_, name), seen in per_attempt.items() if len(seen) > 1})
    grid = [
        {
            "name": name,
            "flaky": name in flaky,
            "cells": [cells.get((a.pk, name), "not run") for a in attempts],
        }
        for name in names
    ]
    return {"attempts": attempts, "rows": grid, "flaky": flaky}


PLOT = {"width": 640, "label": 150, "right": 24, "row": 34, "top": 24, "bottom": 40}
# One mark each in _plot_marks.html.
PLOT_MARKS = ("passed", "failed", "agent_timeout", "infra_error", "verifier_error", "cancelled")
PLOT_MAX_ROWS = 10  # agents drawn, most attempts first; the table lists every one


def plot_points(task: Task, limit: int = 500) -> dict:
    """The task page's scores panel (kept live while any attempt runs): each agent's scores at
    the task, the oracle apart (one grouped query), and its last `limit` finished attempts drawn
    one row per agent: attempt number across, duration up within the row, the outcome as the
    mark's shape and colour (one query)."""
    agents = agent_scores(agent_tallies(task.attempts.all()))
    found = list(
        task.attempts.exclude(finished_at=None)
        .exclude(started_at=None)
        .order_by("-number")
        .values_list("number", "agent", "started_at", "finished_at", "outcome")[:limit]
    )
    panel = {
        "agents": agents,
        "groups": grouped(agents),
        "k": K,
        "live": any(a.running for a in agents),
        "points": [],
    }
    if not found:
        return panel
    per_agent: dict[str, list] = {}
    for n, agent, started, finished, outcome in reversed(found):
        per_agent.setdefault(agent, []).append(
            (n, (finished - started).total_seconds(), outcome or "none")
        )
    order = list(dict.fromkeys(a.agent for a in agents if a.agent in per_agent))
    drawn = set(sorted(order, key=lambda a: -len(per_agent[a]))[:PLOT_MAX_ROWS])
    order = [a for a in order if a in drawn]
    scores = {a.agent: a for a in reversed(agents)}  # a label's attempts over its episodes
    numbers = [n for a in order for n, _, _ in per_agent[a]]
    lo, hi = min(numbers), max(numbers)
    top = max(secs for a in order for _, secs, _ in per_agent[a]) or 1.0
    g = PLOT
    x0, x1 = g["label"], g["width"] - g["right"]

    def x(n):  # marks keep clear of the axis on the left
        left = x0 + 10
        return round((left + x1) / 2 if hi == lo else left + (n - lo) / (hi - lo) * (x1 - left), 1)

    rows, points = [], []
    for i, agent in enumerate(order):
        row_top = g["top"] + i * g["row"]
        baseline = row_top + g["row"] - 6
        marks = [
            {
                "x": x(n),
                "y": round(baseline - secs / top * (g["row"] - 12), 1),
                "number": n,
                "seconds": round(secs, 2),
                "outcome": outcome,
                "mark": outcome if outcome in PLOT_MARKS else "cancelled",
                "agent": agent,
            }
            for n, secs, outcome in per_agent[agent]
        ]
        points += marks
        rows.append(
            {
                "agent": agent,
                "label": agent if len(agent) <= 20 else agent[:19] + "…",
                "scores": scores[agent],
                "top": row_top,
                "baseline": baseline,
                "name_y": row_top + 14,
                "note_y": row_top + 27,
                "marks": marks,
                "band": i % 2 == 0,
            }
        )
    bottom = g["top"] + len(rows) * g["row"]
    panel.update(
        {
            "points": points,
            "rows": rows,
            "hidden_agents": len(per_agent) - len(rows),
            "width": g["width"],
            "height": bottom + g["bottom"],
            "row_height": g["row"],
            "x0": x0,
            "x1": x1,
            "axis_y": bottom,
            "tick_y": bottom + 14,
            "title_y": bottom + 32,
            "middle": round((x0 + x1) / 2, 1),
            "max_seconds": round(top, 1),
            "first": lo,
            "last": hi,
            "first_x": x(lo),
            "last_x": x(hi),
        }
    )
    return panel


# --- SWE-bench prediction runs (predictions.py) ---------------------------------------------------
def attempt_result(attempt: Attempt) -> str:
    """A run's attempt as a result: resolved, unresolved, empty, error (infrastructure or
    cancelled) or running. (The run's report reads one thing more: whether the patch applied.)"""
    if (attempt.labels or {}).get("patch") == "empty":
        return "empty"
    if attempt.status not in DONE_STATUSES:
        return "running"
    if attempt.outcome == Outcome.PASSED:
        return "resolved"
    if attempt.outcome in (Outcome.FAILED, Outcome.AGENT_TIMEOUT):
        return "unresolved"
    return "error"


def run_names(*, task: Task | None = None) -> list[str]:
    """Every run's name (of evaluations with attempts at `task`, when given), newest first."""
    runs = Evaluation.objects.all()
    if task is not None:
        runs = runs.filter(attempts__task=task)
    names = runs.order_by("-created_at", "-pk").values_list("run_id", flat=True)
    return list(dict.fromkeys(names))


def run_latest_attempts(run_id: str, *, task: Task | None = None) -> dict[int, Attempt]:
    """A run's latest attempt at each task (a run may be evaluated more than once), by task id."""
    attempts = (
        Attempt.objects.filter(evaluation__run_id=run_id)
        .select_related("task")
        .only(
            "id", "number", "status", "outcome", "failure_reason", "labels", "agent", "task__slug"
        )
        .order_by("pk")
    )
    if task is not None:
        attempts = attempts.filter(task=task)
    return {a.task_id: a for a in attempts}


def runs_compared(a: str, b: str, *, task: Task | None = None) -> dict:
    """Two runs side by side: the instances resolved by one and not the other (both ways), with
    both attempts, and how many each resolved, both resolved, or only one attempted."""
    first, second = run_latest_attempts(a, task=task), run_latest_attempts(b, task=task)
    rows = []
    for task_id in sorted(set(first) & set(second), key=lambda t: first[t].task.slug):
        x, y = first[task_id], second[task_id]
        rows.append(
            {"task": x.task, "a": x, "b": y, "ra": attempt_result(x), "rb": attempt_result(y)}
        )
    return {
        "a": a,
        "b": b,
        "only_a": [r for r in rows if r["ra"] == "resolved" and r["rb"] != "resolved"],
        "only_b": [r for r in rows if r["rb"] == "resolved" and r["ra"] != "resolved"],
        "both": sum(1 for r in rows if r["ra"] == r["rb"] == "resolved"),
        "common": len(rows),
        "resolved_a": sum(1 for t in first.values() if attempt_result(t) == "resolved"),
        "resolved_b": sum(1 for t in second.values() if attempt_result(t) == "resolved"),
        "attempted_a": len(first),
        "attempted_b": len(second),
    }


# --- Leaderboard: agents x tasks (agent_scores.py holds the maths) --------------------------------
LEADERBOARD_TASKS = 60  # task columns on the page; the CSV has every one


def leaderboard(*, search: str = "", sort: str = "-pass_at_1") -> dict:
    """Every agent's scores over the tasks it attempted (those matching `search`), and its pass
    rate on each task: one grouped query. Rows sorted within their group (agents, built-in,
    oracle); the groups are never mixed."""
    attempts = Attempt.objects.all()
    if search:
        attempts = attempts.filter(
            Q(task__slug__icontains=search) | Q(task__title__icontains=search)
        )
    cells = agent_tallies(attempts)
    tasks = sorted({cell[0] for cell in cells})
    column, descending = sort_key(sort)
    ranked = sorted_agents(agent_scores(cells), column, descending)
    shown = tasks[:LEADERBOARD_TASKS]
    groups = grouped(ranked)
    return {
        "groups": groups,
        "rows": [
            (heading, [{"scores": a, "cells": [a.tallies.get(t) for t in shown]} for a in rows])
            for heading, rows in groups
        ],
        "tasks": tasks,
        "shown_tasks": shown,
        "column": column,
        "descending": descending,
        "k": K,
    }
