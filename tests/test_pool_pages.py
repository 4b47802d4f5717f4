"""The pools dashboard through Django's test client: each pool's numbers, each environment
linked to its episodes' attempt pages, pools kept to their owners, API text escaped."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from attempts.models import Attempt, CheckResult, Event, Pool
from tests.conftest import new_task

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

numbers = itertools.count(1)


def make_pool(owner, *, tasks=("t",), **fields) -> Pool:
    values = {"max_steps": 50, "episode_seconds": 600.0, **fields}
    return Pool.objects.create(owner=owner, tasks=list(tasks), size=len(tasks), **values)


def make_episode(pool, index, *, task=None, end="", steps=0, reward=None) -> Attempt:
    episode = Attempt.objects.create(
        task=task or new_task_once("t"),
        number=next(numbers),
        agent="pool",
        origin="api",
        status="running" if not end else "finished",
        pool=pool,
        pool_index=index,
        episode_steps=steps,
        episode_end=end,
    )
    if reward is not None:
        CheckResult.objects.create(attempt=episode, passed=reward > 0, score=reward, source="junit")
    return episode


def new_task_once(slug):
    from attempts.models import Task

    return Task.objects.filter(slug=slug).first() or new_task(slug)


def row(html: str, row_id: str) -> str:
    start = html.index(f'<tr id="{row_id}">')
    return html[start : html.index("</tr>", start)]


@pytest.fixture
def viewer(django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="view_attempt"))
    return user


def test_it_requires_sign_in(client, admin_user):
    pool = make_pool(admin_user)
    for url in ("/pools/", f"/pools/{pool.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


def test_it_requires_the_view_permission(client, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="pw")
    pool = make_pool(user)
    client.force_login(user)
    assert client.get("/pools/").status_code == 403
    assert client.get(f"/pools/{pool.pk}/").status_code == 403


def test_the_nav_links_to_the_pools(admin_client):
    assert '<a href="/pools/">Pools</a>' in admin_client.get("/").content.decode()


def test_the_list_shows_size_steps_mean_reward_and_masked(admin_client, admin_user):
    older = make_pool(admin_user, name="first", tasks=["a", "b", "c"])
    pool = make_pool(
        admin_user, name="grpo", tasks=["t"] * 4, steps=37, masked=2, rewards=3, reward_sum=2.0
    )
    html = admin_client.get("/pools/").content.decode()
    assert html.index(f'id="pool-{pool.pk}"') < html.index(f'id="pool-{older.pk}"')  # newest first
    cells = row(html, f"pool-{pool.pk}")
    assert f'href="/pools/{pool.pk}/"' in cells and "grpo" in cells
    assert "<code>t</code> ×4" in cells
    assert '<td class="num">4</td>' in cells  # size
    assert '<td class="num">37</td>' in cells  # steps taken
    assert "0.67" in cells  # mean reward: 2.0 over 3 rewards
    assert '<td class="num">2</td>' in cells  # masked
    assert "open" in cells
    first = row(html, f"pool-{older.pk}")
    assert "3 tasks" in first and '<td class="num">–</td>' in first  # no reward yet


def test_the_list_is_paginated(admin_client, admin_user):
    for i in range(51):
        make_pool(admin_user, name=f"p{i}")
    html = admin_client.get("/pools/").content.decode()
    assert "page 1 of 2 (51 pools)" in html and 'href="?page=2"' in html
    assert admin_client.get("/pools/?page=2").content.decode().count('<tr id="pool-') == 1


def test_the_detail_links_each_environment_to_its_episodes(admin_client, admin_user):
    pool = make_pool(admin_user, tasks=["t", "t", "t"], steps=9, masked=1, rewards=1, reward_sum=1)
    earlier = make_episode(pool, 0, end="reset", steps=4)
    done = make_episode(pool, 0, end="terminated", steps=3, reward=1.0)
    live = make_episode(pool, 1, steps=2)
    Event.objects.create(
        attempt=live,
        seq=1,
        kind="exec",
        data={"command": "pytest -x", "phase": "start", "timeout": 60},
    )

    html = admin_client.get(f"/pools/{pool.pk}/").content.decode()
    env0 = row(html, "env-0")
    assert f'<a href="/attempts/{done.pk}/">t #{done.number}</a>' in env0  # its name, not its id
    assert f'href="/attempts/{earlier.pk}/"' in env0 and "reset before it ended" in env0
    assert "terminated" in env0 and "1.00" in env0  # its reward: the check's score, two decimals
    env1 = row(html, "env-1")
    assert f'<a href="/attempts/{live.pk}/">t #{live.number}</a>' in env1
    assert "live" in env1 and "2 <span" in env1  # steps in the current episode
    assert "not reset yet" in row(html, "env-2")
    assert '<dd id="pool-steps">9</dd>' in html and '<dd id="pool-masked">1 ' in html
    # the group's rewards: one of three environments submitted
    assert '<td class="num">3</td>' in html and "0.00" in html
    # the episode's own page shows its steps
    page = admin_client.get(f"/attempts/{live.pk}/").content.decode()
    assert "pytest -x" in page


def test_an_open_pool_polls_and_a_closed_one_does_not(admin_client, admin_user):
    from django.utils import timezone

    pool = make_pool(admin_user)
    html = admin_client.get(f"/pools/{pool.pk}/").content.decode()
    assert f'hx-get="/pools/{pool.pk}/" hx-select="#pool-live"' in html
    Pool.objects.filter(pk=pool.pk).update(closed_at=timezone.now())
    html = admin_client.get(f"/pools/{pool.pk}/").content.decode()
    assert "hx-get" not in html and 'data-live="no"' in html and "closed" in html


def test_earlier_episodes_are_bounded_and_counted(admin_client, admin_user):
    pool = make_pool(admin_user)
    episodes = [make_episode(pool, 0, end="reset") for _ in range(14)]
    env0 = row(admin_client.get(f"/pools/{pool.pk}/").content.decode(), "env-0")
    assert f'href="/attempts/{episodes[-1].pk}/">t #{episodes[-1].number}</a>' in env0
    assert "13:" in env0 and "and 3 older" in env0
    assert f'href="/attempts/{episodes[-2].pk}/"' in env0
    assert f'href="/attempts/{episodes[0].pk}/"' not in env0


def test_the_detail_queries_do_not_grow_with_the_pool(admin_client, admin_user, no_lost_host_sweep):
    def queries(size: int) -> int:
        pool = make_pool(admin_user, tasks=["t"] * size)
        for i in range(size):
            make_episode(pool, i, end="reset")
            make_episode(pool, i, end="terminated", reward=0.5)
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(f"/pools/{pool.pk}/").status_code == 200
        return len(captured)

    assert queries(2) == queries(12)


def test_another_users_pool_is_a_404_for_a_user(client, viewer, django_user_model):
    other = django_user_model.objects.create_user("other", password="pw")
    theirs = make_pool(other, name="theirs")
    mine = make_pool(viewer, name="mine")
    client.force_login(viewer)
    assert client.get(f"/pools/{theirs.pk}/").status_code == 404
    assert client.get(f"/pools/{mine.pk}/").status_code == 200
    html = client.get("/pools/").content.decode()
    assert f'id="pool-{mine.pk}"' in html and f'id="pool-{theirs.pk}"' not in html
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(f"/pools/{theirs.pk}/").status_code == 200
    html = client.get("/pools/").content.decode()
    assert f'id="pool-{mine.pk}"' in html and f'id="pool-{theirs.pk}"' in html


def test_unknown_pool_is_a_404(admin_client):
    assert admin_client.get("/pools/999999/").status_code == 404


def test_html_in_a_pool_name_labels_and_tasks_is_escaped(admin_client, admin_user):
    pool = make_pool(
        admin_user,
        name="<script>alert(1)</script>",
        labels={"<b>run</b>": '"><img src=x onerror=alert(1)>', "items": "kept"},
        agent="<i>policy</i>",
        tasks=["<u>slug</u>", "t"],
    )
    for url in ("/pools/", f"/pools/{pool.pk}/"):
        html = admin_client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<img src=x" not in html and "<b>run</b>" not in html
        assert "&lt;b&gt;run&lt;/b&gt;=&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
        assert "items=kept" in html  # a label named like a dict method is still a label
    html = admin_client.get(f"/pools/{pool.pk}/").content.decode()
    assert "<u>slug</u>" not in html and "<code>&lt;u&gt;slug&lt;/u&gt;</code>" in html
    assert "<i>policy</i>" not in html and "&lt;i&gt;policy&lt;/i&gt;" in html
