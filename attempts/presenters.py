"""Timeline events as HTML list items. Written in Python rather than a template because a page
may hold thousands of events; every value from an agent is escaped here."""

from __future__ import annotations

from datetime import datetime
from html import escape

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from .capture import summary_text
from .timeline import exec_verdict

COLLAPSE_LINES = 6


def _pre(text: str, *, stream: str = "") -> str:
    """Output as preformatted text; past a few lines the rest is folded away."""
    label = f'<span class="stream">{escape(stream)}</span>' if stream else ""
    lines = text.split("\n")
    if len(lines) <= COLLAPSE_LINES:
        return f'{label}<pre class="out">{escape(text)}</pre>'
    head = "\n".join(lines[:COLLAPSE_LINES])
    rest = "\n".join(lines[COLLAPSE_LINES:])
    return (
        f'{label}<pre class="out">{escape(head)}</pre><details class="more"><summary>'
        f'{len(lines) - COLLAPSE_LINES} more lines</summary><pre class="out">{escape(rest)}'
        f"</pre></details>"
    )


def _stream(attempt_id: int, name: str, info: dict) -> str:
    if not info or not info.get("bytes"):
        return ""
    text = summary_text(info)
    notes = []
    if info.get("truncated"):
        notes.append(f"truncated: {info['bytes']} bytes in all, head and tail shown")
    if info.get("utf8") is False:
        notes.append("not valid UTF-8: shown with replacement characters")
    raw = info.get("raw")
    if raw:
        url = reverse("attempts:raw-output", args=[attempt_id, raw.rsplit("/", 1)[-1]])
        notes.append(f'<a href="{escape(url)}">full raw output</a>')
    note = f'<div class="note">{" · ".join(notes)}</div>' if notes else ""
    return _pre(text, stream=name) + note


# Badge classes for how a command ended (see timeline.exec_verdict).
VERDICT_CLASSES = {"stopped": "outcome-cancelled", "timed_out": "outcome-agent_timeout"}


def _details(attempt_id: int, kind: str, data: dict) -> str:
    if kind == "exec":
        command = f'<code class="cmd">$ {escape(data.get("command", ""))}</code>'
        if data.get("phase") == "start":
            return f'{command} <span class="muted">(limit {data.get("timeout", 0):g}s)</span>'
        tone, text = exec_verdict(data)
        if tone in ("ok", "bad"):
            text = f"exit {data.get('exit_code')}"  # the badge is short: "exit 0"
        badge = f'<span class="badge {VERDICT_CLASSES.get(tone, tone)}">{escape(text)}</span>'
        return (
            f"{command} {badge}"
            + _stream(attempt_id, "stdout", data.get("stdout") or {})
            + _stream(attempt_id, "stderr", data.get("stderr") or {})
        )
    if kind == "output":
        return _pre(data.get("text", ""), stream=data.get("stream", ""))
    if kind == "check":
        verdict = "passed" if data.get("passed") else "failed"
        tests = (
            f", {data.get('tests_passed')}/{data.get('tests_total')} tests"
            if data.get("tests_total")
            else ""
        )
        flipped = data.get("flipped") or []
        flaky = (
            f' <span class="badge outcome-infra_error">flaky: {escape(", ".join(flipped))}</span>'
            if flipped
            else ""
        )
        return (
            f'<span class="badge outcome-{verdict}">{verdict}</span> score '
            f"{escape(str(data.get('score')))} by {escape(str(data.get('source', '')))}{tests}"
            f"{flaky}"
        )
    if kind == "file":
        action = escape(str(data.get("action", "")))
        if data.get("path"):
            return f"{action} <code>{escape(data['path'])}</code>"
        parts = [
            f"{k} {escape(str(v))}"
            for k, v in data.items()
            if k in ("files", "bytes", "count", "omitted", "truncated")
        ]
        return f"{action}: {', '.join(parts)}"
    if kind == "message":
        return _pre(data.get("text", ""))
    message = escape(str(data.get("message") or data.get("reason") or ""))
    if kind == "error":
        tag = "infrastructure" if data.get("infrastructure") else "error"
        return f'<span class="badge outcome-infra_error">{tag}</span> {message}'
    return message


def event_item(event, start: datetime | None) -> str:
    data = event.data or {}
    offset = f"+{(event.time - start).total_seconds():.2f}s" if start else ""
    duration = data.get("duration")
    took = f"{duration:.2f}s" if isinstance(duration, int | float) else ""
    return (
        f'<li class="ev kind-{escape(event.kind)} actor-{escape(event.actor)}" '
        f'id="ev-{event.seq}" data-seq="{event.seq}">'
        f'<span class="seq">{event.seq}</span>'
        f'<time datetime="{event.time.isoformat()}">{event.time:%H:%M:%S}.'
        f"{event.time.microsecond // 1000:03d}</time>"
        f'<span class="off">{offset}</span><span class="dur">{took}</span>'
        f'<span class="actor">{escape(event.actor)}</span>'
        f'<span class="kind">{escape(event.kind)}</span>'
        f'<div class="what">{_details(event.attempt_id, event.kind, data)}</div></li>'
    )


def timeline_items(events, start: datetime | None) -> SafeString:
    return mark_safe("".join(event_item(e, start) for e in events))  # noqa: S308 - escaped above
