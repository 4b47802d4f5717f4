"""Sign-in is limited (docs/ACCESS.md): after BOLTZ_LOGIN_FAILURES wrong passwords for one user
name from one client, that client is refused (429, Retry-After) for that name until its window
ends, even with the right password; other clients are not; the count is shared by every web
process through Redis."""

from __future__ import annotations

import logging
import re
import uuid

import httpx
import pytest
from django.test import Client

from attempts.web import signin
from tests.conftest import run_web

pytestmark = pytest.mark.django_db

LIMIT = 5  # BOLTZ_LOGIN_FAILURES's default


@pytest.fixture
def alice(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    name = f"alice-{uuid.uuid4().hex[:8]}"
    return django_user_model.objects.create_user(name, password="right", is_staff=True)


def address() -> str:
    """A client address of this test's own, so no other test's failures count against it."""
    h = uuid.uuid4().hex
    return f"2001:db8::{h[:4]}:{h[4:8]}:{h[8:12]}"


def sign_in(client_address: str, username: str, password: str, page: str = "/login/"):
    client = Client(REMOTE_ADDR=client_address)
    return client, client.post(page, {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_past_the_limit_even_the_right_password_is_refused_with_429(alice):
    here = address()
    for _ in range(LIMIT):
        _, answer = sign_in(here, alice.username, "wrong")
        assert answer.status_code == 200
        assert "do not match" in answer.content.decode()
    client, answer = sign_in(here, alice.username, "right")
    assert answer.status_code == 429
    assert 0 < int(answer["Retry-After"]) <= 15 * 60
    assert (
        "Too many failed sign-ins from here: try again in 15 minute(s)." in answer.content.decode()
    )
    assert not signed_in(client)
    # Not locked for everyone: alice, from elsewhere, signs in.
    client, answer = sign_in(address(), alice.username, "right")
    assert answer.status_code == 302 and signed_in(client)


def test_the_right_password_starts_the_count_again(alice):
    here = address()
    for _ in range(LIMIT - 1):
        sign_in(here, alice.username, "wrong")
    client, answer = sign_in(here, alice.username, "right")
    assert answer.status_code == 302 and signed_in(client)
    for _ in range(LIMIT - 1):
        assert sign_in(here, alice.username, "wrong")[1].status_code == 200
    assert sign_in(here, alice.username, "right")[1].status_code == 302


def test_the_admins_sign_in_is_limited_alike(alice):
    here = address()
    for _ in range(LIMIT):
        assert sign_in(here, alice.username, "wrong", "/admin/login/")[1].status_code == 200
    client, answer = sign_in(here, alice.username, "right", "/admin/login/")
    assert answer.status_code == 429 and answer["Retry-After"]
    assert "Too many failed sign-ins from here" in answer.content.decode()
    assert not signed_in(client)
    # Its count and the login page's are one: the login page refuses alice from here too.
    assert sign_in(here, alice.username, "right")[1].status_code == 429


def test_a_right_password_refused_for_another_reason_is_not_a_failure(alice, django_user_model):
    """A user who is not staff, signing in at the admin with the right password, is told no
    by the admin: that is no guess, and never counts towards the limit."""
    bob = django_user_model.objects.create_user(f"bob-{uuid.uuid4().hex[:6]}", password="right")
    here = address()
    for _ in range(LIMIT + 2):
        answer = sign_in(here, bob.username, "right", "/admin/login/")[1]
        assert answer.status_code == 200
    assert sign_in(here, bob.username, "right")[1].status_code == 302


def test_one_client_failing_with_many_names_is_refused_for_every_name(alice):
    here = address()
    for i in range(LIMIT * signin.CLIENT_FACTOR):
        assert sign_in(here, f"guess-{i}", "wrong")[1].status_code == 200
    assert sign_in(here, alice.username, "right")[1].status_code == 429
    assert sign_in(address(), alice.username, "right")[1].status_code == 302


def test_behind_a_proxy_the_client_is_the_address_the_proxy_appended(alice, settings):
    """With BOLTZ_BEHIND_PROXY, the last X-Forwarded-For address is the client: what a client
    writes in front of it (to pose as another) changes nothing."""
    settings.BOLTZ_BEHIND_PROXY = True
    proxy, client_ip = "10.0.0.2", f"203.0.113.{uuid.uuid4().int % 250}"

    def through_proxy(forwarded: str, password: str):
        client = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=forwarded)
        return client.post("/login/", {"username": alice.username, "password": password})

    for i in range(LIMIT):
        posed = f"192.0.2.{i}, {client_ip}"  # a different made-up address each time
        assert through_proxy(posed, "wrong").status_code == 200
    assert through_proxy(client_ip, "right").status_code == 429
    # Another client behind the same proxy is not refused.
    assert through_proxy("203.0.113.251", "right").status_code == 302


def test_without_redis_sign_in_goes_on_and_the_log_says_so(alice, settings, caplog):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
    with caplog.at_level(logging.WARNING, logger="attempts.web.signin"):
        here = address()
        assert sign_in(here, alice.username, "wrong")[1].status_code == 200
        client, answer = sign_in(here, alice.username, "right")
    assert answer.status_code == 302 and signed_in(client)
    assert "the cache is unreachable" in caplog.text


def test_two_web_processes_share_one_count(django_db_setup, redis_ready):
    """Failures spread over two web processes (as over gunicorn's workers or two hosts) add
    up in Redis: the limit is the same as with one process."""
    name = f"nobody-{uuid.uuid4().hex[:8]}"
    with run_web() as first, run_web() as second:

        def fail(url: str) -> httpx.Response:
            with httpx.Client(base_url=url, timeout=30) as browser:
                page = browser.get("/login/").text
                token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
                return browser.post(
                    "/login/",
                    data={"username": name, "password": "wrong", "csrfmiddlewaretoken": token},
                )

        answers = [fail(url).status_code for url in (first, second, first, second, first)]
        assert answers == [200] * LIMIT
        refused = [fail(second), fail(first)]
    signin.reset("127.0.0.1", name)
    assert [r.status_code for r in refused] == [429, 429]
    assert all(int(r.headers["Retry-After"]) > 0 for r in refused)
