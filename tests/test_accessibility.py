"""Usable by keyboard, screen reader, phone and dark mode: axe-core (the copy bundled by the
axe-playwright-python package) on every page in Debian's Chromium, error pages included, light
and dark, wide and 390 px, with no moderate, serious or critical violation and nothing wider
than a phone's screen; the task page's plot readable in dark mode; the live refresh keeps focus and sideways scroll
and says status changes aloud; the diff reaches 4.5:1 contrast, marks lines in text, has column
headers and is one column on a phone. Seeded rows behind Django's live server, and the real
worker where a running attempt is needed."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from attempts.models import (
    Attempt,
    CheckResult,
    Evaluation,
    Event,
    Pool,
    TaskStep,
    TestOutcome,
    WorkerHost,
)
from tests.conftest import ROOT, chromium, new_task, wait_finished

SHOTS = ROOT / "test-results" / "screenshots"
DIFF = """diff --git a/calc.py b/calc.py
index 8e0d4ff..6119934 100644
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 # A tiny calculator: "strings", 42, and a comment.
 def add(a: int, b: int) -> int:
-    return a - b  # wrong
+    return a + b  # right
 @decorated
 class Calc(object): pass
"""
PHONE = 390  # a phone's width in CSS pixels (iPhone 12 to 15)
MODES = [  # (name, viewport width, colour scheme)
    ("wide-light", 1280, "light"),
    ("wide-dark", 1280, "dark"),
    ("narrow-light", PHONE, "light"),
    ("narrow-dark", PHONE, "dark"),
]


# --- contrast of the diff's colours, computed --------------------------------------------------
def _rgb(colour: str) -> tuple[float, float, float]:
    h = colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    return tuple(int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))


def _luminance(colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = map(channel, _rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG 2 contrast ratio of two colours."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _split_dark(css: str) -> tuple[str, str]:
    """(the rules outside `@media (prefers-color-scheme: dark)`, the rules inside it)."""
    marker = "@media (prefers-color-scheme: dark) {"
    start = css.index(marker)
    depth, end = 0, start + len(marker) - 1
    for end in range(start + len(marker) - 1, len(css)):
        depth += {"{": 1, "}": -1}.get(css[end], 0)
        if depth == 0:
            break
    return css[:start] + css[end + 1 :], css[start + len(marker) : end]


def _variables(block: str) -> dict[str, str]:
    root = re.search(r":root\s*\{(.*?)\}", block, re.S).group(1)
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{3,6})", root))


def _token_colours(block: str) -> dict[str, str]:
    """Each Pygments class's colour, from rules of one class or of several (`.code .a, .code .b`)."""
    colours = {}
    for selectors, colour in re.findall(r"([^{}]+)\{ color: (#[0-9a-fA-F]{3,6})", block):
        for cls in re.findall(r"\.code \.(\w+)", selectors):
            colours[cls] = colour
    return colours


def _code_background(block: str) -> str:
    return re.search(r"\.code \{ background: (#[0-9a-fA-F]{3,6})", block).group(1)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_syntax_colours_reach_4_5_to_1_on_every_diff_background(scheme):
    boltz_light, boltz_dark = _split_dark((ROOT / "static/css/boltz.css").read_text())
    pyg_light, pyg_dark = _split_dark((ROOT / "static/css/pygments.css").read_text())
    variables = _variables(boltz_light)
    if scheme == "dark":
        variables |= _variables(boltz_dark)
    tokens = _token_colours(pyg_dark if scheme == "dark" else pyg_light)
    assert len(tokens) >= 60  # every Pygments class of the style has its colour here
    backgrounds = {
        "context": _code_background(pyg_dark if scheme == "dark" else pyg_light),
        "card": variables["card"],
        "added": variables["add-bg"],
        "removed": variables["del-bg"],
        "added, changed part": variables["add-mark"],
        "removed, changed part": variables["del-mark"],
    }
    low = [
        f".{cls} {colour} on {where} {background}: {contrast(colour, background):.2f}"
        for cls, colour in tokens.items()
        for where, background in backgrounds.items()
        if contrast(colour, background) < 4.5
    ]
    assert not low, low
    # The plain text, the +/- signs and the line numbers too.
    for fg, bg in [
        ("fg", "add-mark"),
        ("fg", "del-mark"),
        ("ok", "add-bg"),
        ("bad", "del-bg"),
        ("muted", "soft"),
        ("info", "info-bg"),
    ]:
        assert contrast(variables[fg], variables[bg]) >= 4.5, (fg, bg)


