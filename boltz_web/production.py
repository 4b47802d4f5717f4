"""What BOLTZ_ENV=production refuses to start without: a strong secret key of its own, the
host names it answers to, a database server (not SQLite, unless BOLTZ_ALLOW_SQLITE=1 says a one-host
installation means it), and DEBUG off. All that is missing is named in one message."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from boltz_web.env_values import env_bool


def production_problems(*, database_url: str, debug: bool) -> list[str]:
    """What is missing or unsafe for production, one sentence each (empty: nothing)."""
    problems = []
    key = os.environ.get("BOLTZ_SECRET_KEY", "").strip()
    make_one = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
    if not key:
        problems.append(
            f"BOLTZ_SECRET_KEY is not set: give a long random value of your own ({make_one})"
        )
    elif len(key) < 50 or len(set(key)) < 5:  # Django's own measure (security.W009)
        problems.append(
            f"BOLTZ_SECRET_KEY is too weak ({len(key)} characters, {len(set(key))} different; "
            f"at least 50 and 5): a placeholder left in? Make one: {make_one}"
        )
    if not os.environ.get("BOLTZ_ALLOWED_HOSTS", "").strip(","):
        problems.append(
            "BOLTZ_ALLOWED_HOSTS is not set: give the host names this server answers to, "
            "comma separated (boltz.example.org)"
        )
    sqlite = not database_url or database_url.lower().startswith("sqlite")
    if sqlite and not env_bool("BOLTZ_ALLOW_SQLITE", False):
        problems.append(
            "DATABASE_URL names no database server (SQLite is for one host and a few users): "
            "give one (postgres://user:password@host:5432/boltz), or set BOLTZ_ALLOW_SQLITE=1 "
            "to keep SQLite on purpose"
        )
    if debug:
        problems.append("BOLTZ_DEBUG is on: debug pages show settings and code to anyone")
    return problems


def refuse_unsafe_production(*, database_url: str, debug: bool) -> None:
    problems = production_problems(database_url=database_url, debug=debug)
    if problems:
        raise ImproperlyConfigured(
            "BOLTZ_ENV=production will not start: "
            + "; ".join(problems)
            + ". (BOLTZ_ENV=development, the default, starts without them.)"
        )
