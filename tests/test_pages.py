"""The minimal pages: sign-in required, attempt data shown, agent text escaped."""

import pytest
from django.utils import timezone

from attempts.models import Attempt, Event
from tests.conftest import new_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt():
    task = new_task(instruction="do <b>it</b>")
    attempt = Attempt.objects.create(
        task=task,
        number=1,
        agent="command",
        status="finished",
        outcome="infra_error",
        failure_reason="start: image gone",
        diff="+<script>alert(1)</script>",
        started_at=timezone.now(),
    )
    Event.objects.create(
        attempt=attempt, seq=1, kind="output", data={"text": '"><img src=x onerror=alert(1)>'}
    )
    return attempt


def test_it_requires_sign_in(client, attempt):
    response = client.get(f"/attempts/{attempt.pk}/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


def test_attempt_page_shows_outcome_reason_and_escapes_agent_text(admin_client, attempt):
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "infrastructure error" in html and "start: image gone" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    changes = admin_client.get(f"/attempts/{attempt.pk}/?view=changes").content.decode()
    assert "could not be parsed" in changes  # shown as plain text, with a notice
    assert "<script>alert(1)</script>" not in changes
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in changes


def test_unknown_attempt_is_a_404(admin_client):
    assert admin_client.get("/attempts/999999/").status_code == 404


def test_task_pages_list_attempts(admin_client, attempt):
    listing = admin_client.get("/").content.decode()
    assert '<a href="/tasks/t/">t</a>' in listing
    assert "1 infrastructure error</span>" in listing  # one attempt, its one state
    html = admin_client.get("/tasks/t/").content.decode()
    assert f'href="/attempts/{attempt.pk}/"' in html
    assert "do &lt;b&gt;it&lt;/b&gt;" in html
