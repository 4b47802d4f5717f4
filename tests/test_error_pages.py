"""Pages a user can live with, and light on the wire: error pages in Boltz's layout with a way
back, a visit to an action's URL asks first, signing out lands on the sign-in page, a bad start
form comes back with the error beside its field, the command agent's box and files, seconds in
the admin; gzip for pages (never streams), hashed static files cached for a year, and live
polling that pauses while the tab is hidden (the last three in a served process and Chromium)."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from datetime import UTC, datetime

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, RequestFactory

from attempts.models import Attempt, Task
from tests.conftest import ROOT, chromium, new_task, run_web, signed_in_page, wait_finished

LAYOUT = '<a class="brand" href="/">Boltz</a>'
TASKS_LINK = '<a href="/">Back to the tasks</a>'


def make_attempt(task: Task, number: int = 1, **fields) -> Attempt:
    values = {"agent": "noop", "status": "finished", "outcome": "failed", **fields}
    return Attempt.objects.create(task=task, number=number, **values)


def in_layout(response) -> str:
    html = response.content.decode()
    assert LAYOUT in html and "boltz" in html and 'rel="stylesheet"' in html, html[:500]
    return html


# --- error pages ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_not_found_and_not_allowed_are_pages_in_the_layout_with_a_way_back(
    admin_client, client, django_user_model
):
    missing = admin_client.get("/tasks/nope/")
    assert missing.status_code == 404
    assert "Not found" in in_layout(missing) and TASKS_LINK in missing.content.decode()

    attempt = make_attempt(new_task("fix-add"))
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw")
    viewer.user_permissions.add(Permission.objects.get(codename="view_attempt"))
    client.login(username="viewer", password="pw")
    refused = client.post(f"/attempts/{attempt.pk}/cancel/")
    assert refused.status_code == 403
    html = in_layout(refused)
    assert "lacks the permission" in html and "viewer" in html and TASKS_LINK in html


def way_back(html: str) -> str:
    """The error page's way back (the first link of its `way-back` paragraph)."""
    found = re.search(r'<p class="way-back"><a href="([^"]*)">', html)
    assert found, html[-800:]
    return found.group(1).replace("&amp;", "&")


# Every error path of every page (attempts/web/urls.py, view by view): the address, the status,
# what the page must say, and where its way back leads ("/" the tasks, or the page without what
# went wrong). `{a}` is an attempt's id, `{run}` an evaluation's, `{pool}` a pool's.
ERROR_PATHS = [
    ("/no/such/page/", 404, "Not found", "/"),
    ("/?sort=colour", 400, "sort=&#x27;colour&#x27; is not one of", "/"),
    ("/?q=x&sort=-colour", 400, "sort=&#x27;-colour&#x27;", "/?q=x"),
    ("/tasks/nope/", 404, "No Task matches", "/"),
    ("/tasks/fix-add/?outcome=great", 400, "outcome=&#x27;great&#x27; is not one of", "/tasks/fix-add/"),
    ("/tasks/fix-add/?page=two", 400, "page=&#x27;two&#x27; is not a number", "/tasks/fix-add/"),
    ("/tasks/fix-add/?agent=noop&page=9", 404, "There is no page 9: the list has 1 page.", "/tasks/fix-add/?agent=noop"),
    ("/tasks/fix-add/attempts/?page=0", 404, "There is no page 0", "/tasks/fix-add/attempts/"),
    ("/tasks/fix-add/compare/", 400, "Pick two attempts of fix-add to compare", "/tasks/fix-add/"),
    ("/tasks/fix-add/compare/?a=1", 400, "Pick two attempts", "/tasks/fix-add/"),
    ("/tasks/fix-add/compare/?a=1&b=x", 400, "b=&#x27;x&#x27; is not a number", "/tasks/fix-add/compare/?a=1"),
    ("/tasks/fix-add/compare/?a=1&b=7", 404, "fix-add has no attempt #7.", "/tasks/fix-add/"),
    ("/tasks/fix-add/compare/?a=-1&b=1", 404, "fix-add has no attempt #-1.", "/tasks/fix-add/"),
    ("/tasks/nope/compare/?a=1&b=2", 404, "No Task matches", "/"),
    ("/tasks/nope/scores/", 404, "No Task matches", "/"),
    ("/tasks/nope/start/", 404, "No Task matches", "/"),
    ("/tasks/nope/export.jsonl", 404, "No Task matches", "/"),
    ("/attempts/999999/", 404, "Not found", "/"),
    ("/attempts/{a}/?view=logs", 400, "view=&#x27;logs&#x27; is not one of", "/attempts/{a}/"),
    ("/attempts/{a}/?kind=noise", 400, "kind=&#x27;noise&#x27; is not one of", "/attempts/{a}/"),
    ("/attempts/{a}/timeline/?after=last", 400, "after=&#x27;last&#x27; is not a number", "/attempts/{a}/timeline/"),
    ("/attempts/{a}/changes/5/", 404, "no such file in the diff", "/"),
    ("/attempts/{a}/outputs/nothing.txt", 404, "no such output", "/"),
    ("/attempts/999999/export.zip", 404, "Not found", "/"),
    ("/attempts/999999/cancel/", 404, "Not found", "/"),
    ("/attempts/{a}/delete/everything/", 404, "delete the sandbox or the attempt", "/"),
    ("/leaderboard/?sort=colour", 400, "is not a column of the leaderboard", "/leaderboard/"),
    ("/leaderboard/?format=xml", 400, "format=&#x27;xml&#x27; is not one of", "/leaderboard/"),
    ("/pools/?page=x", 400, "page=&#x27;x&#x27; is not a number", "/pools/"),
    ("/pools/?page=2", 404, "There is no page 2", "/pools/"),
    ("/pools/999999/", 404, "No Pool matches", "/"),
    ("/runs/?page=3", 404, "There is no page 3", "/runs/"),
    ("/runs/999999/", 404, "No Evaluation matches", "/"),
    ("/runs/999999/report.json", 404, "No Evaluation matches", "/"),
    ("/runs/compare/", 400, "Pick two runs to compare", "/runs/"),
    ("/runs/compare/?a=nightly", 400, "Pick two runs to compare", "/runs/"),
    ("/runs/compare/?a=nightly&b=nope", 404, "There is no run named “nope”.", "/runs/"),
    ("/runs/compare/?a=nightly&b=nightly&task=nope", 404, "There is no task “nope”.", "/runs/compare/?a=nightly&b=nightly"),
]  # fmt: skip