# --- the diff's markup --------------------------------------------------------------------------
def make_attempt(task, number: int, **fields) -> Attempt:
    now = timezone.now()
    values = {
        "agent": "command",
        "agent_command": "sed -i 's/a - b/a + b/' calc.py",
        "status": "finished",
        "outcome": "failed",
        "score": 0.5,
        "started_at": now - timedelta(seconds=9),
        "finished_at": now,
        **fields,
    }
    return Attempt.objects.create(task=task, number=number, **values)


def out(text: str) -> dict:
    return {"head": text, "tail": "", "bytes": len(text), "truncated": False, "utf8": True}


def seed_attempt_with_everything(task, number: int = 1, **fields) -> Attempt:
    attempt = make_attempt(
        task, number, changes_state="recorded", diff=DIFF, diff_bytes=len(DIFF), **fields
    )
    check = CheckResult.objects.create(
        attempt=attempt,
        passed=False,
        score=0.5,
        source="junit",
        mode="fresh",
        summary="1 of 2 tests passed; failing: t::test_x",
        output="collected 2 items\n" + "F.\n" * 300,
        tests_total=2,
        tests_passed=1,
    )
    TestOutcome.objects.bulk_create(
        [
            TestOutcome(check_result=check, name="t::test_ok", outcome="passed"),
            TestOutcome(
                check_result=check,
                name="t::test_x",
                outcome="failed",
                message="assert add(1, 2) == 3\n" + "  where -1 = add(1, 2)\n" * 40,
            ),
        ]
    )
    base = timezone.now() - timedelta(seconds=8)
    specs = [
        ("lifecycle", "system", {"status": "starting", "message": "creating a sandbox"}),
        ("lifecycle", "system", {"status": "running", "message": "agent runs a command"}),
        ("exec", "agent", {"phase": "start", "exec": 1, "step": "agent", "command": "make"}),
        ("exec", "agent", {"phase": "end", "exec": 1, "step": "agent", "command": "make",
                           "exit_code": 2, "duration": 1.5,
                           "stdout": out("built\n" * 200), "stderr": out("oops\n")}),
        ("message", "agent", {"role": "assistant", "text": "I fixed it"}),
        ("exec", "system", {"phase": "start", "exec": 2, "step": "check", "command": "pytest"}),
        ("exec", "system", {"phase": "end", "exec": 2, "step": "check", "command": "pytest",
                            "exit_code": 1, "duration": 0.7, "stdout": out("1 failed\n")}),
        ("check", "system", {"passed": False, "score": 0.5, "source": "junit",
                             "summary": "1 of 2 tests passed; failing: t::test_x"}),
    ]  # fmt: skip
    Event.objects.bulk_create(
        Event(attempt=attempt, seq=i, kind=k, actor=a, data=d, time=base + timedelta(seconds=i))
        for i, (k, a, d) in enumerate(specs, start=1)
    )
    return attempt


@pytest.mark.django_db
def test_the_diff_marks_lines_in_text_and_has_column_headers(admin_client):
    attempt = seed_attempt_with_everything(new_task("fix-add"))
    html = admin_client.get(f"/attempts/{attempt.pk}/?view=changes").content.decode()
    table = html.split('<table class="sbs code">')[1].split("</table>")[0]
    headers = re.findall(r'<th scope="col">(.*?)</th>', table.split("</thead>")[0])
    assert len(headers) == 4 and "Before" in headers[1] and "After" in headers[3]
    assert re.search(r'<td class="old del"><span class="sign">-</span>', table)
    assert re.search(r'<td class="new add"><span class="sign">\+</span>', table)
    assert '<td class="new "><span class="sign"> </span>' in table  # context lines align


# --- in Chromium --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:  # module-scoped: its event loop ends with the module
        yield launched


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_superuser("reviewer", "", "review-pass")


