"""Scores per agent: the maths (pass rate, unbiased pass@k, averages over tasks), the tasks list,
the task page's live scores panel and plot, and the leaderboard (sortable, CSV), through Django's
test client and in Chromium."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from attempts.core.agent_scores import (
    AgentScores,
    Tally,
    agent_group,
    agent_scores,
    csv_cell,
    grouped,
    leaderboard_csv,
    pass_at_k,
    sort_key,
    sorted_agents,
)
from attempts.models import Attempt
from tests.conftest import ROOT, chromium, new_task

SHOTS = ROOT / "test-results" / "screenshots"


def chen_pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k as Chen et al. (2021) compute it: 1 - prod(1 - k / i) for i in n-c+1..n."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1 - k / i
    return 1 - product


# --- the maths -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (20, 1, 5), (7, 0, 5), (5, 4, 2)]
)
def test_pass_at_k_is_chens_unbiased_estimate(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(chen_pass_at_k(n, c, k))


def test_pass_at_k_is_not_shown_below_k_attempts():
    assert pass_at_k(4, 4, 5) is None
    assert pass_at_k(0, 0, 1) is None
    assert pass_at_k(5, 1, 5) == 1.0  # any 5 of 5 include the one pass
    assert pass_at_k(6, 0, 5) == 0.0


def test_agents_fall_in_three_groups():
    assert agent_group("reference") == "oracle"
    assert agent_group("noop") == agent_group("command") == "built-in"
    for named in ("patch", "api", "my-saved-agent", "gpt-4o-2024-08-06"):
        assert agent_group(named) == "agent"


def test_an_agent_pools_its_pass_rate_and_averages_pass_at_k_over_tasks():
    a = AgentScores(
        "claude",
        {
            "easy": Tally(scored=5, passed=5, mean_score=1.0, excluded=2),
            "hard": Tally(scored=2, passed=0, mean_score=0.25),
            "broken": Tally(scored=0, passed=0, excluded=3),  # only infrastructure errors
        },
    )
    assert (a.tasks, a.scored, a.passed, a.excluded) == (2, 7, 5, 5)
    assert a.pass_rate == pytest.approx(5 / 7)  # pooled over attempts
    assert a.pass_at_1 == pytest.approx(0.5)  # (1.0 + 0.0) / 2 tasks
    assert a.pass_at_k == 1.0 and a.tasks_at_k == 1  # only "easy" has 5 scored attempts
    assert a.mean_score == pytest.approx(0.625)  # (1.0 + 0.25) / 2 tasks


def test_agents_are_grouped_with_the_oracle_and_built_ins_apart():
    cells = [
        ("t", "reference", Tally(2, 2)),
        ("t", "noop", Tally(2, 0)),
        ("t", "zeta", Tally(2, 1)),
        ("u", "alpha", Tally(1, 1)),
        ("u", "zeta", Tally(1, 0)),
    ]
    rows = agent_scores(cells)
    assert [a.agent for a in rows] == ["alpha", "zeta", "noop", "reference"]
    assert rows[1].tallies == {"t": Tally(2, 1), "u": Tally(1, 0)}
    assert [(h, [a.agent for a in g]) for h, g in grouped(rows)] == [
        ("Agents", ["alpha", "zeta"]),
        ("Built-in agents", ["noop"]),
        ("Oracle", ["reference"]),
    ]


def test_sorting_puts_agents_without_a_value_last_both_ways():
    rows = [
        AgentScores("b", {"t": Tally(2, 1)}),
        AgentScores("a", {"t": Tally(1, 1)}),
        AgentScores("c", {"u": Tally(0, 0, excluded=1)}),  # nothing scored
    ]
    names = lambda rs: [a.agent for a in rs]  # noqa: E731
    assert names(sorted_agents(rows, "pass_at_1", True)) == ["a", "b", "c"]
    assert names(sorted_agents(rows, "pass_at_1", False)) == ["b", "a", "c"]
    assert names(sorted_agents(rows, "agent", True)) == ["c", "b", "a"]
    assert names(sorted_agents(rows, "task:t", False)) == ["b", "a", "c"]
    assert sort_key("-task:t") == ("task:t", True)
    assert sort_key("nonsense") == sort_key("task:") == ("pass_at_1", True)


def test_the_csv_has_one_row_per_agent_and_no_formulas():
    rows = agent_scores(
        [("t", "=HYPERLINK(1)", Tally(4, 1, 0.25)), ("u", "reference", Tally(1, 1))]
    )
    table = leaderboard_csv(grouped(rows), ["t", "u"])
    assert table[0][:3] == ["agent", "group", "tasks"] and table[0][-2:] == ["t", "u"]
    assert table[1][0] == "'=HYPERLINK(1)" and table[1][1] == "agent"
    assert table[1][-2:] == ["0.2500", ""]  # no attempt at u: empty, not zero
    assert table[2][:2] == ["reference", "oracle"]
    assert csv_cell(None) == "" and csv_cell(3) == "3" and csv_cell("-1") == "'-1"


# --- pages (Django's test client) ----------------------------------------------------------------
def make_attempt(task, number, agent, outcome, *, status="finished", score=None, seconds=5):
    now = timezone.now()
    return Attempt.objects.create(
        task=task,
        number=number,
        agent=agent,
        status=status,
        outcome=outcome,
        score=score if score is not None else (1.0 if outcome == "passed" else 0.0),
        started_at=now - timedelta(seconds=seconds),
        finished_at=None if status not in ("finished", "cancelled") else now,
    )


def seed(task, plan: dict[str, list[str]]) -> None:
    number = 0
    for agent, outcomes in plan.items():
        for outcome in outcomes:
            number += 1
            running = outcome == "running"
            make_attempt(
                task,
                number,
                agent,
                "" if running else outcome,
                status="running"
                if running
                else "cancelled"
                if outcome == "cancelled"
                else "finished",
                seconds=number,
            )


def agent_row(html: str, agent: str, within: str = "") -> str:
    """The table row (`<tr data-agent=...>`) of one agent, after `within` when given."""
    start = html.index(within) if within else 0
    match = re.search(rf'<tr data-agent="{re.escape(agent)}">(.*?)</tr>', html[start:], re.S)
    assert match, f"no row for {agent}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


PLAN = {
    "claude": ["passed", "passed", "failed", "passed", "infra_error"],
    "noop": ["failed", "failed"],
    "reference": ["passed", "passed"],
}


@pytest.mark.django_db
def test_task_page_scores_each_agent_with_the_oracle_apart(admin_client):
    task = new_task("fix-add")
    seed(task, PLAN)
    html = admin_client.get("/tasks/fix-add/").content.decode()
    scores = html[html.index('id="scores"') :]
    # claude: 3 of 4 scored (the infrastructure error is not a failure), pass@5 not shown (n < 5)
    assert agent_row(scores, "claude") == "claude 3/4 +1 75% 0.75 – 0.75"
    assert agent_row(scores, "noop") == "noop 0/2 0% 0.00 – 0.00"
    assert agent_row(scores, "reference") == "reference 2/2 100% 1.00 – 1.00"
    assert scores.index("Agents") < scores.index("Built-in agents") < scores.index("Oracle")
    assert (
        scores.index('data-agent="noop"')
        < scores.index("Oracle")
        < scores.index('<tr data-agent="reference"')
    )
    assert "hx-get" not in scores[: scores.index(">")]  # nothing runs: no polling


@pytest.mark.django_db
def test_task_page_plot_has_a_labelled_row_per_agent(admin_client):
    task = new_task("fix-add")
    seed(task, PLAN)
    html = admin_client.get("/tasks/fix-add/").content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert "attempt number" in svg and "duration" in svg  # both axes labelled
    rows = re.findall(r'<g class="row" data-agent="([^"]+)">(.*?)\n  </g>', svg, re.S)
    assert [agent for agent, _ in rows] == ["claude", "noop", "reference"]
    for agent, body in rows:
        marks = re.findall(r'<g class="mark" data-agent="([^"]+)" data-outcome="([^"]+)"', body)
        assert {a for a, _ in marks} == {agent}
        assert len(marks) == len(PLAN[agent])
    assert "oracle · 2/2 passed" in svg and "built-in · 0/2 passed" in svg
    assert "infrastructure error (not scored)" in html  # the legend says it in words


@pytest.mark.django_db
def test_task_scores_panel_polls_only_while_an_attempt_runs(admin_client):
    task = new_task("fix-add")
    seed(task, {"claude": ["passed", "running"]})
    html = admin_client.get("/tasks/fix-add/").content.decode()
    panel = html[html.index('<div id="scores"') :]
    assert 'hx-get="/tasks/fix-add/scores/"' in panel[: panel.index(">")]
    assert "1 running" in agent_row(html, "claude", 'id="scores"')
    Attempt.objects.filter(task=task, status="running").update(
        status="finished", outcome="failed", finished_at=timezone.now()
    )
    partial = admin_client.get("/tasks/fix-add/scores/").content.decode()
    assert partial.startswith('<div id="scores" data-live="no">')
    assert agent_row(partial, "claude").startswith("claude 1/2 50% 0.50")


@pytest.mark.django_db
def test_tasks_list_shows_scores_per_agent_not_one_mixed_rate(admin_client):
    task = new_task("fix-add")
    seed(task, PLAN)
    new_task("untouched")
    html = admin_client.get("/").content.decode()
    body = html[html.index('id="task-fix-add"') :]
    first = agent_row(body, "claude")  # the task's first line also holds its own cells
    assert first.startswith("fix-add fix-add 9 5 passed 3 failed 1 infrastructure")
    assert "claude 3/4 75% 0.75 – 0.75" in first
    assert agent_row(body, "reference") == "reference oracle 2/2 100% 1.00 – 1.00"
    assert agent_row(body, "noop").startswith("noop built-in 0/2 0%")
    # all seven scored attempts mixed would make 5/8 = 62%: no such number
    assert "62%" not in html and "63%" not in html
    assert "no attempts" in html[html.index('id="task-untouched"') :]


@pytest.mark.django_db
def test_tasks_list_takes_the_same_queries_for_many_tasks(
    admin_client, django_assert_max_num_queries
):
    for i in range(3):
        seed(new_task(f"task-{i}"), PLAN)
    with django_assert_max_num_queries(12) as few:
        admin_client.get("/")
    for i in range(3, 40):
        seed(new_task(f"task-{i}"), PLAN)
    with django_assert_max_num_queries(len(few.captured_queries)):
        html = admin_client.get("/").content.decode()
    assert html.count('data-agent="claude"') == 40


@pytest.mark.django_db
def test_leaderboard_sorts_agents_within_their_group(admin_client):
    seed(
        new_task("alpha"), {"good": ["passed"] * 5, "bad": ["failed", "passed"], "noop": ["failed"]}
    )
    seed(
        new_task("beta"), {"good": ["failed", "passed"], "bad": ["passed"], "reference": ["passed"]}
    )
    html = admin_client.get("/leaderboard/").content.decode()
    assert 'href="/leaderboard/">Leaderboard</a>' in html  # the nav link
    # pass@1 averages over tasks (both 0.75 here); pass rate pools attempts (6/7 against 2/3)
    good, bad = agent_row(html, "good"), agent_row(html, "bad")
    assert good == "good 2 7 86% 0.75 1.00 (1 task) 0.75 100% 5/5 50% 1/2"
    assert bad == "bad 2 3 67% 0.75 – 0.75 50% 1/2 100% 1/1"
    assert re.search(r'aria-sort="descending"><a href="\?q=&sort=pass_at_1">pass@1', html)
    by_beta = admin_client.get("/leaderboard/?sort=-task:beta").content.decode()
    assert by_beta.index('data-agent="bad"') < by_beta.index('data-agent="good"')
    assert 'aria-sort="descending"><a href="?q=&sort=task%3Abeta"' in by_beta
    by_rate = admin_client.get("/leaderboard/?sort=pass_rate").content.decode()
    assert by_rate.index('data-agent="bad"') < by_rate.index('data-agent="good"')
    assert 'aria-sort="ascending"' in by_rate and by_rate.count("aria-sort") == 1
    # the oracle and built-in agents stay in their own groups whatever the sort
    for page in (html, by_beta, by_rate):
        assert page.index('data-agent="good"') < page.index("Built-in agents")
        assert (
            page.index('data-agent="noop"')
            < page.index("Oracle")
            < page.index('data-agent="reference"')
        )


@pytest.mark.django_db
def test_leaderboard_exports_csv_and_escapes_agent_labels(admin_client):
    seed(
        new_task("alpha"),
        {"<b>x</b>": ["passed"], "=cmd|calc": ["failed"], "reference": ["passed"]},
    )
    html = admin_client.get("/leaderboard/").content.decode()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    response = admin_client.get("/leaderboard/?format=csv&sort=agent")
    assert response["Content-Type"].startswith("text/csv")
    assert re.fullmatch(
        r'attachment; filename="boltz-leaderboard-\d{8}-\d{4}\.csv"',
        response["Content-Disposition"],
    )
    table = list(csv.reader(io.StringIO(response.content.decode())))
    assert table[0][-1] == "alpha" and table[0][5:8] == ["pass_rate", "pass_at_1", "pass_at_5"]
    assert [r[0] for r in table[1:]] == ["<b>x</b>", "'=cmd|calc", "reference"]
    assert table[1][-1] == "1.0000" and table[2][-1] == "0.0000" and table[3][1] == "oracle"


@pytest.mark.django_db
def test_score_pages_need_a_signed_in_viewer(client):
    new_task("fix-add")
    for url in ("/leaderboard/", "/leaderboard/?format=csv", "/tasks/fix-add/scores/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


# --- in Chromium ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:  # module-scoped: its event loop ends with the module
        yield launched


@pytest.mark.django_db(transaction=True)
def test_in_chromium_the_plot_separates_agents_updates_live_and_the_leaderboard_sorts(
    browser, live_server, django_user_model
):
    django_user_model.objects.create_superuser("reviewer", "", "review-pass")
    task = new_task("fix-add")
    seed(task, {"claude": ["passed", "failed"], "reference": ["passed"]})
    late = make_attempt(task, 10, "late-agent", "", status="running")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto(live_server.url + "/login/")
        page.fill("input[name=username]", "reviewer")
        page.fill("input[name=password]", "review-pass")
        page.click("button[type=submit]")
        page.goto(live_server.url + "/tasks/fix-add/")
        rows = page.locator("svg.plot g.row")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.agent)") == ["claude", "reference"]
        for agent in ("claude", "reference"):
            marks = page.locator(f'svg.plot g.row[data-agent="{agent}"] g.mark')
            assert set(marks.evaluate_all("ms => ms.map(m => m.dataset.agent)")) == {agent}
        # each row is drawn apart: its marks sit inside its own band
        boxes = [r.bounding_box() for r in rows.all()]
        assert boxes[0]["y"] + boxes[0]["height"] <= boxes[1]["y"] + 1
        assert page.locator("svg.plot text", has_text="attempt number").count() == 1
        # the running attempt finishes: the plot and the table show it without a reload
        Attempt.objects.filter(pk=late.pk).update(
            status="finished", outcome="passed", score=1.0, finished_at=timezone.now()
        )
        page.locator('svg.plot g.row[data-agent="late-agent"] g.mark').wait_for()
        assert page.locator('#scores tr[data-agent="late-agent"]').inner_text().split()[:3] == [
            "late-agent",
            "1/1",
            "100%",
        ]
        page.wait_for_selector('#scores[data-live="no"]')
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "task-scores.png"), full_page=True)

        page.click("nav >> text=Leaderboard")
        agents = page.locator("table.leaderboard tbody tr[data-agent]")
        first = agents.evaluate_all("rs => rs.map(r => r.dataset.agent)")
        assert first == ["late-agent", "claude", "reference"]  # pass@1 best first, oracle apart
        page.click("table.leaderboard th >> text=pass@1")
        header = page.locator("table.leaderboard th[aria-sort]")
        assert header.locator("a").inner_text() == "pass@1"
        assert header.get_attribute("aria-sort") == "ascending" and "▲" in header.inner_text()
        assert agents.evaluate_all("rs => rs.map(r => r.dataset.agent)") == [
            "claude",
            "late-agent",
            "reference",
        ]
        page.screenshot(path=str(SHOTS / "leaderboard.png"), full_page=True)
        with page.expect_download() as download:
            page.click("text=Download CSV")
        assert download.value.suggested_filename.startswith("boltz-leaderboard-")

        page.click("nav >> text=Tasks")
        oracle = page.locator('#task-fix-add tr[data-agent="reference"]')
        assert oracle.inner_text().split()[:3] == ["reference", "oracle", "1/1"]
        page.screenshot(path=str(SHOTS / "tasks-scores.png"), full_page=True)
    finally:
        context.close()