@pytest.mark.django_db
def test_every_error_path_of_every_page_is_a_page_in_the_layout_saying_what_and_a_way_back(
    admin_client,
):
    from attempts.models import Evaluation

    attempt = make_attempt(new_task("fix-add"))
    Evaluation.objects.create(run_id="nightly", models_evaluated=["m"], state="finished")
    for path, status, said, back in ERROR_PATHS:
        path, back = (x.replace("{a}", str(attempt.pk)) for x in (path, back))
        response = admin_client.get(path)
        assert response.status_code == status, (path, response.status_code)
        html = in_layout(response)
        assert said in html, (path, html[html.find("<main") :][:1200])
        assert way_back(html) == back, path
    # The way back is where the user came from, when it is a page of this site.
    came_from = "http://testserver/tasks/fix-add/?outcome=failed"
    gone = admin_client.get("/attempts/999999/", HTTP_REFERER=came_from)
    assert way_back(gone.content.decode()) == came_from
    assert '<a href="/">the tasks</a>' in gone.content.decode()
    elsewhere = admin_client.get("/attempts/999999/", HTTP_REFERER="https://evil.example/")
    assert way_back(elsewhere.content.decode()) == "/"
    # What a page was asked with is said back escaped, and cut.
    odd = admin_client.get("/?sort=<script>" + "x" * 500)
    assert "<script>" not in odd.content.decode() and "x" * 101 not in odd.content.decode()


@pytest.mark.django_db
def test_wrong_methods_on_pages_are_405_pages_in_the_layout(admin_client):
    attempt = make_attempt(new_task("fix-add"))
    for method, path in (
        ("put", "/tasks/fix-add/start/"),
        ("delete", f"/attempts/{attempt.pk}/cancel/"),
        ("put", f"/attempts/{attempt.pk}/rerun/"),
        ("patch", f"/attempts/{attempt.pk}/recheck/"),
        ("delete", f"/attempts/{attempt.pk}/delete/attempt/"),
        ("get", "/logout/"),
    ):
        response = getattr(admin_client, method)(path, HTTP_REFERER="http://testserver/pools/")
        assert response.status_code == 405, (method, path)
        html = in_layout(response)
        assert "Nothing was done" in html and way_back(html) == "http://testserver/pools/"
    assert Attempt.objects.filter(pk=attempt.pk).exists()