def open_page(browser, url: str, *, width: int = 1280, scheme: str = "light", sign_in=True):
    context = browser.new_context(
        viewport={"width": width, "height": 900}, color_scheme=scheme, accept_downloads=True
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url + "/")
    if sign_in:
        page.fill("input[name=username]", "reviewer")
        page.fill("input[name=password]", "review-pass")
        page.click("button[type=submit]")
        page.wait_for_selector("nav a:has-text('Leaderboard')")
    return page


def axe_script() -> str:
    import axe_playwright_python

    return (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text()


def violations(page, script: str) -> list[str]:
    """axe-core's WCAG 2 A and AA rules and its best practices (heading order, landmarks) on
    the page as it is: every moderate, serious and critical one."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(script)  # evaluated by the browser itself: the page's CSP does not apply
    result = page.evaluate(
        "() => axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa',"
        " 'best-practice']}, resultTypes: ['violations']})"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + "; ".join(" ".join(n["target"]) for n in v["nodes"][:3])
        for v in result["violations"]
        if v["impact"] in ("moderate", "serious", "critical")
    ]


def too_wide(page) -> str:
    """What sticks out past the screen's right edge, or "" (a table scrolling inside its own
    box is fine: the page itself must not scroll sideways)."""
    return page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            if (document.documentElement.scrollWidth <= width) return "";
            const out = [...document.querySelectorAll("body *")].filter(e => {
                const box = e.getBoundingClientRect();
                return box.right > width + 1 && box.width > 0;
            }).slice(0, 4).map(e => e.tagName.toLowerCase() + "." + e.className + " "
                               + Math.round(e.getBoundingClientRect().right) + "px");
            return `${document.documentElement.scrollWidth}px wide: ${out.join(", ")}`;
        }"""
    )


def seed_site(reviewer) -> dict[str, str]:
    """One of every page's subject; returns the pages' paths by name."""
    task = new_task(
        "fix-add",
        title="Fix add()",
        instruction="Fix add() in calc.py.\nThe tests in tests/ say how.",
        check_command="pytest -q tests",
    )
    done = seed_attempt_with_everything(task, 1)
    passed = make_attempt(task, 2, outcome="passed", score=1.0, agent="reference")
    running = make_attempt(
        task, 3, status="running", outcome="", score=None, finished_at=None, agent="command"
    )
    infra = make_attempt(
        task, 4, outcome="infra_error", score=None, failure_reason="start: image gone"
    )
    steps = new_task("two-steps", title="Two steps", step_rewards="mean")
    for position in (1, 2):
        TaskStep.objects.create(
            task=steps, position=position, name=f"s{position}", instruction=f"Step {position}.",
            agent_timeout=60, check_timeout=60,
        )  # fmt: skip
    multi = make_attempt(steps, 1, outcome="failed", score=0.5)
    for step, score in (("s1", 0.0), ("s2", 1.0), ("", 0.5)):
        CheckResult.objects.create(
            attempt=multi, step=step, passed=score == 1.0, score=score, summary=step or "mean"
        )
    evaluation = Evaluation.objects.create(
        run_id="nightly", models_evaluated=["acme/model-1"], state="finished",
        finished_at=timezone.now(),
    )  # fmt: skip
    Evaluation.objects.create(run_id="weekly", models_evaluated=["acme/model-2"], state="finished")
    pool = Pool.objects.create(
        owner=reviewer, tasks=["fix-add"], size=1, max_steps=50, episode_seconds=600.0
    )
    WorkerHost.objects.create(
        name="docker-1", capacity=8, last_seen=timezone.now(), docker_version="20.10.24+dfsg1"
    )
    WorkerHost.objects.create(
        name="docker-2", capacity=4, last_seen=timezone.now() - timedelta(hours=1)
    )
    return {
        "tasks": "/",
        "task": "/tasks/fix-add/",
        "multi-step task": "/tasks/two-steps/",
        "timeline": f"/attempts/{done.pk}/",
        "changes": f"/attempts/{done.pk}/?view=changes",
        "check": f"/attempts/{done.pk}/?view=check",
        "running": f"/attempts/{running.pk}/",
        "passed": f"/attempts/{passed.pk}/",
        "infra error": f"/attempts/{infra.pk}/",
        "multi-step": f"/attempts/{multi.pk}/",
        "multi-step check": f"/attempts/{multi.pk}/?view=check",
        "compare": "/tasks/fix-add/compare/?a=1&b=2",
        "leaderboard": "/leaderboard/",
        "runs": "/runs/",
        "run": f"/runs/{evaluation.pk}/",
        "runs compare": "/runs/compare/?a=nightly&b=weekly",
        "pools": "/pools/",
        "pool": f"/pools/{pool.pk}/",
        "hosts": "/hosts/",
        "start form": "/tasks/fix-add/start/",
        "cancel confirmation": f"/attempts/{running.pk}/cancel/",
        "delete confirmation": f"/attempts/{done.pk}/delete/attempt/",
    }


