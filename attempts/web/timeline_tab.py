"""The attempt page's timeline tab at any length: one window of events (page), the outline of
the whole session (stages, commands, failures, jumps to the check, the first failure and the
end, each landing on its window), and the server-side search's matches, each a link to its
row. A running attempt opens on its last window, where the live tail is; a finished one on its
first."""

from __future__ import annotations

from django.http import Http404

from attempts.core.session_outline import WINDOW, Mark, window_bounds
from attempts.services.timeline_pages import (
    MAX_QUERY,
    SEARCH_LIMIT,
    search_events,
    session_outline,
    window_events,
)
from attempts.web.presenters import render_timeline, stage_continued

# Page links the pager shows on either side of the current page.
PAGER_SPAN = 2


def _window(request, count: int, *, live: bool) -> int:
    raw = request.GET.get("page", "")
    if raw in ("", "last"):
        return count if (live or raw == "last") else 1
    try:
        window = int(raw)
    except ValueError:
        raise Http404("page must be a number") from None
    if not 1 <= window <= count:
        raise Http404(f"this timeline has pages 1 to {count}")
    return window


def _pager(window: int, count: int) -> list[int | None]:
    """Page numbers to link (None: a gap), the first and last always."""
    near = set(range(window - PAGER_SPAN, window + PAGER_SPAN + 1)) | {1, count}
    shown = sorted(n for n in near if 1 <= n <= count)
    pages: list[int | None] = []
    for n in shown:
        if pages and n - pages[-1] > 1:
            pages.append(None)
        pages.append(n)
    return pages


def link(mark: Mark | None) -> str:
    """The address of a mark from the attempt page."""
    if mark is None:
        return ""
    return f"?view=timeline&page={mark.window}#{mark.anchor}"


def timeline_context(request, attempt, *, kind: str, live: bool) -> dict:
    """What attempt_detail.html's timeline tab needs. `kind`: only events of this kind ('' for
    all); `live`: the attempt may still add events."""
    outline = session_outline(attempt_id=attempt.pk)
    count = outline.window_count
    window = _window(request, count, live=live)
    events = window_events(attempt_id=attempt.pk, outline=outline, window=window, kind=kind)
    if window == 1 and events and not kind:
        start = events[0].time
    else:
        start = attempt.events.order_by("seq").values_list("time", flat=True).first()
    continued = outline.stage_at.get(window, "") if window > 1 else ""
    shown = render_timeline(events, start, attempt_id=attempt.pk, stage=continued, live=live)
    items = stage_continued(continued, window) + shown.items if continued else shown.items
    query = request.GET.get("q", "").strip()[:MAX_QUERY]
    hits, more = search_events(attempt_id=attempt.pk, query=query) if query else ([], False)
    found, seen = [], set()
    for hit in hits:
        mark = outline.mark(hit.seq, hit.kind, hit.exec_number)
        if mark.anchor not in seen:  # a command's output events and its end: one row
            seen.add(mark.anchor)
            found.append({"hit": hit, "href": link(mark), "window": mark.window})
    last_window = window == count
    return {
        "items": items,
        "open": ",".join(map(str, shown.open)),
        "stage": shown.stage,
        "kind": kind,
        "after": outline.last_seq,
        # Only the last page takes new events as they come; another page follows the header.
        "follow": last_window,
        "outline": outline,
        "jumps": [
            {"key": key, "label": label, "missing": missing, "href": link(mark)}
            for key, label, missing, mark in (
                ("check", "the check", "no check yet", outline.check),
                ("failure", "the first failure", "no failure", outline.first_failure),
                ("end", "the end", "no events yet", outline.end),
            )
        ],
        "stages": [{"part": p, "href": link(p.mark)} for p in outline.stages],
        "failures": [{"mark": m, "href": link(m)} for m in outline.failures],
        "window": window,
        "window_first": window_bounds(window)[0],
        "window_last": min(window_bounds(window)[1], outline.last_seq),
        "also": f"&kind={kind}" if kind else "",
        "window_count": count,
        "window_size": WINDOW,
        "pager": _pager(window, count),
        "previous_window": window - 1 if window > 1 else None,
        "next_window": window + 1 if window < count else None,
        "q": query,
        "found": found,
        "found_more": more,
        "search_limit": SEARCH_LIMIT,
    }