@pytest.mark.django_db
def test_a_bad_request_and_a_server_error_are_pages_in_the_layout():
    bad = Client().get("/", HTTP_HOST="not-this-host.example")  # DisallowedHost: a 400
    assert bad.status_code == 400
    assert "Bad request" in in_layout(bad) and TASKS_LINK in bad.content.decode()

    from django.views.defaults import server_error

    failed = server_error(RequestFactory().get("/"))  # what Django's handler500 answers
    assert failed.status_code == 500
    assert "Something went wrong" in in_layout(failed) and TASKS_LINK in failed.content.decode()


@pytest.mark.django_db
def test_a_form_that_fails_its_csrf_check_gets_a_page_saying_what_to_do(django_user_model):
    django_user_model.objects.create_superuser("admin", "", "pw")
    browser = Client(enforce_csrf_checks=True)
    refused = browser.post("/login/", {"username": "admin", "password": "pw"})
    assert refused.status_code == 403
    html = in_layout(refused)
    assert "This form has expired" in html and "Nothing was done" in html
    assert '<a href="/">Back to the tasks</a>' in html  # no referer from this site

    browser.force_login(django_user_model.objects.get(username="admin"))
    came_from = "http://testserver/tasks/fix-add/"
    stale = browser.post("/logout/", HTTP_REFERER=came_from)
    assert stale.status_code == 403
    assert f'<a href="{came_from}">Go back</a>' in in_layout(stale)
    assert "Sign out" in stale.content.decode()  # still signed in: the header says who


@pytest.mark.django_db
def test_a_visit_to_a_post_only_address_is_a_page_not_an_empty_405(admin_client):
    response = admin_client.get("/logout/", HTTP_REFERER="http://testserver/pools/")
    assert response.status_code == 405 and response["Allow"] == "POST, OPTIONS"
    html = in_layout(response)
    assert "Use the page's button" in html and "To sign out, use <em>Sign out</em>" in html
    assert '<a href="http://testserver/pools/">Go back</a>' in html
    attempt = make_attempt(new_task("fix-add"))
    put = admin_client.put(f"/attempts/{attempt.pk}/cancel/")
    assert put.status_code == 405 and "Nothing was done" in in_layout(put)
    # The API keeps its own answers.
    api = admin_client.get("/api/sandboxes/1/exec")
    assert not api.content.startswith(b"<!doctype html>")


@pytest.mark.django_db
def test_a_visit_to_each_action_url_shows_its_confirmation_and_changes_nothing(admin_client):
    task = new_task("fix-add", reference_patch="--- a\n")
    attempt = make_attempt(task, status="running", outcome="")
    for path, button in (
        ("cancel/", "Cancel attempt</button>"),
        ("rerun/", "Re-run</button>"),
        ("delete/sandbox/", "Delete sandbox</button>"),
        ("delete/attempt/", "Delete attempt</button>"),
    ):
        url = f"/attempts/{attempt.pk}/{path}"
        page = admin_client.get(url)
        assert page.status_code == 200, url
        html = in_layout(page)
        assert button in html and f'action="{url}"' in html and 'name="confirm"' in html
        assert f'href="/attempts/{attempt.pk}/">Go back</a>' in html
    fresh = Attempt.objects.get(pk=attempt.pk)
    assert fresh.cancel_requested_at is None and task.attempts.count() == 1
    # A re-check of a running attempt cannot work: the visit says why, in the layout (409).
    refused = admin_client.get(f"/attempts/{attempt.pk}/recheck/")
    assert refused.status_code == 409 and "Re-check</button>" not in in_layout(refused)
    assert "waits until the attempt has finished" in refused.content.decode()
    assert admin_client.get(f"/attempts/{attempt.pk}/delete/everything/").status_code == 404

    start = admin_client.get("/tasks/fix-add/start/")
    assert start.status_code == 200
    html = in_layout(start)
    assert '<form class="start"' in html and "Start attempts</button>" in html
    assert 'href="/tasks/fix-add/">Back to the task</a>' in html


@pytest.mark.django_db
def test_signing_out_lands_on_the_sign_in_page(admin_client):
    response = admin_client.post("/logout/", follow=True)
    assert response.redirect_chain[-1][0] == "/login/"
    html = in_layout(response)
    assert "Sign in to Boltz" in html and "Sign out" not in html


# --- the start form -------------------------------------------------------------------------


def error_beside(html: str, field: str) -> str:
    """The error shown next to a start form field (and the field points at it)."""
    found = re.search(rf'<span class="error" id="start-{field}-error"[^>]*>([^<]*)</span>', html)
    assert found, f"no error beside {field}"
    assert f'aria-describedby="start-{field}-error"' in html
    return found.group(1)


