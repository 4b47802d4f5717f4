"""The review dashboard's pages through Django's test client: what a reviewer sees and may do."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from attempts.core.agent_scores import pass_at_k
from attempts.models import Attempt, CheckResult, Event, Task, TestOutcome
from tests.conftest import new_task

pytestmark = pytest.mark.django_db

DIFF = """diff --git a/calc.py b/calc.py
index 8e0d4ff..6119934 100644
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def make_task(slug="fix-add", **kw) -> Task:
    return new_task(slug, instruction="Fix it.", check_command="pytest", **kw)


def make_attempt(task, number, outcome="passed", score=None, **kw) -> Attempt:
    now = timezone.now()
    return Attempt.objects.create(
        task=task,
        number=number,
        agent=kw.pop("agent", "reference"),
        status=kw.pop("status", "finished"),
        outcome=outcome,
        score=score if score is not None else (1.0 if outcome == "passed" else 0.0),
        started_at=now - timedelta(seconds=5),
        finished_at=now,
        **kw,
    )


def add_check(attempt, outcomes: dict[str, str], **kw) -> CheckResult:
    passed = all(o == "passed" for o in outcomes.values())
    check = CheckResult.objects.create(
        attempt=attempt,
        passed=passed,
        score=1.0 if passed else 0.0,
        source="junit",
        tests_total=len(outcomes),
        tests_passed=sum(o == "passed" for o in outcomes.values()),
        output="2 passed",
        **kw,
    )
    TestOutcome.objects.bulk_create(
        TestOutcome(check_result=check, name=n, outcome=o) for n, o in outcomes.items()
    )
    return check


def test_pass_at_k_is_the_unbiased_estimate():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - (7 * 6 * 5 * 4 * 3) / (10 * 9 * 8 * 7 * 6))
    assert pass_at_k(4, 1, 5) is None and pass_at_k(5, 1, 5) == 1.0


def test_tasks_page_counts_outcomes_and_leaves_infrastructure_errors_out(admin_client):
    task = make_task()
    for n, outcome in enumerate(
        ["passed", "passed", "failed", "agent_timeout", "failed", "infra_error", "infra_error"],
        start=1,
    ):
        make_attempt(task, n, outcome)
    make_task("other-task", title="Something else")
    html = admin_client.get("/").content.decode()
    assert "2 passed" in html and "2 failed" in html and "1 agent timeout" in html
    assert "2 infrastructure" in html
    assert "40%" in html  # 2 of 5 scored attempts; infrastructure errors excluded
    assert "0.40" in html  # pass@1
    assert "0.40" in html and "1.00" in html  # pass@5 of 5 attempts with 2 passes is 1.0
    searched = admin_client.get("/?q=else").content.decode()
    assert "other-task" in searched and 'href="/tasks/fix-add/"' not in searched


def test_tasks_page_sorts(admin_client):
    for slug, n in (("a-task", 1), ("b-task", 3), ("c-task", 2)):
        task = make_task(slug)
        for i in range(n):
            make_attempt(task, i + 1)
    html = admin_client.get("/?sort=-attempts").content.decode()
    assert html.index("b-task") < html.index("c-task") < html.index("a-task")
    html = admin_client.get("/?sort=-slug").content.decode()
    assert html.index("c-task") < html.index("b-task") < html.index("a-task")


def test_task_page_filters_paginates_and_flags_flaky_tests(admin_client):
    task = make_task()
    for n in range(1, 61):
        make_attempt(
            task, n, "passed" if n % 3 else "failed", agent="noop" if n % 2 else "reference"
        )
    first = Attempt.objects.get(task=task, number=60)
    add_check(first, {"t::test_a": "passed", "t::test_b": "passed"})
    add_check(first, {"t::test_a": "passed", "t::test_b": "failed"})  # same files, re-checked
    add_check(Attempt.objects.get(task=task, number=59), {"t::test_a": "failed"})
    html = admin_client.get("/tasks/fix-add/").content.decode()
    assert "page 1 of 2 (60 attempts)" in html
    assert 'id="attempt-60"' in html and 'id="attempt-10"' not in html
    assert "Flaky: 1 test changed outcome" in html
    assert '<tr class="flaky"><th><code>t::test_b</code>' in html
    assert 'title="not run"' in html  # test_b never ran in attempt 59
    assert "<svg" in html and "<circle" in html
    filtered = admin_client.get("/tasks/fix-add/?outcome=failed&agent=reference").content.decode()
    assert 'id="attempt-60"' in filtered and 'id="attempt-59"' not in filtered
    assert "page 2 of 2" in admin_client.get("/tasks/fix-add/?page=2").content.decode()