# Error pages reached in the browser: (name, path, status).
ERROR_PAGES = [
    ("400 compare without attempts", "/tasks/fix-add/compare/", 400),
    ("400 unknown sort", "/?sort=colour", 400),
    ("404 no such task", "/tasks/no-such-task/", 404),
    ("404 no such run", "/runs/compare/?a=nightly&b=nope", 404),
    ("405 a visit to sign out", "/logout/", 405),
]


def serve(status: int, html: str):
    """A Playwright route handler answering with this page."""
    return lambda route: route.fulfill(
        status=status, body=html, content_type="text/html; charset=utf-8"
    )


def rendered_error_pages(reviewer) -> dict[str, tuple[int, str]]:
    """The error pages a browser cannot easily be made to meet here, as Boltz answers them:
    403 (a user without the permission), 413 (a body over the limit), 500 and 503 (the workers'
    queue down). Served to the browser in place of a page of the live server."""
    import io

    from django.contrib.auth import get_user_model
    from django.test import Client, RequestFactory
    from django.views.defaults import server_error

    from attempts.dispatch.errors import WorkerUnreachable
    from attempts.web.middleware import WorkersUnreachablePages
    from boltz_web.request_limits import RequestBodyLimit

    viewer = Client()
    viewer.force_login(get_user_model().objects.create_user("no-rights"))
    refused = viewer.get("/tasks/fix-add/")
    big = RequestFactory().post(
        "/tasks/fix-add/start/", CONTENT_LENGTH=str(1 << 40), **{"wsgi.input": io.BytesIO()}
    )
    big.user = reviewer
    too_large = RequestBodyLimit(lambda request: None)(big)
    down = RequestFactory().post("/attempts/1/rerun/")
    down.user = reviewer
    unreachable = WorkersUnreachablePages(None).process_exception(
        down, WorkerUnreachable("redis: connection refused")
    )
    failed = server_error(RequestFactory().get("/"))
    return {
        name: (response.status_code, response.content.decode())
        for name, response in (
            ("403 not allowed", refused),
            ("413 too large", too_large),
            ("500 server error", failed),
            ("503 workers unreachable", unreachable),
        )
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("mode", "width", "scheme"), MODES, ids=[m[0] for m in MODES])
def test_axe_finds_no_moderate_violation_on_any_page_and_nothing_is_wider_than_a_phone(
    browser, live_server, reviewer, mode, width, scheme
):
    paths = seed_site(reviewer)
    served = rendered_error_pages(reviewer)
    script = axe_script()
    found: dict[str, list[str]] = {}

    def look(name: str) -> None:
        found[name] = violations(page, script)
        if width == PHONE and (wide := too_wide(page)):
            found[name].append(f"wider than the screen: {wide}")

    # The sign-in page, signed out.
    page = open_page(browser, live_server.url, width=width, scheme=scheme, sign_in=False)
    look("sign-in")
    page.context.close()
    page = open_page(browser, live_server.url, width=width, scheme=scheme)
    for name, path in paths.items():
        response = page.goto(live_server.url + path)
        if response.status != 200:
            found[name] = [f"answered {response.status}"]
            continue
        if name == "changes":
            page.wait_for_selector("table.sbs")
        look(name)
        if width == PHONE and name in ("tasks", "task", "timeline", "compare", "leaderboard"):
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"a11y-{name}-{mode}.png"), full_page=True)
    # The start confirmation, reached from the task page's form.
    page.goto(live_server.url + paths["task"])
    page.fill("form.start input[name=count]", "1")
    page.select_option("form.start select[name=agent]", "command")
    page.fill("form.start input[name=command]", "true")
    page.click("form.start button[type=submit]")
    page.wait_for_selector("form.confirm")
    look("start confirmation")
    # Error pages: each in the layout, with a way back.
    for name, path, status in ERROR_PAGES:
        response = page.goto(live_server.url + path)
        look(name)
        if response.status != status:
            found[name].append(f"answered {response.status}")
    page.goto(live_server.url + paths["task"])  # a form whose CSRF token has gone stale
    page.evaluate("document.querySelector('form.who [name=csrfmiddlewaretoken]').value = 'x'")
    with page.expect_navigation():
        page.click("form.who button[type=submit]")
    assert "This form has expired" in page.inner_text("main")
    look("403 form expired")
    for name, (status, html) in served.items():
        url = f"{live_server.url}/served/{status}/"
        page.route(url, serve(status, html))
        assert page.goto(url).status == status
        look(name)
    page.context.close()
    bad = {where: v for where, v in found.items() if v}
    assert not bad, "\n".join(f"{mode} {where}: {v}" for where, v in bad.items())
    assert len(found) == len(paths) + len(ERROR_PAGES) + len(served) + 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_the_diff_is_one_column_on_a_phone_and_dark_mode_follows_the_system(
    browser, live_server, reviewer
):
    paths = seed_site(reviewer)
    boxes = {}
    for width in (1280, PHONE):
        page = open_page(browser, live_server.url, width=width)
        page.goto(live_server.url + paths["changes"])
        row = page.locator("table.sbs tr.change").first
        boxes[width] = (row.locator("td.del").bounding_box(), row.locator("td.add").bounding_box())
        if width == PHONE:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "a11y-diff-narrow.png"), full_page=True)
            # Nothing wider than the screen but the table's own scrolling.
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE
        page.context.close()
    old, new = boxes[1280]
    assert new["x"] > old["x"] + old["width"] - 1 and abs(new["y"] - old["y"]) < 2  # side by side
    old, new = boxes[PHONE]
    assert abs(new["x"] - old["x"]) < 2 and new["y"] >= old["y"] + old["height"] - 1  # stacked
    assert new["width"] > 250  # not 13-character sides

    shades = {}
    for scheme in ("light", "dark"):
        page = open_page(browser, live_server.url, scheme=scheme)
        page.goto(live_server.url + paths["changes"])
        shades[scheme] = page.evaluate(
            """() => [document.body, document.querySelector('section.card'),
                      document.querySelector('table.sbs td.add')].map(
                e => getComputedStyle(e).backgroundColor.match(/\\d+/g).slice(0, 3)
                     .map(Number).reduce((a, b) => a + b, 0))"""
        )
        if scheme == "dark":
            page.screenshot(path=str(SHOTS / "a11y-changes-dark.png"), full_page=True)
        # The task page's plot: an agent's name stands out from its band and the plot.
        page.goto(live_server.url + paths["task"])
        shades[f"{scheme} plot"] = page.evaluate(
            """() => ['svg.plot .row .name', 'svg.plot .row .band', 'svg.plot'].map(s => {
                const style = getComputedStyle(document.querySelector(s));
                return (s === 'svg.plot' ? style.backgroundColor : style.fill)
                    .match(/\\d+/g).slice(0, 3).map(Number).reduce((a, b) => a + b, 0); })"""
        )
        page.context.close()
    assert all(v > 600 for v in shades["light"]), shades
    assert all(v < 200 for v in shades["dark"]), shades
    for scheme, (name, band, plot) in ((s, shades[f"{s} plot"]) for s in ("light", "dark")):
        assert abs(name - band) > 350 and abs(name - plot) > 350, (scheme, name, band, plot)
    assert shades["dark plot"][0] > 600  # light names on the dark plot


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_keyboard_gets_a_skip_link_a_focus_ring_and_focusable_scrolling_output(
    browser, live_server, reviewer
):
    paths = seed_site(reviewer)
    page = open_page(browser, live_server.url, width=PHONE)
    page.goto(live_server.url + paths["check"])
    page.keyboard.press("Tab")
    skip = page.locator("a.skip")
    assert page.evaluate("document.activeElement.className") == "skip" and skip.is_visible()
    ring = skip.evaluate(
        "e => getComputedStyle(e).outlineStyle + ' ' + getComputedStyle(e).outlineWidth"
    )
    assert ring == "solid 3px"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    # The check's long output scrolls, and a keyboard can reach it to scroll it.
    output = page.locator("section pre.out").last
    assert output.evaluate("e => e.scrollHeight > e.clientHeight")
    assert output.get_attribute("tabindex") == "0"
    page.context.close()


