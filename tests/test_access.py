"""The access matrix: every page, admin page and API route against every role, as the tables of
docs/ACCESS.md say. The tables are the source of truth: a route the URL resolver or the OpenAPI
document has and the tables lack fails here, and so does any answer other than the documented
one. A refused request changes nothing; a POST without its CSRF token is refused, by everyone.

The objects are rows made directly (no container): user "owner" has a closed API sandbox, a
second attempt, a closed pool and an evaluation; user "other" has one of each of their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone

from attempts.api.routes import api
from attempts.api.tokens import token_create
from attempts.models import (
    Agent,
    ApiToken,
    Attempt,
    AuditEntry,
    CheckResult,
    Evaluation,
    Event,
    Pool,
    Task,
)
from attempts.services.predictions import build_report, evaluation_facts
from attempts.web import signin
from tests.conftest import new_task

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parent.parent / "docs" / "ACCESS.md"
ROLES = ("anonymous", "nobody", "other", "owner", "staff")
SECTIONS = ("pages", "admin", "api")
HEADINGS = ("anonymous", "no permission", "other owner", "owner", "staff")
PATCH = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
)


# --- the tables -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    section: str
    method: str
    path: str
    cells: dict[str, str]
    ok: int

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def read_tables() -> list[Row]:
    """The rows of each `<!-- access:NAME -->` table: `| METHOD path | one cell per role | ok |`."""
    text = DOC.read_text()
    rows = []
    for section in SECTIONS:
        found = re.search(rf"<!-- access:{section} -->\n(.*?)<!-- /access -->", text, re.S)
        assert found, f"docs/ACCESS.md has no <!-- access:{section} --> table"
        lines = [line for line in found.group(1).splitlines() if line.startswith("|")]
        heading = [c.strip() for c in lines[0].strip().strip("|").split("|")]
        assert tuple(heading[1:-1]) == HEADINGS, f"the {section} table's roles: {HEADINGS}"
        for line in lines[2:]:
            cells = [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]
            request, *by_role, ok = cells
            method, _, path = request.partition(" ")
            assert len(by_role) == len(ROLES), f"{line}: one cell per role of {ROLES}"
            status = re.match(r"`?(\d{3})", ok)
            if status is None:  # "—": nobody gets through
                assert "ok" not in by_role, f"{line}: an ok cell needs the status of success"
            by = dict(zip(ROLES, by_role, strict=True))
            rows.append(Row(section, method, path, by, int(status[1]) if status else 0))
    return rows


ROWS = read_tables()


def _patterns(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _patterns(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern).lstrip("^")  # as a match names its route


# --- the world: users, their objects, and a way to fill a row's path ----------------------------
@dataclass
class World:
    users: dict
    tokens: dict
    values: dict
    output: str

    def path(self, row: Row) -> str:
        return row.path.format(**self.values)


@pytest.fixture
def world(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    users = {
        "nobody": django_user_model.objects.create_user("nobody"),
        "other": django_user_model.objects.create_user("other"),
        "owner": django_user_model.objects.create_user("owner"),
        "staff": django_user_model.objects.create_user("staff", is_staff=True),
    }
    users["other"].user_permissions.add(Permission.objects.get(codename="view_attempt"))
    tokens = {role: token_create(user=user, name=role)[1] for role, user in users.items()}
    task = new_task("t")
    now = timezone.now()

    def sandbox(owner, number, **fields):
        return Attempt.objects.create(
            task=task,
            number=number,
            agent="api",
            origin="api",
            owner=owner,
            status="finished",
            outcome="passed",
            score=1.0,
            sandbox_state="kept",
            diff=PATCH,
            started_at=now,
            finished_at=now,
            **fields,
        )

    mine = sandbox(users["owner"], 1)
    second = Attempt.objects.create(
        task=task, number=2, agent="noop", owner=users["owner"], status="finished", outcome="failed"
    )
    theirs = sandbox(users["other"], 3)
    Task.objects.filter(pk=task.pk).update(next_attempt_number=10)
    Event.objects.create(attempt=mine, seq=1, kind="message", data={"text": "hello"})
    CheckResult.objects.create(attempt=mine, passed=True, score=1.0, source="exit_code")
    output = f"attempts/{mine.pk}/outputs/1-stdout.txt"
    default_storage.save(output, ContentFile(b"hello\n"))
    default_storage.save(f"attempts/{second.pk}/outputs/1-stdout.txt", ContentFile(b"hi\n"))
    pools = {}
    for role, number in (("owner", 4), ("other", 5)):
        pool = Pool.objects.create(
            owner=users[role],
            name=f"pool-{role}",
            tasks=["t"],
            size=1,
            max_steps=3,
            episode_seconds=60,
            closed_at=now,
        )
        sandbox(users[role], number, pool=pool, pool_index=0)
        pools[role] = pool
    runs = {}
    for role in ("owner", "other"):
        run = Evaluation.objects.create(run_id=f"run-{role}", owner=users[role], source="api")
        run.report = build_report(evaluation_facts(run), [])  # no predictions: finished
        run.state, run.finished_at = Evaluation.State.FINISHED, now
        run.save()
        runs[role] = run
    Agent.objects.create(name="saved", command="true")
    AuditEntry.objects.create(
        action="export_attempt", actor="staff", task_slug="t", attempt_id=mine.pk, attempt_number=1
    )
    group = Group.objects.create(name="reviewers")
    values = {
        "task": task.slug,
        "slug": task.slug,
        "attempt": mine.pk,
        "sandbox_id": mine.pk,
        "attempt_id": second.pk,
        "pool": pools["owner"].pk,
        "pool_id": pools["owner"].pk,
        "index": 0,
        "run": runs["owner"].pk,
        "evaluation_id": runs["owner"].pk,
        "output": output.rsplit("/", 1)[-1],
        "name": "1-stdout.txt",
        "task_pk": task.pk,
        "agent_pk": Agent.objects.get().pk,
        "audit_pk": AuditEntry.objects.get().pk,
        "token_pk": ApiToken.objects.get(user=users["owner"]).pk,
        "owner_pk": users["owner"].pk,
        "staff_pk": users["staff"].pk,
        "group_pk": group.pk,
        "attempt_ct": ContentType.objects.get_for_model(Attempt).pk,
        "theirs": theirs.pk,
    }
    yield World(users, tokens, values, output)
    default_storage.delete(output)
    for form in ("/login/", "/admin/login/"):  # the sign-in counts its wrong passwords made
        signin.reset("127.0.0.1", FORM_POSTS[form]["username"])


# What each request sends: the query and body a route needs to get past its own validation,
# so that what is left to decide is who may.
API_REQUESTS = {
    ("POST", "/api/tasks/{slug}/attempts"): ("", {"agent": "noop"}),
    ("POST", "/api/attempts/wait"): ("", {"ids": ["{attempt_id}"], "timeout": 1}),
    ("POST", "/api/sandboxes"): ("", {"task": "t", "wait": 0}),
    ("POST", "/api/sandboxes/{sandbox_id}/exec"): ("", {"command": "true"}),
    ("GET", "/api/sandboxes/{sandbox_id}/files"): ("path=calc.py", None),
    ("PUT", "/api/sandboxes/{sandbox_id}/files"): ("path=calc.py", b"x = 3\n"),
    ("DELETE", "/api/sandboxes/{sandbox_id}/files"): ("path=calc.py", None),
    ("PUT", "/api/sandboxes/{sandbox_id}/archive"): ("", b"\0" * 1024),
    ("POST", "/api/sandboxes/{sandbox_id}/messages"): ("", {"content": "hi"}),
    ("POST", "/api/sandboxes/{sandbox_id}/close"): ("", {}),
    ("POST", "/api/pools"): ("", {"tasks": ["t"], "wait": 0}),
    ("POST", "/api/pools/{pool_id}/reset"): ("", {}),
    ("POST", "/api/pools/{pool_id}/step"): ("", {"actions": [{"run": "true"}]}),
    ("POST", "/api/pools/{pool_id}/envs/{index}/step"): ("", {"action": {"run": "true"}}),
    ("POST", "/api/evaluations"): ("", {"predictions": [], "dataset": []}),
}
FORM_POSTS = {
    "/login/": {"username": "not-a-user", "password": "wrong"},
    "/admin/login/": {"username": "not-a-user", "password": "wrong"},
    "/tasks/{task}/start/": {"agent": "noop", "count": "1", "confirm": "yes"},
    "/admin/attempts/attempt/{attempt}/delete/": {"post": "yes"},
    "/admin/attempts/task/{task_pk}/delete/": {"post": "yes"},
    "/admin/attempts/apitoken/add/": {"user": "{staff_pk}", "name": "mine"},
    "/admin/auth/user/{staff_pk}/change/": {
        "username": "staff",
        "is_active": "on",
        "is_staff": "on",
        "is_superuser": "on",
        "date_joined_0": "2025-01-01",
        "date_joined_1": "00:00:00",
    },
}


def _filled(value, values: dict):
    if isinstance(value, str):
        return value.format(**values) if "{" in value else value
    if isinstance(value, list):
        return [_filled(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _filled(v, values) for k, v in value.items()}
    return value


def _ids(value, values):
    """`"{attempt_id}"` inside a JSON body becomes the number it names."""
    filled = _filled(value, values)
    if isinstance(filled, dict) and "ids" in filled:
        filled["ids"] = [int(i) for i in filled["ids"]]
    return filled


def client_for(world: World, role: str, *, session: bool) -> Client:
    client = Client(enforce_csrf_checks=True)
    if session and role != "anonymous":
        client.force_login(world.users[role])
    return client


def send(world: World, row: Row, role: str, *, csrf: bool = True):
    """The row's request as `role`: the API with the role's token, pages with its session."""
    path = world.path(row)
    if row.section == "api":
        query, body = API_REQUESTS.get((row.method, row.path), ("", None))
        client = client_for(world, role, session=False)
        headers = {}
        if role != "anonymous":
            headers["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[role]}"
        url = path + ("?" + query if query else "")
        if isinstance(body, bytes):
            return client.generic(
                row.method, url, body, content_type="application/octet-stream", **headers
            )
        if body is None:
            return client.generic(row.method, url, **headers)
        return client.generic(
            row.method,
            url,
            json.dumps(_ids(body, world.values)),
            content_type="application/json",
            **headers,
        )
    client = client_for(world, role, session=True)
    if row.method == "GET":
        return client.get(path)
    data = _filled(FORM_POSTS.get(row.path, {"confirm": "yes"}), world.values)
    if csrf:
        client.get("/login/")  # sets the CSRF cookie, as any page with a form does
        data = {**data, "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    return client.post(path, data)


def snapshot(world: World) -> dict:
    """What a refused request must leave as it was: every row a request could change, and the
    stored output."""
    tables = (Task, Attempt, Event, CheckResult, Pool, Evaluation, AuditEntry, Agent, Group)
    state = {m.__name__: list(m.objects.order_by("pk").values()) for m in tables}
    state["tokens"] = list(ApiToken.objects.order_by("pk").values("pk", "user", "revoked_at"))
    state["users"] = list(
        world.users["staff"]
        ._meta.model.objects.order_by("pk")
        .values("pk", "username", "is_staff", "is_superuser", "is_active")
    )
    state["output"] = default_storage.exists(world.output)
    return state


def answer_matches(response, cell: str, row: Row) -> bool:
    """`ok` (the row's status of success), `login` and `admin login` (a redirect to that sign-in
    page, coming back after it), `302 → /path` (a redirect there), or a status alone."""
    status = response.status_code
    if cell == "ok":
        return status == row.ok
    if cell in ("login", "admin login"):
        where = "/login/" if cell == "login" else "/admin/login/"
        return status == 302 and response["Location"].startswith(f"{where}?next=")
    code, _, where = cell.partition(" → ")
    return str(status) == code and response.get("Location", "").startswith(where)


def _show(response) -> str:
    where = response.get("Location", "")
    body = b"" if response.streaming else response.content[:160]
    return f"{response.status_code} {where} {body!r}"


def each_role(world: World, check) -> list[str]:
    """`check(role)` for every role, each undone afterwards (a savepoint rolled back), so one
    role's delete does not decide the next one's answer. What went wrong, as sentences."""
    wrong = []
    for role in ROLES:
        with transaction.atomic():
            wrong += check(role)
            transaction.set_rollback(True)
    return wrong


# API routes a browser's session may read too (docs/ACCESS.md): the raw output the attempt's
# page links to. Read-only, and never readable by another site (no CORS).
SESSION_READABLE = {"GET /api/attempts/{attempt_id}/outputs/{name}"}


# --- the tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_role_gets_the_documented_answer(world, row):
    """The row's request as each role, with its CSRF token. A refusal changes nothing. A POST
    without its CSRF token is refused (403) for every role and changes nothing. An API call
    with a signed-in session and no token (even staff's) is 401: the API reads tokens only, so
    no other site can make a signed-in browser call it."""

    def check(role: str) -> list[str]:
        cell = row.cells[role]
        wrong = []
        if row.section != "api" and row.method == "POST":
            before = snapshot(world)
            response = send(world, row, role, csrf=False)
            if response.status_code != 403 or snapshot(world) != before:
                wrong.append(f"as {role} without CSRF: {_show(response)}, or it changed something")
        if (
            row.section == "api"
            and role == "staff"
            and row.cells["anonymous"] == "401"
            and str(row) not in SESSION_READABLE
        ):
            response = client_for(world, role, session=True).generic(row.method, world.path(row))
            if response.status_code != 401:
                wrong.append(f"with staff's session and no token: {_show(response)}")
        before = None if cell == "ok" else snapshot(world)
        response = send(world, row, role)
        if not answer_matches(response, cell, row):
            said = f"{cell} ({row.ok})" if cell == "ok" else cell
            wrong.append(f"as {role}: docs/ACCESS.md says {said}, got {_show(response)}")
        elif before is not None and snapshot(world) != before:
            wrong.append(f"as {role}: not allowed ({cell}) but something changed")
        return wrong

    wrong = each_role(world, check)
    assert not wrong, f"{row}:\n" + "\n".join(wrong)


API_ROWS = [r for r in ROWS if r.section == "api"]


def test_lists_hold_only_the_callers_own(world):
    owner_sandbox = world.values["sandbox_id"]
    for role, sees_it in (("nobody", False), ("other", False), ("owner", True), ("staff", True)):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {world.tokens[role]}"}
        client = Client()
        sandboxes = {s["id"] for s in client.get("/api/sandboxes", **headers).json()}
        pools = {p["id"] for p in client.get("/api/pools", **headers).json()}
        assert (owner_sandbox in sandboxes) == sees_it, role
        assert (world.values["pool_id"] in pools) == sees_it, role
        if role == "nobody":
            assert sandboxes == set() and pools == set()
        if role == "other":
            mine = set(
                Attempt.objects.filter(owner=world.users["other"]).values_list("pk", flat=True)
            )
            assert world.values["theirs"] in sandboxes and sandboxes <= mine


def test_every_route_is_in_the_tables(figure):
    """A route added without a row in docs/ACCESS.md fails here: every URL pattern is reached by
    some row, and every operation of the OpenAPI document has its row."""
    reached = set()
    for row in ROWS:
        path = row.path.split("?", 1)[0]
        path = re.sub(r"\{[a-z_]+\}", "1", path)
        reached.add(resolve(path).route)
    patterns = set(_patterns(get_resolver().url_patterns))
    missing = sorted(p for p in patterns if p not in reached)
    assert not missing, f"routes without a row in docs/ACCESS.md: {missing}"
    operations = {
        (method.upper(), path)
        for path, ops in api.get_openapi_schema()["paths"].items()
        for method in ops
    }
    documented = {(r.method, r.path) for r in API_ROWS}
    assert operations - documented == set(), "API operations without a row in docs/ACCESS.md"
    assert documented - operations == set(), "rows of docs/ACCESS.md the API does not have"
    figure(
        f"{len(ROWS)} rows of docs/ACCESS.md ({len(patterns)} URL patterns, {len(operations)} "
        f"API operations, none missing), each for {len(ROLES)} roles: {len(ROWS) * len(ROLES)} answers"
    )
