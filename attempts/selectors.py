"""Reads shared by pages and the command line."""

from __future__ import annotations

from collections import Counter

from django.db.models import QuerySet

from .models import SCORED_OUTCOMES, Attempt


def attempts_summary(attempts: QuerySet[Attempt]) -> str:
    """A plain-text table of attempts, then counts by outcome and the mean score."""
    rows = list(attempts.select_related("task").order_by("number"))
    lines = [f"{'attempt':>8}  {'status':<9} {'outcome':<14} {'score':>6} {'secs':>7}  reason"]
    for a in rows:
        score = "" if a.score is None else f"{a.score:.2f}"
        secs = "" if a.duration is None else f"{a.duration:.1f}"
        lines.append(
            f"{'#' + str(a.number):>8}  {a.status:<9} {a.outcome or '-':<14} "
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
