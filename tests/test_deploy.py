"""Production settings (docs/ACCESS.md, "HTTPS and a reverse proxy"): `manage.py check --deploy`
finds nothing with them; the demo's plain-http defaults are exactly what it warns about; a
served process with BOLTZ_HTTPS redirects http and, behind a proxy, answers https with HSTS and
secure cookies."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import run_web

ROOT = Path(__file__).resolve().parent.parent
# What the test run's environment may hold that a production server's would not.
NOT_PRODUCTION = (
    "BOLTZ_DEBUG",
    "BOLTZ_HTTPS",
    "BOLTZ_SECRET_KEY",
    "BOLTZ_HSTS_SECONDS",
    "DJANGO_ALLOW_ASYNC_UNSAFE",  # set by the browser tests' fixtures
)


def production_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_PRODUCTION}
    return {
        **env,
        "BOLTZ_SECRET_KEY": secrets.token_urlsafe(50),
        "BOLTZ_ALLOWED_HOSTS": "boltz.example.org",
        "BOLTZ_HTTPS": "true",
    }


def deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_deploy_check_finds_nothing_with_production_settings():
    done = deploy_check(production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout + done.stderr


def test_the_demos_plain_http_is_what_the_deploy_check_warns_about():
    """Not a vacuous pass: with the demo's environment (no key, no https) it fails, naming
    the development key and each https setting production turns on."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_PRODUCTION}
    done = deploy_check(env)
    assert done.returncode != 0
    found = set(re.findall(r"security\.W\d+", done.stdout + done.stderr))
    assert found == {
        "security.W004",  # HSTS
        "security.W008",  # SSL redirect
        "security.W009",  # the development secret key
        "security.W012",  # session cookie over https only
        "security.W016",  # CSRF cookie over https only
    }


def test_the_demo_serves_plain_http(client):
    """The test run's settings are the demo's: no redirect, no HSTS, cookies over http."""
    answer = client.get("/login/")
    assert answer.status_code == 200
    assert "Strict-Transport-Security" not in answer.headers
    assert not answer.cookies["csrftoken"]["secure"]


def test_with_https_http_is_redirected_and_https_has_hsts_and_secure_cookies(django_db_setup):
    env = {"BOLTZ_HTTPS": "true", "BOLTZ_BEHIND_PROXY": "true"}
    with run_web(env) as url:
        plain = httpx.get(url + "/login/?next=/", timeout=30)
        assert plain.status_code == 301
        assert plain.headers["Location"] == url.replace("http://", "https://") + "/login/?next=/"
        # Through the proxy that ended TLS: https, remembered for a year.
        secure = httpx.get(url + "/login/", headers={"X-Forwarded-Proto": "https"}, timeout=30)
        assert secure.status_code == 200
        hsts = secure.headers["Strict-Transport-Security"]
        assert hsts == "max-age=31536000; includeSubDomains"
        cookie = secure.headers["Set-Cookie"]
        assert cookie.startswith("csrftoken=") and "Secure" in cookie
    # Without the proxy setting, the same header is not believed: still redirected.
    with run_web({"BOLTZ_HTTPS": "true"}) as url:
        claimed = httpx.get(url + "/login/", headers={"X-Forwarded-Proto": "https"}, timeout=30)
        assert claimed.status_code == 301


def test_a_bad_https_setting_stops_the_start_with_its_name():
    env = {**production_env(), "BOLTZ_HTTPS": "sometimes"}
    done = deploy_check(env)
    assert done.returncode != 0 and "BOLTZ_HTTPS='sometimes'" in done.stderr
