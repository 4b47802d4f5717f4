"""The pools dashboard: each pool's numbers, and each environment's episodes linked to their
attempt pages (whose timeline shows every step)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber
from django.shortcuts import get_object_or_404, render

from attempts.models import Attempt, Pool
from attempts.services.pools import pool_summary, visible_pools
from attempts.web.query_params import page_of
from attempts.web.views import view_required

POOLS_PER_PAGE = 50
# Earlier episodes linked per environment; the rest are counted. A long-running pool resets
# its environments many times: the page and its polls stay the same size.
EARLIER_SHOWN = 10
# The badge class of each environment state (episode_state), in the dashboard's colours.
STATE_BADGES = {
    "live": "status-running",
    "starting": "status-starting",
    "terminated": "status-finished",
    "truncated": "outcome-cancelled",
    "reset": "outcome-cancelled",
    "failed": "outcome-infra_error",
}


@login_required
@view_required
def pool_list(request):
    pools = visible_pools(request.user).select_related("owner").order_by("-created_at", "-pk")
    page = page_of(request, pools, POOLS_PER_PAGE)
    rows = list(page.object_list)
    for pool in rows:
        pool.distinct_tasks = list(dict.fromkeys(pool.tasks))
        pool.label_pairs = sorted(pool.labels.items())
    return render(request, "attempts/pool_list.html", {"page": page, "pools": rows})


@login_required
@view_required
def pool_detail(request, pk):
    """The pool, its groups' rewards and its environments; while open, the live part polls this
    same page and swaps itself in (hx-select)."""
    pool = get_object_or_404(visible_pools(request.user).select_related("owner"), pk=pk)
    pool.label_pairs = sorted(pool.labels.items())  # a list: a label named "items" stays a label
    summary = pool_summary(pool)
    history = _episode_history(pool)
    envs = summary["envs"]
    for env in envs:
        env["badge"] = STATE_BADGES.get(env["state"], "")
        episodes, total = history.get(env["index"], ([], 0))
        env["earlier"] = [e for e in episodes if e.pk != env["episode"]]
        current = next((e for e in episodes if e.pk == env["episode"]), None)
        env["episode_name"] = current.name if current is not None else ""
        env["earlier_total"] = total - (1 if env["episode"] else 0)
        env["earlier_more"] = env["earlier_total"] - len(env["earlier"])
    return render(
        request,
        "attempts/pool_detail.html",
        {
            "pool": pool,
            "envs": envs,
            "groups": summary["groups"],
            "live": pool.closed_at is None,
        },
    )


def _episode_history(pool: Pool) -> dict[int, tuple[list[Attempt], int]]:
    """Each environment's latest episodes (the current one and up to EARLIER_SHOWN before it),
    newest first, and how many it had: one query, however many times the pool was reset."""
    rows = (
        Attempt.objects.filter(pool=pool)
        .select_related("task")
        .only(
            "id",
            "number",
            "task__slug",
            "pool_index",
            "episode_end",
            "episode_steps",
            "created_at",
        )
        .annotate(
            nth=Window(RowNumber(), partition_by=F("pool_index"), order_by=F("pk").desc()),
            total=Window(Count("pk"), partition_by=F("pool_index")),
        )
        .filter(nth__lte=EARLIER_SHOWN + 1)
        .order_by("pool_index", "-pk")
    )
    history: dict[int, tuple[list[Attempt], int]] = {}
    for episode in rows:
        history.setdefault(episode.pool_index, ([], episode.total))[0].append(episode)
    return history
