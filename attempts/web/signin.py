"""Sign-in, limited: failed sign-ins are counted per client address and user name in the
shared cache (Redis), and past the limit a sign-in form refuses with a wait (docs/ACCESS.md).

Counted in Redis, not in each process's memory: every web process (gunicorn's workers, several
hosts) sees the same counts, so running more processes does not allow more guesses. If the
cache cannot be reached, sign-in goes on unlimited and says so in the log: Boltz's pages stay
usable while Redis is down, and the login page cannot take Redis down."""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache

log = logging.getLogger(__name__)

# A client failing with many user names is refused altogether past this many times the limit.
CLIENT_FACTOR = 4


def client_address(request) -> str:
    """Who is signing in: the connecting address, or behind a reverse proxy
    (BOLTZ_BEHIND_PROXY) the address that proxy appended last to X-Forwarded-For."""
    if settings.BOLTZ_BEHIND_PROXY:
        forwarded = request.headers.get("X-Forwarded-For", "").rsplit(",", 1)[-1].strip()
        if forwarded:
            return forwarded[:100]
    return request.META.get("REMOTE_ADDR", "")


def _keys(client: str, username: str) -> dict[str, int]:
    """The counters a failure adds to, each with its limit: this client with this user name,
    and this client with any."""
    limit = settings.BOLTZ_LOGIN_FAILURES
    name = username.strip().lower()
    pair = hashlib.sha256(f"{client}\0{name}".encode()).hexdigest()[:32]
    alone = hashlib.sha256(client.encode()).hexdigest()[:32]
    return {f"signin:pair:{pair}": limit, f"signin:client:{alone}": limit * CLIENT_FACTOR}


def refused_for(client: str, username: str) -> int:
    """Seconds until this client may try this user name again (0: it may now)."""
    keys = _keys(client, username)
    try:
        found = cache.get_many([*keys, *(f"{k}:until" for k in keys)])
    except Exception as exc:  # noqa: BLE001 - any cache fault: sign-in goes on unlimited
        log.warning("sign-in limit not applied (the cache is unreachable): %s", exc)
        return 0
    waits = [
        found.get(f"{key}:until", 0) - time.time()
        for key, limit in keys.items()
        if found.get(key, 0) >= limit
    ]
    return max(1, math.ceil(max(waits))) if waits else 0


def failed(client: str, username: str) -> None:
    """One more failed sign-in; each count lasts BOLTZ_LOGIN_WINDOW from its first failure."""
    window = settings.BOLTZ_LOGIN_WINDOW
    try:
        for key in _keys(client, username):
            cache.add(f"{key}:until", time.time() + window, timeout=window)
            if not cache.add(key, 1, timeout=window):
                try:
                    cache.incr(key)
                except ValueError:  # it ran out between the two calls: a new window
                    cache.add(key, 1, timeout=window)
    except Exception as exc:  # noqa: BLE001
        log.warning("failed sign-in not counted (the cache is unreachable): %s", exc)


def reset(client: str, username: str) -> None:
    """Lift a refusal before its window ends (`manage.py shell`): both of the client's counts."""
    keys = _keys(client, username)
    cache.delete_many([*keys, *(f"{k}:until" for k in keys)])


def succeeded(client: str, username: str) -> None:
    """The right password: this client's count for this user name starts again."""
    pair = next(iter(_keys(client, username)))
    try:
        cache.delete_many([pair, f"{pair}:until"])
    except Exception as exc:  # noqa: BLE001
        log.warning("sign-in count not reset (the cache is unreachable): %s", exc)


class LimitedSignIn:
    """Refuses a sign-in while its client is over the limit, and counts wrong passwords (not a
    right password refused for another reason: an inactive user, or not staff at the admin)."""

    retry_after = 0

    def clean(self):
        username = self.data.get("username", "")
        client = client_address(self.request)
        self.retry_after = refused_for(client, username)
        if self.retry_after:
            minutes = math.ceil(self.retry_after / 60)
            raise forms.ValidationError(
                f"Too many failed sign-ins from here: try again in {minutes} minute(s).",
                code="too_many_tries",
            )
        try:
            return super().clean()
        finally:
            tried = self.cleaned_data.get("username") is not None and self.cleaned_data.get(
                "password"
            )
            if tried and self.user_cache is None:
                failed(client, username)
            elif self.user_cache is not None:
                succeeded(client, username)


class SignInForm(LimitedSignIn, AuthenticationForm):
    pass


class AdminSignInForm(LimitedSignIn, AdminAuthenticationForm):
    pass


def refuses_with_429(view):
    """A login view whose refusal for too many tries answers 429 with Retry-After."""

    @functools.wraps(view)
    def limited(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        wait = getattr(form, "retry_after", 0)
        if wait:
            response.status_code = 429
            response["Retry-After"] = str(wait)
        return response

    return limited


login = refuses_with_429(LoginView.as_view(authentication_form=SignInForm))