def test_attempt_page_header_shows_infrastructure_errors_apart(admin_client):
    task = make_task()
    attempt = make_attempt(
        task, 1, "infra_error", failure_reason="start: Docker daemon unreachable"
    )
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Infrastructure error, not the agent's failure:" in html
    assert "start: Docker daemon unreachable" in html


def test_timeline_marks_a_command_a_cancel_stopped(admin_client):
    attempt = make_attempt(make_task(), 1, "cancelled", status="cancelled")
    end = {"phase": "end", "command": "sleep 300", "exec": 1, "exit_code": None}
    Event.objects.create(
        attempt=attempt,
        seq=1,
        kind="exec",
        actor="agent",
        data={**end, "stopped": "cancelled by <b>x"},
    )
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "stopped: cancelled by &lt;b&gt;x</span>" in html
    assert "exit None" not in html


def test_changes_view_is_side_by_side_and_check_view_lists_tests(admin_client):
    task = make_task()
    attempt = make_attempt(task, 1, diff=DIFF)
    add_check(attempt, {"t::test_add": "passed"})
    changes = admin_client.get(f"/attempts/{attempt.pk}/?view=changes").content.decode()
    assert '<table class="sbs code">' in changes and "<mark>" in changes
    assert "1 file changed" in changes and "modified" in changes
    check = admin_client.get(f"/attempts/{attempt.pk}/?view=check").content.decode()
    assert "t::test_add" in check and "1 of 1 passed" in check


def test_binary_and_non_utf8_content_never_breaks_a_page(admin_client):
    task = make_task()
    diff = (
        "diff --git a/b.bin b/b.bin\nnew file mode 100644\nindex 0000000..1\n"
        "Binary files /dev/null and b/b.bin differ\n"
        "diff --git a/t.txt b/t.txt\n--- a/t.txt\n+++ b/t.txt\n@@ -1 +1 @@\n-caf\ufffd\n+caf\u00e9\n"
    )
    attempt = make_attempt(task, 1, diff=diff)
    Event.objects.create(
        attempt=attempt,
        seq=1,
        kind="exec",
        actor="agent",
        data={
            "phase": "end",
            "command": "cat blob",
            "exit_code": 0,
            "stdout": {"head": "\ufffd\ufffd raw", "tail": "", "bytes": 6, "utf8": False},
        },
    )
    changes = admin_client.get(f"/attempts/{attempt.pk}/?view=changes").content.decode()
    assert "Binary file not shown" in changes and "changes.patch carries its contents" in changes
    timeline = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "not valid UTF-8" in timeline


def test_large_files_load_on_request(admin_client):
    task = make_task()
    big = "diff --git a/big.txt b/big.txt\n--- a/big.txt\n+++ b/big.txt\n@@ -0,0 +1,2000 @@\n"
    big += "".join(f"+line {i}\n" for i in range(2000))
    attempt = make_attempt(task, 1, diff=big)
    page = admin_client.get(f"/attempts/{attempt.pk}/?view=changes").content.decode()
    assert "Large diff: 2004 lines." in page and "line 1999" not in page
    part = admin_client.get(f"/attempts/{attempt.pk}/changes/0/").content.decode()
    assert "line 1999" in part
    assert admin_client.get(f"/attempts/{attempt.pk}/changes/5/").status_code == 404


