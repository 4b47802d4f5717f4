"""Reads of an attempt's timeline for a long session: its outline (one query of light rows: no
outputs), one window of events (with the ends of the commands it starts, however far on), and
a search over every event of the session, not just the window a page shows."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Q
from django.db.models.fields.json import KT
from django.db.models.functions import Substr

from attempts.core.ansi import strip_ansi
from attempts.core.session_outline import COMMAND_CHARS, Outline, build_outline, window_bounds
from attempts.models import Event

# The data keys the outline reads, each as text (the outline parses numbers and flags).
OUTLINE_KEYS = (
    "phase",
    "exec",
    "status",
    "step",
    "outcome",
    "action",
    "by",
    "exit_code",
    "timed_out",
    "stopped",
)
# Search: the most matches listed, the longest query, the characters around a match shown.
SEARCH_LIMIT = 200
MAX_QUERY = 200
SNIPPET_CHARS = 70
# Events read per batch when the search cannot narrow in the database first.
SCAN_BATCH = 500


def session_outline(*, attempt_id: int) -> Outline:
    """The outline of an attempt's whole timeline (see attempts.core.session_outline)."""
    fields = {key: KT(f"data__{key}") for key in OUTLINE_KEYS}
    fields["command"] = Substr(KT("data__command"), 1, COMMAND_CHARS)
    rows = (
        Event.objects.filter(attempt_id=attempt_id)
        .order_by("seq")
        .values("seq", "kind", "actor", **fields)
    )
    return build_outline(rows.iterator(chunk_size=2000))


def window_events(*, attempt_id: int, outline: Outline, window: int, kind: str = "") -> list:
    """The events of one window, in seq order, for the timeline presenter: a command started in
    it comes with its end (however far on); a command that started in an earlier window is left
    out (its row is drawn where it started)."""
    first, last = window_bounds(window)
    ends_after = [
        end
        for number, start in outline.exec_start.items()
        if first <= start <= last and (end := outline.exec_end.get(number)) and end > last
    ]
    earlier_ends = {
        end
        for number, end in outline.exec_end.items()
        if first <= end <= last and outline.exec_start.get(number, end) < first
    }
    events = Event.objects.filter(attempt_id=attempt_id).filter(
        Q(seq__gte=first, seq__lte=last) | Q(seq__in=ends_after)
    )
    if kind:
        events = events.filter(kind=kind)
    return [e for e in events.order_by("seq") if e.seq not in earlier_ends]


@dataclass
class Hit:
    seq: int
    kind: str
    exec_number: int | None
    snippet: str


def _texts(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _snippet(text: str, at: int, size: int) -> str:
    start = max(0, at - SNIPPET_CHARS)
    end = min(len(text), at + size + SNIPPET_CHARS)
    piece = " ".join(text[start:end].split())
    return ("… " if start else "") + piece + (" …" if end < len(text) else "")


def search_events(*, attempt_id: int, query: str) -> tuple[list[Hit], bool]:
    """Events of the attempt whose text (commands, outputs as kept, messages, reasons) holds
    `query`, case-insensitive, terminal colours ignored: the first SEARCH_LIMIT rows in seq
    order (a command counts once, at its first matching event), and whether there were more."""
    query = query.strip()[:MAX_QUERY]
    wanted = query.casefold()
    if not wanted:
        return [], False
    events = Event.objects.filter(attempt_id=attempt_id).order_by("seq")
    # The database narrows first, by the query's longest ASCII word (stored JSON escapes other
    # characters; a colour code sits between words or next to punctuation, not inside a word);
    # the match itself is always decided here, on the text with its colours stripped.
    words = re.findall(r"[A-Za-z0-9_]+", query)
    if words:
        events = events.filter(data__icontains=max(words, key=len))
    hits: list[Hit] = []
    commands = set()  # a command's output events and its end are one row: its first match
    for event in events.only("seq", "kind", "data").iterator(chunk_size=SCAN_BATCH):
        number = event.data.get("exec") if isinstance(event.data, dict) else None
        if number is not None and number in commands:
            continue
        for text in _texts(event.data):
            plain = strip_ansi(text)
            at = plain.casefold().find(wanted)
            if at >= 0:
                if len(hits) == SEARCH_LIMIT:
                    return hits, True
                if number is not None:
                    commands.add(number)
                hits.append(Hit(event.seq, event.kind, number, _snippet(plain, at, len(query))))
                break
    return hits, False
