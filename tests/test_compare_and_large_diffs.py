"""The compare page, an attempt whose diff holds a 50 MB file next to a one-line fix, and a kept
sandbox removed from outside Boltz: in Chromium against a served instance with a real worker,
plus the pure parts (patch index, clipping, final-against-final diff) in milliseconds."""

from __future__ import annotations

import io
import subprocess

import pytest

from attempts.core import diffview
from attempts.models import Attempt, SandboxState
from attempts.services.attempts import attempt_create
from attempts.web import interdiff
from tests.conftest import ROOT, chromium, containers_of, signed_in_page, wait_finished, wait_until

PAGE_LIMIT = 3 * 1024 * 1024  # "no page weighs more than a few MB"

FIX = """diff --git a/calc.py b/calc.py
index 1111111..2222222 100644
--- a/calc.py
+++ b/calc.py
@@ -1,4 +1,4 @@
 def add(a, b):
-    return a - b
+    return a + b
\x20
 def sub(a, b):
"""
OTHER_FIX = FIX.replace("+    return a + b", "+    # fixed\n+    return b + a").replace(
    "@@ -1,4 +1,4 @@", "@@ -1,4 +1,5 @@"
)
NEW_FILE = """diff --git a/notes.txt b/notes.txt
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/notes.txt
@@ -0,0 +1,2 @@
+one
+two
"""


# --- pure parts -------------------------------------------------------------------------------
def test_the_patch_index_lists_the_same_files_as_the_parser():
    patch = NEW_FILE + FIX
    indexed = diffview.index_patch(io.BytesIO(patch.encode()))
    parsed = diffview.split_files(patch)
    assert [(f.path, f.status, f.added, f.removed) for f in indexed] == [
        (f.path, f.status, f.added, f.removed) for f in parsed
    ]
    assert patch.encode()[indexed[1].start : indexed[1].start + indexed[1].size] == FIX.encode()


def test_a_clipped_file_diff_is_still_a_diff():
    body = "".join(f"+line {i}\n" for i in range(20))
    text = f"diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1,20 @@\n{body}"
    clipped, cut = diffview.clip_file_text(text, max_lines=10)
    assert cut and "@@ -0,0 +1,5 @@" in clipped
    rows = diffview.side_by_side(diffview.split_files(clipped)[0])
    assert [r.new_no for r in rows if r.kind == "change"] == [1, 2, 3, 4, 5]


def test_final_files_are_compared_without_the_base():
    diff = interdiff.final_diff("calc.py", FIX, OTHER_FIX)
    assert "-    return a + b\n+    # fixed\n+    return b + a" in diff
    assert interdiff.final_diff("calc.py", FIX, FIX) == ""
    # Only one attempt touched it: the other's final file is the base.
    assert "-    return a - b\n+    # fixed" in interdiff.final_diff("calc.py", None, OTHER_FIX)
    assert "+one\n+two" in interdiff.final_diff("notes.txt", None, NEW_FILE, absent="a")


# --- in the browser, with a worker ------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:  # module-scoped: its event loop ends with the module
        yield launched


@pytest.fixture
def page(browser, live_server, django_user_model):
    with signed_in_page(browser, live_server.url, django_user_model) as signed_in:
        yield signed_in


def weigh(page, url: str) -> int:
    response = page.goto(url)
    assert response.status == 200, url
    return len(response.body())


