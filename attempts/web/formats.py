"""How every page writes a score and an attempt's state: one filter and one tag, built into the
templates (settings.TEMPLATES' `builtins`), so no page formats either its own way.

- `{{ value|score }}`: a score, reward or pass@k with two decimals ("0.75"), "–" for none.
- `{% state_badge attempt %}`: the attempt's one state badge (attempt_states.py), with an id
  when given (`{% state_badge attempt id="attempt-status" %}`).
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from attempts.core.agent_scores import score_text
from attempts.core.attempt_states import STATES, state_of

register = template.Library()


@register.filter(name="score")
def score(value) -> str:
    try:
        return score_text(None if value is None or value == "" else float(value))
    except (TypeError, ValueError):
        return "–"


@register.simple_tag
def state_badge(attempt, id: str = "") -> str:  # noqa: A002 - the HTML attribute's name
    label, badge = STATES[state_of(attempt.status, attempt.outcome)]
    if id:
        return format_html('<span class="badge {}" id="{}">{}</span>', badge, id, label)
    return format_html('<span class="badge {}">{}</span>', badge, label)