@pytest.mark.django_db
def test_a_bad_start_form_comes_back_with_the_error_beside_its_field(admin_client):
    new_task("fix-add")  # no reference patch
    start = "/tasks/fix-add/start/"
    cases = [
        ({"agent": "noop", "count": "0"}, "count", "1 to 100"),
        ({"agent": "noop", "count": "many"}, "count", "1 to 100"),
        ({"agent": "nobody", "count": "1"}, "agent", "nobody is not an agent"),
        ({"agent": "reference", "count": "1"}, "agent", "has no reference patch"),
        ({"agent": "command", "command": " ", "count": "2"}, "command", "needs a command"),
    ]
    for data, field, message in cases:
        response = admin_client.post(start, data)
        assert response.status_code == 400, data
        html = in_layout(response)
        assert message in error_beside(html, field), (data, html)
        assert "Nothing was started" in html
        assert f'name="count" value="{data["count"]}"' in html  # what was typed stays
    again = admin_client.post(start, {"agent": "command", "command": "make fix", "count": "0"})
    html = again.content.decode()
    assert '<option value="command" selected>' in html and 'value="make fix"' in html
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_the_command_agent_takes_uploaded_files_through_the_confirmation(admin_client):
    task = new_task("fix-add")
    script = b"#!/bin/sh\necho fixing\n"
    ask = admin_client.post(
        "/tasks/fix-add/start/",
        {
            "agent": "command",
            "command": "sh $BOLTZ_AGENT_DIR/fix.sh",
            "count": "1",
            "files": [SimpleUploadedFile("fix.sh", script)],
        },
    )
    assert ask.status_code == 200
    html = ask.content.decode()
    assert "(files: fix.sh)" in html and 'name="carried_file"' in html
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html)
    data = {}
    for name, value in fields:
        data.setdefault(name, []).append(value.replace("&#x27;", "'").replace("&amp;", "&"))
    assert data["confirm"] == ["yes"]
    done = admin_client.post("/tasks/fix-add/start/", data)  # no worker: enqueued on commit
    assert done.status_code == 302
    attempt = task.attempts.get()
    assert attempt.agent_command == "sh $BOLTZ_AGENT_DIR/fix.sh"
    assert [(f["name"], f["bytes"]) for f in attempt.agent_files] == [("fix.sh", len(script))]

    bad_name = admin_client.post(
        "/tasks/fix-add/start/",
        {
            "agent": "command",
            "command": "x",
            "count": "1",
            "files": [SimpleUploadedFile(".env", b"x")],
        },
    )
    assert "plain file name" in error_beside(bad_name.content.decode(), "files")
    # Files and a command typed for another agent are not sent to it.
    noop = admin_client.post(
        "/tasks/fix-add/start/",
        {
            "agent": "noop",
            "command": "rm -rf /",
            "count": "1",
            "files": [SimpleUploadedFile("a", b"")],
        },
    )
    assert noop.status_code == 200 and "with the noop agent." in noop.content.decode()


# --- admin ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_admin_times_show_seconds(admin_client):
    attempt = make_attempt(new_task("fix-add"))
    Attempt.objects.filter(pk=attempt.pk).update(
        created_at=datetime(2026, 1, 5, 14, 3, 27, tzinfo=UTC)
    )
    html = admin_client.get("/admin/attempts/attempt/").content.decode()
    assert "Jan. 5, 2026, 14:03:27" in html


# --- light on the wire ----------------------------------------------------------------------