def count_polls(page) -> None:
    page.evaluate(
        """() => { window.__polls = 0;
        document.addEventListener('htmx:afterRequest', () => { window.__polls += 1; }); }"""
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_a_table_scrolled_sideways_keeps_its_scroll_and_status_changes_are_said(
    browser, live_server, reviewer
):
    paths = seed_site(reviewer)
    running = Attempt.objects.get(number=3)
    page = open_page(browser, live_server.url, width=PHONE)
    page.goto(live_server.url + paths["task"])
    table = page.locator("#attempts table.grid")
    assert table.evaluate("e => e.scrollWidth > e.clientWidth")  # it does scroll sideways
    # ...and shows it: its hidden right side fades (boltz.css), then both sides once scrolled.
    assert table.get_attribute("data-scroll") == "right"
    assert table.evaluate("e => getComputedStyle(e).maskImage").startswith("linear-gradient")
    page.locator("#attempt-3 a").first.focus()  # (focusing it scrolls it into view: first)
    table.evaluate("e => { e.scrollLeft = 120; }")
    page.wait_for_function(
        "() => document.querySelector('#attempts table.grid').dataset.scroll === 'left right'"
    )
    count_polls(page)
    page.wait_for_function("() => window.__polls >= 3")
    assert table.evaluate("e => e.scrollLeft") == 120
    assert table.get_attribute("data-scroll") == "left right"  # kept across refreshes
    # A status change arrives: only it changes, and it is said aloud.
    Attempt.objects.filter(pk=running.pk).update(status="checking")
    page.wait_for_selector("#attempt-3 .status-checking")
    assert "#3: checking" in page.locator("#live-note[role=status]").inner_text().lower()
    page.evaluate("window.__polls = 0")
    page.wait_for_function("() => window.__polls >= 2")
    assert table.evaluate("e => e.scrollLeft") == 120
    assert page.evaluate("document.activeElement.textContent") == "#3"
    page.context.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(180)
def test_focus_stays_on_cancel_across_refreshes_of_a_running_attempt(
    browser, live_server, reviewer, worker, load_example
):
    from attempts.services.attempts import attempt_create

    task = load_example("fix-add")
    attempt = attempt_create(
        task=task,
        agent="command",
        command="for i in $(seq 1 120); do echo step $i; sleep 0.5; done",
    )
    page = open_page(browser, live_server.url)
    page.goto(f"{live_server.url}/attempts/{attempt.pk}/")
    assert page.locator("div[role=log] ol#events").count() == 1
    page.wait_for_selector("li.ev.kind-exec.actor-agent pre.live", timeout=60_000)
    cancel = page.locator("#attempt-cancel")
    cancel.focus()
    count_polls(page)
    tails = set()
    for polls in range(2, 8, 2):  # several refreshes, while the live tail keeps changing
        page.wait_for_function(f"() => window.__polls >= {polls}")
        assert page.evaluate("document.activeElement.id") == "attempt-cancel", polls
        tails.add(page.locator("li.ev.kind-exec.actor-agent pre.live").inner_text())
    assert len(tails) >= 2  # the page did change under the focused button
    # The keyboard acts on it: Enter asks to confirm the cancel.
    page.keyboard.press("Enter")
    page.wait_for_selector("form.confirm")
    page.click("form.confirm button[type=submit]")
    (attempt,) = wait_finished([attempt], timeout=60)
    assert attempt.status == "cancelled" or attempt.outcome == "cancelled"
    page.context.close()