def test_live_timeline_partial_sends_new_events_and_stops_when_finished(admin_client):
    task = make_task()
    attempt = make_attempt(task, 1, status="running", outcome="")
    for seq in (1, 2):
        Event.objects.create(
            attempt=attempt, seq=seq, kind="lifecycle", data={"message": f"m{seq}"}
        )
    live = admin_client.get(f"/attempts/{attempt.pk}/timeline/?after=1").content.decode()
    assert 'id="ev-2"' in live and 'id="ev-1"' not in live
    assert 'hx-trigger="every 1s, visibilitychange from:document"' in live and "after=2" in live
    assert 'hx-swap-oob="true"' in live  # the header (status) comes along
    Attempt.objects.filter(pk=attempt.pk).update(status="finished", outcome="passed")
    done = admin_client.get(f"/attempts/{attempt.pk}/timeline/?after=2").content.decode()
    assert "hx-trigger" not in done.split('id="attempt-header"')[0]  # polling stops
    assert "Passed" in done


def test_compare_shows_both_attempts_changes_and_tests(admin_client):
    task = make_task()
    a = make_attempt(task, 1, diff=DIFF)
    b = make_attempt(task, 2, "failed", diff="")
    add_check(a, {"t::x": "passed"})
    add_check(b, {"t::x": "failed"})
    html = admin_client.get("/tasks/fix-add/compare/?a=1&b=2").content.decode()
    assert "calc.py" in html and "unchanged in #2" in html
    assert '<tr class="differs"><td><code>t::x</code>' in html
    assert admin_client.get("/tasks/fix-add/compare/?a=1&b=9").status_code == 404
    assert admin_client.get("/tasks/fix-add/compare/").status_code == 400


def test_unknown_ids_are_404_pages(admin_client):
    for url in (
        "/attempts/999/",
        "/tasks/nope/",
        "/attempts/999/timeline/",
        "/attempts/999/outputs/x.stdout",
    ):
        response = admin_client.get(url)
        assert response.status_code == 404, url
    assert b"Not found" in admin_client.get("/tasks/nope/").content


