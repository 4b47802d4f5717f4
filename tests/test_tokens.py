"""API tokens: made by the command or the admin, shown once, kept hashed, revocable."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from attempts.models import ApiToken

pytestmark = pytest.mark.django_db


def api_get(client, token: str | None, path: str = "/api/tasks"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return client.get(path, **headers)


def test_create_token_prints_a_token_that_works_and_only_its_hash_is_kept(
    client, django_user_model
):
    django_user_model.objects.create_user("carol")
    out = StringIO()
    call_command("create_token", "carol", "--name", "laptop", stdout=out)
    token = out.getvalue().strip()
    assert token.startswith("bz_") and len(token) > 40
    row = ApiToken.objects.get()
    assert row.name == "laptop" and token not in (row.key_hash, row.prefix)
    assert api_get(client, token).status_code == 200
    assert api_get(client, None).status_code == 401
    assert api_get(client, token[:-1] + "x").status_code == 401
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_create_token_for_an_unknown_user_says_so():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("create_token", "nobody")


def test_the_admin_makes_a_token_shows_it_once_and_revokes_it(admin_client, client, admin_user):
    answer = admin_client.post(
        "/admin/attempts/apitoken/add/", {"user": admin_user.pk, "name": "ci"}, follow=True
    )
    token = re.search(r"(bz_[\w-]+)", answer.content.decode()).group(1)
    assert api_get(client, token).status_code == 200
    listing = admin_client.get("/admin/attempts/apitoken/").content.decode()
    assert token not in listing  # shown once, never again
    row = ApiToken.objects.get()
    admin_client.post(
        "/admin/attempts/apitoken/",
        {"action": "revoke", "_selected_action": [row.pk]},
    )
    assert api_get(client, token).status_code == 401
    assert ApiToken.objects.get().revoked_at is not None