BIG_FILE = (
    "mkdir -p big && python3 -c \"f=open('big/data.txt','w'); "
    "[f.write('line %08d of a generated file nobody should read\\n' % i) for i in range(1000000)]\""
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_a_50_mb_file_does_not_hide_a_one_line_fix(page, live_server, worker, load_example):
    task = load_example("fix-add")
    attempt = attempt_create(
        task=task, agent="command", command=f"{BIG_FILE} && sed -i 's/a - b/a + b/' calc.py"
    )
    (attempt,) = wait_finished([attempt], timeout=240)
    assert attempt.outcome == "passed", attempt.failure_reason
    assert attempt.diff_bytes > 50_000_000 and attempt.diff_truncated

    url = f"{live_server.url}/attempts/{attempt.pk}/?view=changes"
    assert weigh(page, url) < PAGE_LIMIT
    files = page.locator("ol.filelist li")
    assert files.count() == 2
    assert "big/data.txt" in files.nth(0).inner_text() and "MB" in files.nth(0).inner_text()
    assert "calc.py" in files.nth(1).inner_text()
    # The fix itself is on the page, side by side.
    fix = page.locator("section.diff-file:has(h3:has-text('calc.py')) td.new.add")
    assert "return a + b" in fix.inner_text()
    # The big file loads on request: its first part, and the whole as a download.
    big = page.locator("section.diff-file:has(h3:has-text('big/data.txt'))")
    assert "Large file" in big.locator("summary").inner_text()
    with page.expect_response(lambda r: "/changes/0/" in r.url) as loaded:
        big.locator("summary").click()
    assert len(loaded.value.body()) < PAGE_LIMIT
    big.locator("table.sbs").wait_for()
    assert "line 00000000 of a generated file" in big.locator("table.sbs").inner_text()
    assert big.locator("a:has-text('Download this file')").count() == 1
    # No event of the timeline holds the diff.
    assert max(len(str(e.data)) for e in attempt.events.all()) < 100_000
    assert weigh(page, f"{live_server.url}/attempts/{attempt.pk}/") < PAGE_LIMIT


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(240)
def test_two_attempts_compare_file_by_file_test_by_test(page, live_server, worker, load_example):
    task = load_example("text-utils")
    full = attempt_create(task=task, agent="reference")
    partial = attempt_create(
        task=task,
        agent="command",
        command="""sed -i 's/"-", text)/"-", text.lower())/' textutils.py""",
    )
    full, partial = wait_finished([full, partial], timeout=180)
    assert full.outcome == "passed" and partial.outcome == "failed"

    page.goto(f"{live_server.url}/tasks/text-utils/compare/?a={full.number}&b={partial.number}")
    # Tests that pass in one and fail in the other come first, marked.
    differs = page.locator("#tests tr.differs")
    assert differs.count() == 2
    assert f"passes only in #{full.number}" in differs.first.inner_text()
    # The final files, one against the other, coloured and split.
    final = page.locator("#final .cmpfinal:has(h3:has-text('textutils.py'))")
    assert "text.split()" in " ".join(final.locator("td.old.del").all_inner_texts())
    assert 'text.split(" ")' in " ".join(final.locator("td.new.add").all_inner_texts())
    # Each attempt's own changes against the base, coloured.
    changes = page.locator("#changes .cmpfile:has(h3:has-text('textutils.py')) table.sbs")
    assert changes.count() == 2
    assert changes.locator("td.new.add mark").count() >= 1
    # Both command lists.
    assert "sed -i" in page.locator("#commands").inner_text()
    shot = ROOT / "test-results" / "screenshots" / "compare-split.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    shot = ROOT / "test-results" / "screenshots" / "compare-split.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_a_sandbox_removed_outside_boltz_shows_as_gone(page, live_server, worker, load_example):
    task = load_example("fix-add")
    (attempt,) = wait_finished([attempt_create(task=task, agent="noop")])
    assert attempt.sandbox_state == SandboxState.STOPPED
    for container in containers_of(attempt.pk):
        subprocess.run(["docker", "rm", "-f", container["id"]], check=True, capture_output=True)

    # The worker's Docker events listener marks it at once (the reaper, for one it missed).
    wait_until(
        lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.DELETED,
        timeout=20,
        what="the kept sandbox to be marked gone",
    )

    page.goto(f"{live_server.url}/attempts/{attempt.pk}/")
    header = page.locator("#attempt-header")
    assert "outside Boltz" in header.inner_text()
    assert header.locator("button:has-text('Re-check')").count() == 0
    assert "removed outside Boltz" in page.locator("#events").inner_text()


# An agent that fixes calc.py and makes it executable, renames a file without changing it, makes
# a link, writes a binary file, and leaves a long line of words ending in one long token.
TOKEN = "kept_whole_identifier"  # narrower than the column: never broken
EVERY_KIND = (
    "sed -i 's/a - b/a + b/' calc.py && chmod +x calc.py && mv README.md NOTES.md"
    " && ln -s calc.py main.py"
    " && python3 -c \"open('data.bin', 'wb').write(bytes(range(256)) * 8)\""
    " && python3 -c \"print('WORDS = ' + repr(' '.join('word%d' % i for i in range(60))"
    f" + ' {TOKEN} ' + 'Z' * 300))\" >> calc.py"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(240)
def test_modes_renames_links_and_binary_files_show_on_a_desktop_and_a_phone(
    page, browser, live_server, worker, load_example
):
    task = load_example("fix-add")
    attempt = attempt_create(task=task, agent="command", command=EVERY_KIND)
    (attempt,) = wait_finished([attempt], timeout=200)
    # The check ran on the recorded patch applied to the base: modes, links and binaries too.
    assert attempt.outcome == "passed", attempt.failure_reason

    url = f"{live_server.url}/attempts/{attempt.pk}/?view=changes"
    assert page.goto(url).status == 200

    def section(path: str):
        return page.locator(f"section.diff-file:has(h3 code:text-is('{path}'))")

    listed = {
        li.locator("a").inner_text(): li.inner_text() for li in page.locator("ol.filelist li").all()
    }
    assert set(listed) == {"calc.py", "NOTES.md", "main.py", "data.bin"}
    assert "modified" in listed["calc.py"] and "mode" in listed["calc.py"]
    assert "binary" in listed["data.bin"] and "+0" not in listed["data.bin"]
    assert "symlink" in listed["main.py"]
    calc = section("calc.py")
    assert "mode 100644 → 100755" in calc.locator("h3").inner_text()
    assert "return a + b" in calc.locator("td.new.add").first.inner_text()
    renamed = page.locator("section.diff-file:has(h3 code:text-is('README.md → NOTES.md'))")
    assert "renamed from README.md, content unchanged" in renamed.locator("h3").inner_text()
    assert renamed.locator("p.nolines").inner_text() == "File renamed without changes."
    assert "symlink → calc.py" in section("main.py").locator("h3").inner_text()
    assert "Binary file not shown (2.0 KB)" in section("data.bin").locator("h3").inner_text()
    assert section("data.bin").locator("table.sbs").count() == 0

    # On a 390 px phone: nothing wider than the screen, and long lines wrap at spaces.
    phone = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        phone.add_cookies(page.context.cookies())
        small = phone.new_page()
        assert small.goto(url).status == 200
        widths = small.evaluate(
            """() => ({
              viewport: window.innerWidth,
              page: document.documentElement.scrollWidth,
              widest: Math.max(...[...document.querySelectorAll(
                  'section.diff-file, table.sbs, table.sbs td, .filenote, h3 code')]
                .map(e => e.getBoundingClientRect().right)),
            })"""
        )
        assert widths["page"] <= widths["viewport"] == 390, widths
        assert widths["widest"] <= widths["viewport"], widths
        # The token after the words sits on one line: the wrap came at the space before it.
        lines_of_token = small.evaluate(
            """(token) => {
              const walker = document.createTreeWalker(document.querySelector('table.sbs'),
                                                       NodeFilter.SHOW_TEXT);
              while (walker.nextNode()) {
                const at = walker.currentNode.data.indexOf(token);
                if (at < 0) continue;
                const range = document.createRange();
                range.setStart(walker.currentNode, at);
                range.setEnd(walker.currentNode, at + token.length);
                return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
              }
              return 0;
            }""",
            TOKEN,
        )
        assert lines_of_token == 1
    finally:
        phone.close()