def test_pages_send_a_content_security_policy_without_inline_scripts(admin_client):
    response = admin_client.get("/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert b"<script>" not in response.content  # only <script src=...>


def test_mutating_actions_ask_first_and_act_only_on_post(admin_client):
    task = make_task()
    attempt = make_attempt(task, 1, status="running", outcome="")
    assert b"Cancel attempt</button>" in admin_client.get(f"/attempts/{attempt.pk}/cancel/").content
    assert Attempt.objects.get(pk=attempt.pk).cancel_requested_at is None  # a GET only asks
    assert admin_client.get("/tasks/fix-add/start/").status_code == 200
    ask = admin_client.post(f"/attempts/{attempt.pk}/cancel/")
    assert ask.status_code == 200 and b"Cancel attempt</button>" in ask.content
    assert Attempt.objects.get(pk=attempt.pk).cancel_requested_at is None
    done = admin_client.post(f"/attempts/{attempt.pk}/cancel/", {"confirm": "yes"})
    assert done.status_code == 302
    assert Attempt.objects.get(pk=attempt.pk).cancel_requested_by == "admin"


def test_permissions(client, django_user_model):
    from django.contrib.auth.models import Permission

    task = make_task()
    attempt = make_attempt(task, 1)
    viewer = django_user_model.objects.create_user("viewer", password="pw")
    viewer.user_permissions.add(Permission.objects.get(codename="view_attempt"))
    client.login(username="viewer", password="pw")
    assert client.get(f"/attempts/{attempt.pk}/").status_code == 200
    html = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Export bundle" not in html and "Delete attempt" not in html and "Re-run" not in html
    assert client.get(f"/attempts/{attempt.pk}/export.zip").status_code == 403
    assert client.post(f"/attempts/{attempt.pk}/rerun/", {"confirm": "yes"}).status_code == 403
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    html = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Export bundle" in html and "Delete attempt" in html and "Re-run" in html


def test_csrf_is_checked(django_user_model):
    from django.test import Client

    task = make_task()
    attempt = make_attempt(task, 1)
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(django_user_model.objects.create_superuser("root", "", "pw"))
    response = csrf_client.post(f"/attempts/{attempt.pk}/delete/attempt/", {"confirm": "yes"})
    assert response.status_code == 403 and Attempt.objects.filter(pk=attempt.pk).exists()


def test_query_counts_stay_small_for_big_tasks_and_timelines(
    admin_client, django_assert_max_num_queries
):
    task = make_task()
    now = timezone.now()
    Attempt.objects.bulk_create(
        Attempt(
            task=task,
            number=n,
            agent="noop",
            status="finished",
            outcome="failed",
            score=0.0,
            started_at=now,
            finished_at=now,
        )
        for n in range(1, 501)
    )
    for attempt in Attempt.objects.filter(number__gt=450):
        add_check(attempt, {f"t::test_{i}": "passed" for i in range(5)})
    big = Attempt.objects.get(number=500)
    Event.objects.bulk_create(
        Event(
            attempt=big,
            seq=s,
            kind="output",
            actor="agent",
            data={"stream": "stdout", "text": f"line {s}\n"},
        )
        for s in range(1, 5001)
    )
    with django_assert_max_num_queries(12):
        assert admin_client.get("/").status_code == 200
    with django_assert_max_num_queries(14):
        assert admin_client.get("/tasks/fix-add/").status_code == 200
    with django_assert_max_num_queries(12):
        response = admin_client.get(f"/attempts/{big.pk}/")
    assert response.status_code == 200  # a finished attempt opens on its first page of 500
    assert b'id="ev-500"' in response.content and b'id="ev-501"' not in response.content
    with django_assert_max_num_queries(12):
        response = admin_client.get(f"/attempts/{big.pk}/?page=10")
    assert response.status_code == 200 and b'id="ev-5000"' in response.content


def test_the_start_form_offers_saved_agents_and_starts_them(admin_client, monkeypatch):
    from attempts.models import Agent

    task = make_task()
    Agent.objects.create(name="my-agent", command="echo hi")
    html = admin_client.get("/tasks/fix-add/").content.decode()
    assert '<option value="my-agent">my-agent (saved)</option>' in html
    monkeypatch.setattr(
        "attempts.services.attempts.attempts_enqueue", lambda **kw: None
    )  # no worker here
    response = admin_client.post(
        "/tasks/fix-add/start/", {"agent": "my-agent", "count": 2, "confirm": "yes"}
    )
    assert response.status_code == 302
    assert list(task.attempts.values_list("agent", "agent_command")) == [
        ("my-agent", "echo hi"),
        ("my-agent", "echo hi"),
    ]
    bad = admin_client.post("/tasks/fix-add/start/", {"agent": "nobody", "count": 1})
    assert bad.status_code == 400


def test_task_pages_show_the_validation_mark(admin_client):
    make_task(
        validation="invalid",
        validation_note="noop passed (#2): the check passes without any change",
    )
    assert "invalid</span>" in admin_client.get("/").content.decode()
    html = admin_client.get("/tasks/fix-add/").content.decode()
    assert "noop passed (#2): the check passes without any change" in html


def test_a_tampering_attempt_is_flagged_and_the_verdict_says_what_ran(admin_client):
    task = make_task()
    attempt = make_attempt(
        task,
        1,
        "failed",
        changes_state="recorded",
        tamper={
            "protected": [{"path": "tests/<b>conftest.py", "change": "added"}],
            "reward_files": ["reward.txt"],
        },
    )
    add_check(
        attempt,
        {"t::test_add": "failed"},
        mode="fresh",
        summary="1 of 2 required tests passed; not passing: t::test_add",
        ignored_reward_files=["reward.txt"],
    )
    honest = make_attempt(task, 2, "passed", changes_state="recorded")
    header = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "The agent touched what the check relies on." in header
    assert "protected path <code>tests/&lt;b&gt;conftest.py</code>: added" in header
    assert "reward file <code>reward.txt</code> ignored" in header
    assert "1 of 2 required tests passed; not passing: t::test_add" in header
    assert "(checked in a fresh container)" in header
    check = admin_client.get(f"/attempts/{attempt.pk}/?view=check").content.decode()
    assert "a fresh container: the base with exactly the recorded changes applied" in check
    assert "reward.txt: the task does not declare" in check
    table = admin_client.get("/tasks/fix-add/").content.decode()
    assert table.count('class="badge tamper"') == 1
    assert (
        "touched what the check" not in admin_client.get(f"/attempts/{honest.pk}/").content.decode()
    )


def test_changes_that_could_not_be_recorded_never_read_as_no_changes(admin_client):
    task = make_task()
    unavailable = make_attempt(
        task,
        1,
        "failed",
        changes_state="unavailable",
        changes_error="the workspace holds more than 10 bytes of files",
    )
    never = make_attempt(task, 2, "infra_error", failure_reason="start: image missing")
    empty = make_attempt(task, 3, "failed", changes_state="recorded")
    page = admin_client.get(f"/attempts/{unavailable.pk}/?view=changes").content.decode()
    assert "Changes unavailable:" in page and "more than 10 bytes" in page
    assert "No changes against the base commit" not in page
    page = admin_client.get(f"/attempts/{never.pk}/?view=changes").content.decode()
    assert "The changes were never recorded" in page and "image missing" in page
    page = admin_client.get(f"/attempts/{empty.pk}/?view=changes").content.decode()
    assert "No changes against the base commit." in page


# --- one state per attempt, one score format, pool episodes apart (issue 24) ---------------------
STATE_BADGE = re.compile(r'<span class="badge (?:status|outcome)-[a-z_]+[^"]*"[^>]*>([^<]*)</span>')
COUNT_BADGE = re.compile(r'<span class="badge [^"]*" data-state="([a-z_]+)">(\d+) ([^<]+)</span>')
# A score written any other way than "0.67": three or more decimals, or a bare "0.6666".
OTHER_SCORE_FORMATS = re.compile(r"\b0\.66[0-9]+|\b0\.667\b")


def seed_mix(owner) -> tuple[Task, dict[str, Attempt]]:
    """A task with one attempt in each kind of state a reviewer meets: passed, failed (a partial
    score of 2/3), an infrastructure error, running, queued, a pool episode closed without a
    check, a pool episode that submitted and was checked, and the oracle."""
    from attempts.models import Pool

    task = make_task()
    pool = Pool.objects.create(
        owner=owner,
        tasks=["fix-add", "fix-add"],
        size=2,
        max_steps=10,
        episode_seconds=60,
        rewards=1,
        reward_sum=2 / 3,
    )
    episode = {"origin": "api", "agent": "pool", "pool": pool}
    made = {
        "passed": make_attempt(task, 1, "passed", agent="claude"),
        "failed": make_attempt(task, 2, "failed", score=2 / 3, agent="claude"),
        "infra": make_attempt(task, 3, "infra_error", agent="claude"),
        "running": make_attempt(task, 4, "", status="running", agent="claude"),
        "queued": make_attempt(task, 5, "", status="queued", agent="claude"),
        "unchecked": make_attempt(task, 6, "", pool_index=0, episode_end="reset", **episode),
        "episode": make_attempt(
            task, 7, "failed", score=2 / 3, pool_index=1, episode_end="terminated", **episode
        ),
        "oracle": make_attempt(task, 8, "passed"),
    }
    Attempt.objects.filter(pk__in=[made["running"].pk, made["queued"].pk]).update(
        score=None, finished_at=None
    )
    Attempt.objects.filter(pk=made["unchecked"].pk).update(
        score=None, failure_reason="closed without a check"
    )
    add_check(made["episode"], {"t::a": "passed", "t::b": "failed"})
    return task, made


def test_every_attempt_has_one_state_badge_and_the_counts_add_up_on_every_page(admin_client):
    from django.contrib.auth.models import User

    task, made = seed_mix(User.objects.get(username="admin"))
    total = len(made)
    listing = admin_client.get("/").content.decode()
    counts = {key: int(n) for key, n, _label in COUNT_BADGE.findall(listing)}
    assert sum(counts.values()) == total, counts  # "8 attempts" and badges for all 8
    shown_total = re.search(r'<td class="num" rowspan="\d+">(\d+)</td>', listing).group(1)
    assert int(shown_total) == total
    assert counts == {
        "queued": 1,
        "running": 1,
        "passed": 2,
        "failed": 2,
        "infra_error": 1,
        "unchecked": 1,
    }
    assert "1 closed, not checked</span>" in listing

    page = admin_client.get("/tasks/fix-add/").content.decode()
    table = page[page.index('<div id="attempts"') :]
    rows = re.findall(r'<tr id="attempt-\d+">(.*?)</tr>', table, re.S)
    assert len(rows) == total
    assert all(len(STATE_BADGE.findall(row)) == 1 for row in rows), rows
    unchecked = next(r for r in rows if f">#{made['unchecked'].number}<" in r)
    assert "closed, not checked" in unchecked

    # The attempt page: one state badge, in the header, and the verdict says the same.
    for attempt in made.values():
        html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
        header = html[html.index('id="attempt-header"') : html.index('id="verdict"')]
        assert len(STATE_BADGE.findall(header)) == 1, attempt
        assert 'id="attempt-outcome"' not in html


def test_scores_are_written_one_way_on_every_page(admin_client):
    from django.contrib.auth.models import User

    task, made = seed_mix(User.objects.get(username="admin"))
    failed, episode = made["failed"], made["episode"]
    pages = {
        "tasks": "/",
        "task": "/tasks/fix-add/",
        "scores": "/tasks/fix-add/scores/",
        "leaderboard": "/leaderboard/",
        "attempt": f"/attempts/{failed.pk}/",
        "check": f"/attempts/{episode.pk}/?view=check",
        "compare": f"/tasks/fix-add/compare/?a={failed.number}&b={episode.number}",
        "pools": "/pools/",
        "pool": f"/pools/{episode.pool_id}/",
    }
    for name, url in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not OTHER_SCORE_FORMATS.search(html), (name, OTHER_SCORE_FORMATS.search(html))
        if name not in ("tasks", "leaderboard", "scores"):
            assert "0.67" in html, name  # the partial score (or reward), two decimals
    attempt_page = admin_client.get(f"/attempts/{failed.pk}/").content.decode()
    assert '<span class="score">score 0.67</span>' in attempt_page
    task_page = admin_client.get("/tasks/fix-add/").content.decode()
    assert '<td class="num">0.67</td>' in task_page and '<td class="num">1.00</td>' in task_page
    # The API keeps the number as it is.
    assert Attempt.objects.get(pk=failed.pk).score == pytest.approx(2 / 3)


def test_pool_episodes_are_listed_apart_never_ranked_as_an_agent(admin_client):
    from django.contrib.auth.models import User

    from attempts.services.selectors import task_rows

    _task, made = seed_mix(User.objects.get(username="admin"))
    board = admin_client.get("/leaderboard/").content.decode()
    groups = re.findall(r'<th scope="rowgroup"[^>]*>([^<]+)', board)
    assert [g.strip() for g in groups] == ["Agents", "Pool episodes", "Oracle"]
    agents = board[board.index(">Agents") : board.index(">Pool episodes")]
    assert 'data-agent="claude"' in agents and 'data-agent="pool"' not in agents
    pooled = board[board.index(">Pool episodes") : board.index(">Oracle")]
    assert 'data-agent="pool"' in pooled and "not ranked with the agents" in pooled
    rows = list(csv.reader(io.StringIO(admin_client.get("/leaderboard/?format=csv").text)))
    assert {r[0]: r[1] for r in rows[1:]} == {
        "claude": "agent",
        "pool": "pool",
        "reference": "oracle",
    }
    listing = admin_client.get("/").content.decode()
    pool_line = re.search(r'<tr data-agent="pool">(.*?)</tr>', listing, re.S).group(1)
    assert "pool episodes</span>" in pool_line
    # The pool's episodes pass more often than claude (2 of 3 against 1 of 2), the oracle
    # always: the task's best pass rate is still claude's, the best ranked agent's.
    task = Task.objects.get(slug="fix-add")
    pool = {"origin": "api", "agent": "pool", "pool_id": made["episode"].pool_id}
    make_attempt(task, 9, "passed", pool_index=0, episode_end="terminated", **pool)
    make_attempt(task, 10, "passed", pool_index=1, episode_end="terminated", **pool)
    (row,) = task_rows()
    assert row["pass_rate"] == pytest.approx(0.5)
    assert [(a.agent, a.group) for a in row["agents"]] == [
        ("claude", "agent"),
        ("pool", "pool"),
        ("reference", "oracle"),
    ]
    panel = admin_client.get("/tasks/fix-add/scores/").content.decode()
    assert panel.index(">Agents") < panel.index(">Pool episodes") < panel.index(">Oracle")


# --- actions offered only where they work, each confirmation true for its attempt (issue 24) ----
def kept(task, number, **kw) -> Attempt:
    """A finished attempt whose sandbox was stopped and kept on a host, its changes recorded."""
    values = {
        "host": "host-a",
        "container_id": "c" * 64,
        "sandbox_state": "stopped",
        "changes_state": "recorded",
        "diff_file": f"attempts/{number}/changes.patch",
        **kw,
    }
    return make_attempt(task, number, values.pop("outcome", "passed"), **values)


def test_recheck_is_offered_only_where_it_can_run_and_refused_alike(admin_client):
    task = make_task()
    never = kept(task, 1, changes_state="", diff_file="", outcome="infra_error")
    page = admin_client.get(f"/attempts/{never.pk}/").content.decode()
    assert 'id="attempt-recheck"' not in page
    assert 'disabled aria-describedby="recheck-why">Re-check</button>' in page
    assert "its changes were never recorded" in page
    for post in ({}, {"confirm": "yes"}):  # the confirmation and the confirming POST alike
        refused = admin_client.post(f"/attempts/{never.pk}/recheck/", post)
        html = refused.content.decode()
        assert refused.status_code == 409 and 'id="refused"' in html
        assert "its changes were never recorded" in html and "Re-check</button>" not in html
        assert "<main" in html  # in the layout, not a bare error
    assert Attempt.objects.get(pk=never.pk).sandbox_state == "stopped"  # nothing was claimed
    assert not never.checks.exists()

    # Recorded changes, a fresh-container task: offered, and the confirmation says where.
    recorded = kept(task, 2)
    page = admin_client.get(f"/attempts/{recorded.pk}/").content.decode()
    assert 'id="attempt-recheck"' in page and "recheck-why" not in page
    ask = admin_client.get(f"/attempts/{recorded.pk}/recheck/").content.decode()
    assert "in a fresh container" in ask and "The kept sandbox is not touched" in ask
    assert "in the kept sandbox" not in ask

    # An in-place task's re-check runs in the kept sandbox, and says so.
    in_place = make_task("in-place", check_mode="in_place")
    here = kept(in_place, 1, changes_state="", diff_file="")
    ask = admin_client.get(f"/attempts/{here.pk}/recheck/").content.decode()
    assert "in place, in the kept sandbox" in ask and "fresh container" not in ask
    assert 'name="confirm" value="yes"' in ask

    # Still running: no re-check offered; the URL refuses it.
    running = make_attempt(task, 3, "", status="running", host="host-a", container_id="d")
    page = admin_client.get(f"/attempts/{running.pk}/").content.decode()
    assert "Re-check</button>" not in page
    refused = admin_client.post(f"/attempts/{running.pk}/recheck/", {"confirm": "yes"})
    assert refused.status_code == 409 and "waits until the attempt has finished" in refused.text


def test_each_action_is_refused_where_its_service_would_fail(admin_client):
    task = make_task()
    deleted = kept(task, 1, sandbox_state="deleted")
    Attempt.objects.filter(pk=deleted.pk).update(
        sandbox_deleted_at=timezone.now(), sandbox_deleted_by="ivan"
    )
    page = admin_client.get(f"/attempts/{deleted.pk}/").content.decode()
    assert "Delete sandbox</button>" not in page and "Re-check</button>" not in page
    assert "Delete attempt</button>" in page
    refused = admin_client.post(f"/attempts/{deleted.pk}/delete/sandbox/", {"confirm": "yes"})
    assert refused.status_code == 409 and "deleted already" in refused.text

    ended = kept(task, 2)
    refused = admin_client.post(f"/attempts/{ended.pk}/cancel/", {"confirm": "yes"})
    assert refused.status_code == 409 and "it has already ended" in refused.text
    assert Attempt.objects.get(pk=ended.pk).cancel_requested_at is None

    sandbox = kept(task, 3, origin="api", agent="my-client")
    page = admin_client.get(f"/attempts/{sandbox.pk}/").content.decode()
    assert "Re-run</button>" not in page
    refused = admin_client.post(f"/attempts/{sandbox.pk}/rerun/", {"confirm": "yes"})
    assert refused.status_code == 409 and "an API sandbox" in refused.text
    assert task.attempts.count() == 3  # nothing was started

    # A queued attempt's cancel says it never runs; a running one's that its processes stop.
    queued = make_attempt(task, 4, "", status="queued")
    ask = admin_client.get(f"/attempts/{queued.pk}/cancel/").content.decode()
    assert "It has not started" in ask and "container stops" not in ask
    running = make_attempt(task, 5, "", status="running", host="host-a")
    ask = admin_client.get(f"/attempts/{running.pk}/cancel/").content.decode()
    assert "its processes end and its container stops" in ask
    ask = admin_client.get(f"/attempts/{running.pk}/delete/sandbox/").content.decode()
    assert "It is still running: it stops." in ask
    # A cancel already asked: shown disabled with who asked, and not asked twice.
    Attempt.objects.filter(pk=running.pk).update(
        cancel_requested_at=timezone.now(), cancel_requested_by="hana"
    )
    page = admin_client.get(f"/attempts/{running.pk}/").content.decode()
    assert 'id="attempt-cancel"' not in page and "hana already asked to cancel it" in page


def test_a_task_without_a_check_offers_no_start_and_refuses_one(admin_client):
    new_task("from-image", check_command="")
    page = admin_client.get("/tasks/from-image/").content.decode()
    assert 'id="start-refused"' in page and '<form class="start"' not in page
    for post in ({}, {"count": "1", "agent": "noop", "confirm": "yes"}):
        refused = admin_client.post("/tasks/from-image/start/", post)
        assert refused.status_code == 409 and "has no check to run" in refused.text
    assert not Attempt.objects.exists()


def test_each_attempt_is_in_exactly_the_state_its_badge_shows():
    """Every status with every outcome (and none): one state each, the filter that counts it
    and the badge that shows it agree, so counts by state always add up to the total."""
    from attempts.core.attempt_states import STATES, state_filter, state_of
    from attempts.models import Outcome, Status

    task = make_task()
    combos = [(s, o) for s in Status.values for o in ["", *Outcome.values]]
    for n, (status, outcome) in enumerate(combos, start=1):
        make_attempt(task, n, outcome, status=status)
    for attempt in Attempt.objects.all():
        matching = [k for k in STATES if Attempt.objects.filter(state_filter(k), pk=attempt.pk)]
        assert matching == [state_of(attempt.status, attempt.outcome)], attempt.__dict__
    assert sum(Attempt.objects.filter(state_filter(k)).count() for k in STATES) == len(combos)
    assert state_of("finished", "") == "unchecked" and STATES["unchecked"][0] == (
        "closed, not checked"
    )
