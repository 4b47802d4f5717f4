"""The review UI in Debian's Chromium (Playwright) against a served instance, with a real
worker running the attempts. Screenshots of each page go to test-results/screenshots/."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest

from attempts.models import Attempt
from tests.conftest import ROOT, chromium, containers_of, signed_in_page, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

SHOTS = ROOT / "test-results" / "screenshots"
XSS_MARKERS = ("<script>window.__xss=1</script>", '"><img src=x onerror="window.__xss=2">')


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:  # module-scoped: its event loop ends with the module
        yield launched


@pytest.fixture
def page(browser, live_server, django_user_model):
    with signed_in_page(
        browser, live_server.url, django_user_model, accept_downloads=True
    ) as signed_in:
        signed_in.dialogs = []
        signed_in.on("dialog", lambda d: (signed_in.dialogs.append(d.message), d.dismiss()))
        yield signed_in


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def start_from_task_page(page, *, count: int, agent: str, command: str = "") -> None:
    page.fill("form.start input[name=count]", str(count))
    page.select_option("form.start select[name=agent]", agent)
    if command:  # the command box shows only for the command agent
        page.fill("form.start input[name=command]", command)
    page.click("form.start button[type=submit]")
    page.wait_for_selector("form.confirm")
    page.click("form.confirm button[type=submit]")
    page.wait_for_selector("#attempts")


def confirm(page, button_text: str) -> None:
    page.click(f"button:has-text('{button_text}')")
    page.wait_for_selector("form.confirm")
    page.click("form.confirm button[type=submit]")


@pytest.mark.timeout(300)
def test_a_reviewer_works_through_the_ui(page, live_server, worker, load_example):
    shot(page, "01-tasks-empty")
    task = load_example("fix-add")
    page.goto(live_server.url + "/")
    assert page.locator("text=fix-add").count() >= 1
    shot(page, "02-tasks")
    page.click("a:has-text('fix-add')")
    page.wait_for_selector("form.start")
    shot(page, "03-task")

    # Start two attempts and watch them go from queued to finished without a reload.
    start_from_task_page(
        page, count=2, agent="command", command="sleep 2; sed -i 's/a - b/a + b/' calc.py"
    )
    page.evaluate("window.__same_page = true")
    status = page.locator("#attempt-1 td:nth-child(3)")
    assert status.inner_text().strip().lower() in ("queued", "starting", "running")
    page.wait_for_selector("#attempt-1 .outcome-passed", timeout=60_000)
    page.wait_for_selector("#attempt-2 .outcome-passed", timeout=60_000)
    assert page.evaluate("window.__same_page") is True  # updated live, not reloaded
    shot(page, "04-task-live-finished")

    # Timeline, changes (side by side) and check of attempt 1.
    page.click("#attempt-1 a")
    page.wait_for_selector("ol.timeline li.ev.kind-check")
    assert page.locator("li.ev.kind-check").count() == 1
    shot(page, "05-attempt-timeline")
    page.click("nav.tabs a:has-text('Changes')")
    page.wait_for_selector("table.sbs")
    assert page.locator("table.sbs td.add mark").first.inner_text() == "+"
    shot(page, "06-attempt-changes")
    page.click("nav.tabs a:has-text('Check')")
    page.wait_for_selector("section.check .outcome-passed")
    shot(page, "07-attempt-check")

    # Export: the bundle downloads.
    with page.expect_download() as download:
        page.click("a:has-text('Export bundle')")
    data = Path(download.value.path()).read_bytes()
    assert "attempt.json" in zipfile.ZipFile(io.BytesIO(data)).namelist()

    # Re-check: a second result appears beside the first.
    confirm(page, "Re-check")
    deadline = time.monotonic() + 60
    while page.locator("h2:has-text('Re-check 1 by reviewer')").count() == 0:
        assert time.monotonic() < deadline, "the re-check did not appear"
        time.sleep(0.5)
        page.reload()
    shot(page, "08-attempt-rechecked")

    # Compare attempts 1 and 2.
    page.goto(f"{live_server.url}/tasks/fix-add/compare/?a=1&b=2")
    assert page.locator(".cmpfile h3:has-text('calc.py')").count() == 1
    assert page.locator("text=same change in both").count() == 1
    shot(page, "09-compare")

    # Cancel a running attempt: the header changes live.
    page.goto(f"{live_server.url}/tasks/fix-add/")
    start_from_task_page(page, count=1, agent="command", command="echo started; sleep 300")
    page.click("#attempt-3 a")
    page.wait_for_selector(
        "li.ev.kind-exec.actor-agent pre.live:has-text('started')", timeout=60_000
    )
    confirm(page, "Cancel")
    page.wait_for_selector("#attempt-header .status-cancelled", timeout=30_000)
    assert "cancelled by reviewer" in page.locator("#attempt-header").inner_text()
    assert page.locator("#attempt-header button:has-text('Cancel')").count() == 0, page.locator(
        "#attempt-header"
    ).inner_html()
    shot(page, "10-attempt-cancelled")

    # Delete attempt 2: it is gone, and so is its container.
    second = Attempt.objects.get(task=task, number=2)
    page.goto(f"{live_server.url}/attempts/{second.pk}/")
    confirm(page, "Delete attempt")
    page.wait_for_selector("#attempts")
    assert page.locator("#attempt-2").count() == 0
    assert page.goto(f"{live_server.url}/attempts/{second.pk}/").status == 404
    shot(page, "11-deleted")
    wait_until(lambda: not containers_of(second.pk), what="the deleted attempt's container")
    assert page.dialogs == []


@pytest.mark.timeout(240)
def test_untrusted_content_never_runs_in_the_page(page, live_server, worker, load_example):
    from attempts.services.attempts import attempt_create
    from tests.conftest import wait_finished

    task = load_example("fix-add")
    evil_name = '"><img src=x onerror=window.__xss=3>.txt'
    script = (
        f"printf '%s\\n' '{XSS_MARKERS[0]}' '{XSS_MARKERS[1]}'\n"
        f"printf '%s\\n' '{XSS_MARKERS[1]}' >&2\n"
        f"printf '%s\\n' '<script>window.__xss=4</script>' > '{evil_name}'\n"
        "echo '<script>window.__xss=6</script>' >> calc.py\n"
        "git add -A && git commit -qm '<script>window.__xss=5</script>'\n"
    )
    attempt = wait_finished(
        [
            attempt_create(
                task=task,
                agent="command",
                command="sh $BOLTZ_AGENT_DIR/evil.sh",
                files={"evil.sh": script.encode()},
            )
        ]
    )[0]
    assert attempt.commits and attempt.commits[0]["subject"].startswith("<script>")
    other = wait_finished([attempt_create(task=task, agent="noop")])[0]
    urls = [
        f"/attempts/{attempt.pk}/",
        f"/attempts/{attempt.pk}/?view=changes",
        f"/attempts/{attempt.pk}/?view=check",
        "/tasks/fix-add/",
        f"/tasks/fix-add/compare/?a={attempt.number}&b={other.number}",
    ]
    for n, url in enumerate(urls):
        response = page.goto(live_server.url + url)
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__xss") is None, url
        shot(page, f"20-untrusted-{n}")
    page.goto(live_server.url + f"/attempts/{attempt.pk}/")
    assert page.locator(f"text={XSS_MARKERS[0]}").count() >= 1  # shown as text
    page.goto(live_server.url + f"/attempts/{attempt.pk}/?view=changes")
    assert page.locator(f"text={evil_name}").count() >= 1
    assert page.locator("text=<script>window.__xss=5</script>").count() == 1  # the commit
    assert page.dialogs == []


@pytest.mark.timeout(240)
def test_an_admin_creates_a_task_from_an_archive_and_validates_it(
    page, live_server, worker, tmp_path
):
    from django.conf import settings

    from attempts.dispatch.queue import enqueue_reap
    from attempts.models import Task, WorkerHost
    from tests.conftest import EXAMPLES

    # Workers report their images as they start and at each reaper run; the test database
    # was flushed since this session's worker started, so ask it again.
    enqueue_reap(settings.BOLTZ_HOST)
    wait_until(lambda: WorkerHost.objects.exists(), what="the worker to report its images")
    archive = tmp_path / "calc.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in (EXAMPLES / "fix-add" / "repo").rglob("*"):
            if path.is_file():
                bundle.write(path, f"calc/{path.relative_to(EXAMPLES / 'fix-add' / 'repo')}")
    check = tmp_path / "test_calc.py"
    check.write_bytes((EXAMPLES / "fix-add" / "check" / "tests" / "test_calc.py").read_bytes())
    patch = (EXAMPLES / "fix-add" / "solution.patch").read_text()

    page.goto(live_server.url + "/admin/attempts/task/add/")
    page.fill("#id_slug", "from-archive")
    page.fill("#id_title", "Made in the admin")
    page.fill("#id_instruction", "Fix add() in calc.py.")
    page.set_input_files("#id_repo_archive", str(archive))
    page.fill("#id_check_command", "python3 -m pytest -q -p no:cacheprovider test_calc.py")
    page.set_input_files("#id_check_uploads", str(check))
    page.fill("#id_reference_patch", patch)
    shot(page, "30-admin-add-task")
    page.click("input[name=_save]")
    page.wait_for_selector("#result_list")
    shot(page, "31-admin-task-list")
    task = Task.objects.get(slug="from-archive")
    assert task.check_file_paths == ["test_calc.py"]

    page.check(f"input[name=_selected_action][value='{task.pk}']")
    page.select_option("select[name=action]", "validate")
    page.click("button[name=index]")
    page.wait_for_selector("text=Validating 1 task(s)")
    deadline = time.monotonic() + 90
    while Task.objects.get(pk=task.pk).validation != "valid":
        assert Task.objects.get(pk=task.pk).validation in ("running", "valid"), Task.objects.get(
            pk=task.pk
        ).validation_note
        assert time.monotonic() < deadline, "validation did not finish"
        time.sleep(0.5)
    page.reload()
    row = page.locator("#result_list tr", has_text="from-archive")
    assert "valid" in row.inner_text() and "invalid" not in row.inner_text()
    shot(page, "32-admin-task-valid")
