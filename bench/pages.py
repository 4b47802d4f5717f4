"""Server time to render the review pages at size, against a raw baseline.

    .venv/bin/python bench/pages.py [--write docs/PERFORMANCE.md]

Pages: the attempt page with 5,000 events (timeline), a 10,000-event session
(tests/long_session.py: its first page, its last page, a search over every event; the page's
bytes and elements are printed too), the same attempt's changes with a 50,000-line diff across
500 files, and the task page of a task with 10,000 attempts. The raw
baseline reads the same rows and dumps them as JSON with no templates: the floor any page
showing them pays. Targets: under 300 ms each.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

from _setup import django_in_scratch, machine, timed

REPEAT = 9
TARGET_MS = 300


def build():
    from django.utils import timezone

    from attempts.models import Attempt, CheckResult, Event, Task, TestOutcome

    task = Task.objects.create(
        slug="big", instruction="x", repo_url="/r", base_commit="a" * 40, check_command="pytest"
    )
    now = timezone.now()
    Attempt.objects.bulk_create(
        Attempt(
            task=task,
            number=n,
            agent="noop" if n % 2 else "reference",
            status="finished",
            outcome="passed" if n % 3 else "failed",
            score=1.0 if n % 3 else 0.0,
            started_at=now - timedelta(seconds=n % 50 + 5),
            finished_at=now,
        )
        for n in range(1, 10_001)
    )
    for attempt in Attempt.objects.filter(number__gt=9_950):
        check = CheckResult.objects.create(
            attempt=attempt, passed=True, score=1.0, source="junit", tests_total=10, tests_passed=10
        )
        TestOutcome.objects.bulk_create(
            TestOutcome(check_result=check, name=f"t::test_{i}", outcome="passed")
            for i in range(10)
        )
    parts = []
    for f in range(500):
        parts.append(
            f"diff --git a/src/mod{f}.py b/src/mod{f}.py\nindex 1111111..2222222 100644\n"
            f"--- a/src/mod{f}.py\n+++ b/src/mod{f}.py\n@@ -1,50 +1,50 @@\n"
        )
        parts += [
            f"-    value_{i} = compute({i}, 'old')\n+    value_{i} = compute({i}, 'new')\n"
            for i in range(50)
        ]
    diff = "".join(parts)
    attempt = Attempt.objects.get(task=task, number=10_000)
    attempt.diff = diff
    attempt.save(update_fields=["diff"])
    events = []
    for seq in range(1, 5001):
        if seq % 10 == 0:
            events.append(
                Event(
                    attempt=attempt,
                    seq=seq,
                    kind="exec",
                    actor="agent",
                    data={
                        "phase": "end",
                        "command": f"pytest -q tests/test_{seq}.py",
                        "exit_code": 1,
                        "duration": 0.5,
                        "stdout": {
                            "head": "F.F\n" * 20,
                            "tail": "",
                            "bytes": 80,
                            "truncated": False,
                            "utf8": True,
                        },
                    },
                )
            )
        else:
            events.append(
                Event(
                    attempt=attempt,
                    seq=seq,
                    kind="output",
                    actor="agent",
                    data={"stream": "stdout", "text": f"line {seq} of output\n"},
                )
            )
    Event.objects.bulk_create(events)
    from tests.long_session import seed_long_session

    long = Attempt.objects.get(task=task, number=9_999)
    seed_long_session(long, 10_000, needle_at=2_500)
    return task, attempt, long, diff.count("\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", help="write the results as Markdown to this file")
    args = parser.parse_args()
    django_in_scratch("pages")
    from django.contrib.auth import get_user_model
    from django.test import Client

    from attempts.core.diffview import split_files
    from attempts.models import Attempt, Event

    task, attempt, long, diff_lines = build()
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("bench", "", "x"))

    def get(url):
        def fetch():
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return fetch

    def raw_events():
        json.dumps(
            list(
                Event.objects.filter(attempt=attempt)
                .order_by("seq")
                .values("seq", "time", "kind", "actor", "data")
            ),
            default=str,
        )

    def raw_window():
        json.dumps(
            list(
                Event.objects.filter(attempt=long, seq__lte=500)
                .order_by("seq")
                .values("seq", "time", "kind", "actor", "data")
            ),
            default=str,
        )

    def raw_diff():
        json.dumps(
            [
                (f.path, f.added, f.removed)
                for f in split_files(Attempt.objects.get(pk=attempt.pk).diff)
            ]
        )

    def raw_task():
        json.dumps(
            list(
                task.attempts.order_by("-number").values(
                    "number", "agent", "status", "outcome", "score", "started_at"
                )[:50]
            ),
            default=str,
        )

    cases = [
        ("attempt page, 5,000 events (timeline)", get(f"/attempts/{attempt.pk}/"), raw_events),
        ("10,000-event session, first page", get(f"/attempts/{long.pk}/"), raw_window),
        ("10,000-event session, last page", get(f"/attempts/{long.pk}/?page=last"), raw_window),
        (
            "10,000-event session, search over every event",
            get(f"/attempts/{long.pk}/?q=needle-zebra"),
            raw_window,
        ),
        (
            f"attempt page, {diff_lines:,}-line diff in 500 files (changes)",
            get(f"/attempts/{attempt.pk}/?view=changes"),
            raw_diff,
        ),
        ("task page, 10,000 attempts", get(f"/tasks/{task.slug}/"), raw_task),
        ("tasks page", get("/"), raw_task),
    ]
    weight = client.get(f"/attempts/{long.pk}/").content
    tags = weight.count(b"<") - weight.count(b"</")
    print(f"10,000-event session, first page: {len(weight):,} bytes, about {tags:,} elements")
    rows = []
    for name, page, raw in cases:
        page()  # warm caches (templates, lexers)
        page_t, raw_t = timed(page, REPEAT), timed(raw, REPEAT)
        ok = "yes" if page_t["median_ms"] < TARGET_MS else "NO"
        rows.append((name, page_t, raw_t, ok))
        print(
            f"{name}: {page_t['median_ms']:.0f} ms (raw {raw_t['median_ms']:.1f} ms, "
            f"x{page_t['median_ms'] / raw_t['median_ms']:.1f}) under {TARGET_MS} ms: {ok}"
        )
    if args.write:
        lines = [
            "| page | median | min | max | raw baseline | ratio | under 300 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
        ]
        for name, p, r, ok in rows:
            lines.append(
                f"| {name} | {p['median_ms']:.0f} ms | {p['min_ms']:.0f} ms | "
                f"{p['max_ms']:.0f} ms | {r['median_ms']:.1f} ms | "
                f"×{p['median_ms'] / r['median_ms']:.1f} | {ok} |"
            )
        write_section(
            args.write,
            "Page render times",
            "\n".join(lines)
            + "\n\n"
            + (
                f"`python bench/pages.py` on {machine()}: {REPEAT} requests each through Django's "
                "test client (the whole server side: middleware, session, queries, templates), "
                "SQLite. The raw baseline reads the same rows and dumps them as JSON with no "
                "templates."
            ),
        )


def write_section(path: str, title: str, body: str) -> None:
    """Replace (or add) one '## title' section of a Markdown file."""
    from pathlib import Path

    target = Path(path)
    text = target.read_text() if target.exists() else "# Performance\n"
    marker = f"## {title}\n"
    section = f"{marker}\n{body}\n"
    if marker in text:
        start = text.index(marker)
        end = text.find("\n## ", start + len(marker))
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    target.write_text(text)


if __name__ == "__main__":
    main()
