"""API tokens: made once, shown once, kept as a hash, revocable."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.utils import timezone

from attempts.models import ApiToken

PREFIX = "bz_"
# A token's "last used" is written at most once a minute: not a database write per request.
LAST_USED_PRECISION = timedelta(minutes=1)


def _hash(token: str) -> str:
    # Tokens are 32 random bytes: a plain hash is enough (no dictionary to guess from).
    return hashlib.sha256(token.encode()).hexdigest()


def callback_key(token: str) -> str:
    """The key that signs a token's callbacks: sha256 of the token, in hex. Its holder can
    compute it; Boltz keeps it (it is the token's stored hash) to sign with."""
    return _hash(token)


def token_create(*, user, name: str = "") -> tuple[ApiToken, str]:
    """A new token for `user`: (the row, the token itself, which is never stored)."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(user=user, name=name, prefix=token[:10], key_hash=_hash(token))
    return row, token


def token_user(token: str):
    """The active user a valid, unrevoked token belongs to, or None."""
    if not token or not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=_hash(token), revoked_at__isnull=True)
        .first()
    )
    if row is None or not row.user.is_active:
        return None
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.user


def token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