@pytest.mark.django_db
def test_pages_are_gzipped_and_streams_are_not(admin_client):
    task = new_task("fix-add", instruction="Make the tests pass, and keep the style. " * 5000)
    plain = admin_client.get("/tasks/fix-add/")
    zipped = admin_client.get("/tasks/fix-add/", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert "Content-Encoding" not in plain and zipped["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped["Vary"]
    assert len(zipped.content) * 20 < len(plain.content)
    assert b"keep the style" in gzip.decompress(zipped.content)

    attempt = make_attempt(task)
    export = admin_client.get(f"/attempts/{attempt.pk}/export.zip", HTTP_ACCEPT_ENCODING="gzip")
    assert export.status_code == 200 and export.streaming
    assert "Content-Encoding" not in export
    assert b"".join(export.streaming_content)[:2] == b"PK"  # the zip as it is, not gzipped


def test_every_live_poller_pauses_while_the_tab_is_hidden():
    pollers = []
    for path in (ROOT / "templates").rglob("*.html"):
        for trigger in re.findall(r'hx-trigger="([^"]*)"', path.read_text()):
            if "every " in trigger:
                pollers.append((path.name, trigger))
    assert len(pollers) >= 4
    for name, trigger in pollers:
        assert "visibilitychange from:document" in trigger, name
    base = (ROOT / "templates" / "base.html").read_text()
    assert "{% static 'js/polling.js' %}" in base


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_static_files_get_hashed_names_and_a_year_of_caching(tmp_path, redis_ready):
    data_dir = tmp_path / "data"
    env = {**os.environ, "BOLTZ_DATA_DIR": str(data_dir)}
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert collect.returncode == 0, collect.stderr[-2000:]
    with run_web({"BOLTZ_DATA_DIR": str(data_dir)}) as url:
        page = httpx.get(url + "/login/", headers={"Accept-Encoding": "gzip"})
        assert page.headers["Content-Encoding"] == "gzip"
        assert "Sign in to Boltz" in page.text  # httpx undoes the gzip
        css = re.search(r'href="(/static/css/boltz\.[0-9a-f]{12}\.css)"', page.text)
        js = re.search(r'src="(/static/js/polling\.[0-9a-f]{12}\.js)"', page.text)
        assert css and js, page.text[:800]
        for asset in (css.group(1), js.group(1)):
            got = httpx.get(url + asset, headers={"Accept-Encoding": "gzip"})
            assert got.status_code == 200, asset
            assert "max-age=315360000" in got.headers["Cache-Control"]
            assert "immutable" in got.headers["Cache-Control"]
            assert got.headers["Content-Encoding"] == "gzip"  # precompressed by collectstatic
        # The plain name still answers (a page cached before a deploy), briefly cached.
        plain = httpx.get(url + "/static/css/boltz.css")
        assert plain.status_code == 200 and "immutable" not in plain.headers["Cache-Control"]


# --- in Chromium ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:  # module-scoped: its event loop ends with the module
        yield launched


@pytest.fixture
def page(browser, live_server, django_user_model):
    with signed_in_page(browser, live_server.url, django_user_model) as signed_in:
        signed_in.wait_for_selector("header nav")
        yield signed_in


def set_visibility(page, state: str) -> None:
    page.evaluate(
        """state => {
            Object.defineProperty(document, "visibilityState", {value: state, configurable: true});
            Object.defineProperty(document, "hidden", {value: state === "hidden", configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        state,
    )


@pytest.mark.django_db(transaction=True)
def test_live_polling_pauses_while_the_tab_is_hidden_and_refreshes_when_shown(page, live_server):
    task = new_task("fix-add")
    make_attempt(task, status="running", outcome="")  # a live attempt: the table polls
    polls = []  # every request htmx makes (the attempts table, the scores)
    page.on("request", lambda r: polls.append(r.url) if r.resource_type == "xhr" else None)
    with page.expect_request(lambda r: "/tasks/fix-add/attempts/" in r.url, timeout=5000):
        page.goto(live_server.url + "/tasks/fix-add/")

    set_visibility(page, "hidden")
    page.wait_for_timeout(300)  # a request already on its way
    before = len(polls)
    page.wait_for_timeout(3000)  # three polling periods with nobody looking
    assert polls[before:] == []

    # Shown again: refreshed at once (the 1 s tick alone could take up to a second).
    with page.expect_request(lambda r: "/tasks/fix-add/attempts/" in r.url, timeout=500):
        set_visibility(page, "visible")


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
def test_the_command_box_shows_for_the_command_agent_and_its_file_runs(
    page, live_server, worker, load_example, tmp_path
):
    load_example("fix-add")
    page.goto(live_server.url + "/tasks/fix-add/")
    command = page.locator("form.start input[name=command]")
    files = page.locator("form.start input[name=files]")
    assert not command.is_visible() and not files.is_visible()  # reference is chosen
    page.select_option("form.start select[name=agent]", "command")
    assert command.is_visible() and files.is_visible()
    script = tmp_path / "fix.sh"
    script.write_text("sed -i 's/return a - b/return a + b/' calc.py\n")
    command.fill("sh $BOLTZ_AGENT_DIR/fix.sh")
    files.set_input_files(str(script))
    page.click("form.start button[type=submit]")
    page.wait_for_selector("form.confirm")
    assert "(files: fix.sh)" in page.inner_text("main")
    page.click("form.confirm button[type=submit]")
    page.wait_for_selector("#attempts")
    attempt = wait_finished(list(Attempt.objects.filter(task__slug="fix-add")))[0]
    assert attempt.agent == "command" and attempt.outcome == "passed", attempt.failure_reason

    page.select_option("form.start select[name=agent]", "noop")
    assert not command.is_visible()
