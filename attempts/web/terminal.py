"""Terminal output in templates, built in with the other filters (settings.TEMPLATES'
`builtins`), so no page shows a raw escape sequence:

- `{{ text|ansi }}`: escaped, its colours as `ansi-…` classes (attempt.css colours them for
  light and dark mode); for a `<pre>` of what a command printed (the check's output).
- `{{ text|ansi_junit }}`: the same for a JUnit message, where pytest wrote ESC as `#x1B`.
- `{{ text|noansi }}`: escaped and stripped of escapes, for pages without the colour styles.
"""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

from attempts.core.ansi import ansi_html, strip_ansi

register = template.Library()


@register.filter(name="ansi")
def ansi(text) -> str:
    return mark_safe(ansi_html(str(text or "")))  # noqa: S308 - ansi_html escapes every character


@register.filter(name="ansi_junit")
def ansi_junit(text) -> str:
    return mark_safe(ansi_html(str(text or ""), junit=True))  # noqa: S308 - escaped, as above


@register.filter(name="noansi")
def noansi(text) -> str:
    return escape(strip_ansi(str(text or "")))
