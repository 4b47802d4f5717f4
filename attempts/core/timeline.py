"""Writing an attempt's session timeline: events with a per-attempt `seq`, safe under replays."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Max

from attempts.core.errors import AttemptGone
from attempts.core.redaction import Redactor
from attempts.models import Actor, Attempt, Event

# What any single event keeps of a free text, so one event never outgrows a row.
MAX_TEXT = 64 * 1024


def clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut from this event ...]"


def exec_verdict(data: dict) -> tuple[str, str]:
    """How an exec-end event ended, as (tone, text): a reviewer stopped it, it timed out, or
    its exit code. One reading for the timeline page and the exports."""
    if data.get("stopped"):
        return "stopped", f"stopped: {data['stopped']}"
    if data.get("timed_out"):
        return "timed_out", "timed out"
    exit_code = data.get("exit_code")
    return ("ok" if exit_code == 0 else "bad"), f"exit code {exit_code}"


class Timeline:
    """Appends events to one attempt's timeline, numbering them 1, 2, 3, ... `secrets` (the
    worker's: redaction.secrets_of) are redacted from every string of every event it adds."""

    def __init__(self, attempt_id: int, *, secrets=()):
        self.attempt_id = attempt_id
        self._next: int | None = None
        self._redactor = Redactor(secrets)

    def expect(self, seq: int) -> None:
        """Start numbering at `seq` (a hint: if someone wrote there first, the top is read)."""
        self._next = seq

    def _reload(self) -> int:
        top = Event.objects.filter(attempt_id=self.attempt_id).aggregate(m=Max("seq"))["m"]
        return (top or 0) + 1

    def add(self, kind: str, actor: str = Actor.SYSTEM, **data) -> Event:
        data = self._redactor.data(data)
        for _ in range(10):
            if self._next is None:
                self._next = self._reload()
            seq = self._next
            try:
                with transaction.atomic():
                    event = Event.objects.create(
                        attempt_id=self.attempt_id, seq=seq, kind=kind, actor=actor, data=data
                    )
            except IntegrityError:
                if not Attempt.objects.filter(pk=self.attempt_id).exists():
                    raise AttemptGone(f"attempt {self.attempt_id} was deleted") from None
                # Someone else (the API, a reviewer) wrote this seq first: read the top again.
                self._next = None
                continue
            self._next = seq + 1
            return event
        raise RuntimeError(f"could not append to the timeline of attempt {self.attempt_id}")

    def reviewer(self, action: str, by: str, message: str, **data) -> Event:
        """An action a person took on the attempt (cancel, re-run, re-check, export, delete)."""
        from attempts.models import EventKind

        return self.add(
            EventKind.LIFECYCLE, actor=Actor.REVIEWER, action=action, by=by, message=message, **data
        )
