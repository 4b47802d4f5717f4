"""The query parameters pages read, read strictly: a value a page cannot answer (a page number
that is not one, a sort or filter that is not among its choices) is a 400 page saying which and
what it takes, and a page past the last is a 404, both linking back to the page without it.
Never a silent fallback that shows something else than what the address asks for."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.paginator import Page, Paginator

from boltz_web.error_pages import BadQuery, NotFound

MAX_SHOWN = 100  # characters of a refused value said back on the page


def without(request, *names: str) -> str:
    """This page's address without the named parameters: the way back from a bad one."""
    query = request.GET.copy()
    for name in names:
        query.pop(name, None)
    return request.path + (f"?{query.urlencode()}" if query else "")


def choice(request, name: str, choices: Iterable[str], *, default: str = "") -> str:
    """The parameter `name`, which must be one of `choices` (missing or empty: `default`)."""
    value = request.GET.get(name, "") or default
    allowed = list(choices)
    if value and value not in allowed:
        raise BadQuery(
            f"{name}={value[:MAX_SHOWN]!r} is not one of this page's choices: "
            + ", ".join(allowed),
            back=without(request, name),
        )
    return value


def sorts(columns: Iterable[str]) -> list[str]:
    """A sortable list's sort choices: each column, and `-column` for the other way round."""
    return [f"{sign}{column}" for column in columns for sign in ("", "-")]


def number(request, name: str, *, default: int | None = None) -> int | None:
    """The parameter `name` as a whole number (missing or empty: `default`)."""
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadQuery(
            f"{name}={raw[:MAX_SHOWN]!r} is not a number", back=without(request, name)
        ) from None


def page_of(request, items, per_page: int) -> Page:
    """The page of `items` that ?page= asks for (the first without it)."""
    paginator = Paginator(items, per_page)
    wanted = number(request, "page", default=1)
    if not 1 <= wanted <= paginator.num_pages:
        raise NotFound(
            f"There is no page {wanted}: the list has {paginator.num_pages} "
            f"page{'s' if paginator.num_pages != 1 else ''}.",
            back=without(request, "page"),
        )
    return paginator.page(wanted)
