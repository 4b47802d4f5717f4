"""Reads shared by pages and the command line."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from math import comb

from django.db.models import Avg, Count, Max, Q, QuerySet
from django.shortcuts import get_object_or_404

from .models import (
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
    """How the command line names an attempt: both references it accepts, `fix-add#3 (id 17)`."""
    return f"{attempt.task.slug}#{attempt.number} (id {attempt.pk})"


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


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimate from n attempts of which c passed (None if n < k)."""
    if n < k:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


TASK_SORTS = {
    "slug": lambda r: r["task"].slug,
    "attempts": lambda r: r["n"],
    "pass_rate": lambda r: -1 if r["pass_rate"] is None else r["pass_rate"],
    "mean_score": lambda r: -1 if r["mean_score"] is None else r["mean_score"],
    "activity": lambda r: r["last_activity"] or datetime.min.replace(tzinfo=UTC),
}


def task_rows(*, search: str = "", sort: str = "slug") -> list[dict]:
    """Every task with its attempt counts by outcome, pass rate, pass@1/@5, mean score and
    last activity: one query."""
    scored = Q(attempts__outcome__in=SCORED_OUTCOMES)
    tasks = Task.objects.annotate(
        n_total=Count("attempts"),
        n_scored=Count("attempts", filter=scored),
        **{f"n_{o}": Count("attempts", filter=Q(attempts__outcome=o)) for o in Outcome.values},
        n_active=Count("attempts", filter=~Q(attempts__status__in=DONE_STATUSES)),
        mean_score=Avg("attempts__score", filter=scored),
        last_activity=Max("attempts__created_at"),
    ).only("slug", "title", "validation", "validation_note")
    if search:
        tasks = tasks.filter(Q(slug__icontains=search) | Q(title__icontains=search))
    rows = []
    for t in tasks:
        n, c = t.n_scored, t.n_passed
        rows.append(
            {
                "task": t,
                "n": t.n_total,
                "scored": n,
                "active": t.n_active,
                "counts": {o: getattr(t, f"n_{o}") for o in Outcome.values},
                "pass_rate": c / n if n else None,
                "pass_at_1": pass_at_k(n, c, 1),
                "pass_at_5": pass_at_k(n, c, 5),
                "mean_score": t.mean_score,
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
    absent), and the tests whose outcome differed between checks of the same files."""
    ids = [a.pk for a in attempts]
    rows = TestOutcome.objects.filter(check_result__attempt_id__in=ids).values_list(
        "check_result__attempt_id", "name", "outcome"
    )
    cells: dict[tuple[int, str], str] = {}
    per_attempt: dict[tuple[int, str], set[str]] = {}
    for attempt_id, name, outcome in rows.order_by("check_result_id"):
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


def plot_points(task: Task, limit: int = 500) -> dict:
    """Recent finished attempts as (number, seconds, outcome) for the task page's plot."""
    rows = list(
        task.attempts.exclude(finished_at=None)
        .exclude(started_at=None)
        .order_by("-number")
        .values_list("number", "started_at", "finished_at", "outcome")[:limit]
    )
    points = [(n, (f - s).total_seconds(), o) for n, s, f, o in reversed(rows)]
    if not points:
        return {"points": [], "width": 640, "height": 160}
    width, height, pad = 640, 160, 28
    lo, hi = points[0][0], points[-1][0]
    top = max(p[1] for p in points) or 1.0
    placed = [
        {
            "x": round(pad + (n - lo) / max(hi - lo, 1) * (width - 2 * pad), 1),
            "y": round(height - pad - secs / top * (height - 2 * pad), 1),
            "number": n,
            "seconds": round(secs, 2),
            "outcome": o or "none",
        }
        for n, secs, o in points
    ]
    return {
        "points": placed,
        "width": width,
        "height": height,
        "pad": pad,
        "max_seconds": round(top, 1),
        "first": lo,
        "last": hi,
        "baseline": height - pad,
    }


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
