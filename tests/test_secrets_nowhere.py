"""A planted secret is shown nowhere: a saved agent's secret environment value and a task's secret
setting, which the agent prints, writes into files' contents and names (a folder's too, a link's
target, a binary file, a long file, a commit message and author), are on no page, in no API
answer and in no export.

Real worker, real Docker, the served web process. What is fetched comes from what Boltz serves,
not from a list kept here: the pages from the URL patterns (the dashboard's, and the admin's for
every registered model and every row), the API answers from the OpenAPI document (every GET,
while the sandbox is live and once all has ended), the task exports from the export registry
(datasets.CHOICES), the attempt views from views.VIEWS. A new page, route or format is fetched
and grepped, or this test fails until it is given values (or a reason to leave it out).
Every zip is unpacked, every tar.gz inside it unpacked, every parquet read, and each member's
name and bytes grepped.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import re
import secrets
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import serializers
from django.core.management import call_command
from django.urls import URLResolver, get_resolver, reverse

from attempts.api.tokens import token_create
from attempts.exports.datasets import CHOICES, ExportSpec
from attempts.models import (
    Agent,
    Attempt,
    AuditEntry,
    CheckResult,
    Evaluation,
    Event,
    EventKind,
    Pool,
    Task,
    TestOutcome,
)
from attempts.web import patches
from attempts.web.actions import DELETE_LEVELS
from attempts.web.views import VIEWS
from tests.conftest import wait_finished

SECRET = f"tok-{secrets.token_hex(10)}"
LEAKY = r"""
set -e
printf 'API_KEY = "%s"\n' "$SECRET_TOKEN" > leak.py
printf 'task key: %s\n' "$TASK_KEY" > task-leak.txt
echo x > "name-$SECRET_TOKEN.txt"
echo x > "task-$TASK_KEY.txt"
mkdir -p "dir-$SECRET_TOKEN" && echo y > "dir-$SECRET_TOKEN/inner.txt"
printf '\000\001\377%s\000\376' "$SECRET_TOKEN" > blob.bin
ln -s "target-$SECRET_TOKEN" link-in
{ seq 1 20000; echo "$SECRET_TOKEN"; seq 20001 40000; } > big.txt
echo "# $SECRET_TOKEN" >> README.md
if [ "$LEAK_MODE" = fix ]; then
  sed -i 's/a - b/a + b/' calc.py
else
  printf 'def add(a, b):\n    return "%s"\n\n\ndef multiply(a, b):\n    return a * b\n\n\ndef one():\n    return 1\n' "$SECRET_TOKEN" > calc.py
fi
git add -A
git -c user.name="$SECRET_TOKEN" -c user.email=leak@example.com commit -qm "leak $SECRET_TOKEN"
echo "$SECRET_TOKEN"; echo "$TASK_KEY" >&2
"""
# Pages fetched but not for their content: they would end the test's session.
SIGN_OUT = {"attempts:logout", "admin:logout"}
# Patterns not fetched, with why.
LEFT_OUT = {
    "admin:view_on_site": "a redirect to the object's page (which is fetched)",
    "admin:<catch-all>": "the admin's catch-all for unknown URLs",
    "admin:<object-redirect>": "redirects to the object's change page (which is fetched)",
}
# API operations not called, with why: what they answer is what the request gave, or nothing.
NOT_CALLED = {
    "DELETE /api/sandboxes/{sandbox_id}": "answers 204, no body",
    "PUT /api/sandboxes/{sandbox_id}/files": "answers the path and byte count it was given",
    "DELETE /api/sandboxes/{sandbox_id}/files": "answers 204, no body",
    "PUT /api/sandboxes/{sandbox_id}/archive": "answers the folder and file count",
    "POST /api/sandboxes/{sandbox_id}/messages": "answers 201, no body",
    "POST /api/evaluations": "SWE-bench predictions: patch agents, no saved agent's environment",
}


class Grep:
    """Everything fetched, each with its name, grepped for the secrets."""

    def __init__(self, values: list[str]):
        self.values = [v.encode() for v in values]
        self.seen: dict[str, list[str]] = {"page": [], "api": [], "export": [], "kept": []}
        self.found: list[str] = []
        self.statuses: dict[str, int] = {}

    def bytes(self, what: str, data: bytes) -> None:
        for value in self.values:
            if value in data:
                self.found.append(f"{what}: {value.decode()!r}")
        if data[:4] == b"PK\x03\x04":
            self.zip(what, data)
        elif data[:2] == b"\x1f\x8b":
            self.gzip(what, data)
        elif data[:4] == b"PAR1":
            self.parquet(what, data)

    def zip(self, what: str, data: bytes) -> None:
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            for info in bundle.infolist():
                self.bytes(f"{what} » {info.filename} (name)", info.filename.encode())
                self.bytes(f"{what} » {info.filename}", bundle.read(info))

    def gzip(self, what: str, data: bytes) -> None:
        unpacked = gzip.decompress(data)
        if not tarfile.is_tarfile(io.BytesIO(unpacked)):
            self.bytes(f"{what} (gunzipped)", unpacked)
            return
        with tarfile.open(fileobj=io.BytesIO(unpacked)) as tar:
            for member in tar:
                self.bytes(f"{what} » {member.name} (name)", member.name.encode())
                self.bytes(f"{what} » {member.name} (link)", member.linkname.encode())
                if member.isfile():
                    self.bytes(f"{what} » {member.name}", tar.extractfile(member).read())

    def parquet(self, what: str, data: bytes) -> None:
        import pyarrow.parquet as pq

        rows = pq.read_table(io.BytesIO(data)).to_pylist()
        self.bytes(f"{what} (rows)", json.dumps(rows, default=str).encode())

    def fetch(self, http: httpx.Client, url: str, *, kind: str = "page", **kwargs):
        response = http.request(kwargs.pop("method", "GET"), url, **kwargs)
        self.seen[kind].append(url)
        self.statuses[url] = response.status_code
        assert response.status_code < 500, f"{url}: {response.status_code}"
        self.bytes(url, response.content)
        for name, value in response.headers.items():
            self.bytes(f"{url} (header {name})", value.encode())
        return response


def _signed_in(base: str, username: str, password: str) -> httpx.Client:
    http = httpx.Client(base_url=base, timeout=120)
    form = http.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    done = http.post(
        "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
    )
    assert done.status_code == 302, done.text[-1000:]
    return http


# --- what Boltz serves ------------------------------------------------------------------------------
def _patterns():
    """(route, namespace, name) of every URL pattern, the API's aside (the OpenAPI walk)."""

    def walk(patterns, prefix, namespace):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern), p.namespace or namespace)
            else:
                yield prefix + str(p.pattern), namespace, p.name

    for route, namespace, name in walk(get_resolver().url_patterns, "", ""):
        if not route.startswith("api/"):
            yield route, namespace, name


def _admin_model(name: str):
    """The model of an admin URL name (`attempts_attempt_change`), or None."""
    from django.apps import apps
    from django.contrib import admin

    for model in admin.site._registry:
        if name.startswith(f"{model._meta.app_label}_{model._meta.model_name}_"):
            return model
    return apps.get_model("auth", "user") if name == "auth_user_password_change" else None


def _page_urls(world: dict) -> list[tuple[str, bool]]:
    """(url, is_export) of every page of every pattern, filled with every value there is."""
    urls, unfilled = [], []
    for route, namespace, name in _patterns():
        key = f"{namespace}:{name}" if namespace else name
        if name is None:
            key = (
                f"{namespace}:<catch-all>"
                if "(?P<url>" in route
                else f"{namespace}:<object-redirect>"
            )
        if key in LEFT_OUT:
            continue
        params = re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route)
        params = [a or b for a, b in params]
        fillings = _fillings(route, namespace, name, params, world)
        if fillings is None:
            unfilled.append(f"{key} ({route})")
            continue
        for kwargs in fillings:
            path = reverse(key, kwargs=kwargs)
            for query in _queries(key, kwargs, world):
                urls.append((path + query, key in EXPORTS))
    assert not unfilled, f"patterns this test cannot fill yet: {unfilled}"
    return urls


EXPORTS = {"attempts:attempt-export", "attempts:task-export", "attempts:run-report"}


def _fillings(route, namespace, name, params, world) -> list[dict] | None:
    if not params:
        return [{}]
    if namespace == "admin":
        if params == ["app_label"]:
            return [{"app_label": label} for label in ("auth", "attempts")]
        model = _admin_model(name)
        if model is None or len(params) != 1:
            return None
        return [{params[0]: str(pk)} for pk in model.objects.values_list("pk", flat=True)]
    by_prefix = {"attempts/": world["attempts"], "pools/": world["pools"], "runs/": world["runs"]}
    if params == ["slug"]:
        return [{"slug": slug} for slug in world["slugs"]]
    ids = next((v for p, v in by_prefix.items() if route.startswith(p)), None)
    if params == ["pk"] and ids is not None:
        return [{"pk": pk} for pk in ids]
    if params == ["pk", "index"]:
        return [{"pk": pk, "index": i} for pk in ids for i in range(world["files"][pk])]
    if params == ["pk", "name"]:
        return [{"pk": pk, "name": n} for pk in ids for n in world["outputs"][pk]]
    if params == ["pk", "level"]:
        return [{"pk": pk, "level": level} for pk in ids for level in DELETE_LEVELS]
    return None


def _queries(key: str, kwargs: dict, world: dict) -> list[str]:
    if key == "attempts:attempt":
        return [f"?view={view}" for view in VIEWS]
    if key == "attempts:timeline":
        return ["?after=0"]
    if key == "attempts:diff-file":
        return ["", "?raw=1"]
    if key == "attempts:leaderboard":
        return ["", "?format=csv"]
    if key == "attempts:task-export":
        queries = []
        for choice, _label in CHOICES:
            fmt, flavour = choice.split(":")
            query = f"?format={fmt}&flavour={flavour}&include_all=1&include_oracles=1"
            queries.append(query)
            if ExportSpec.parse(fmt, flavour).has_meta:
                queries.append(query + "&part=meta")
        return queries
    if key == "attempts:compare":
        numbers = world["numbers"][kwargs["slug"]]
        pairs = [f"?a={a}&b={b}" for a, b in itertools.combinations(numbers, 2)]
        first = world["paths"].get(kwargs["slug"], [])
        return pairs + [f"{pairs[0]}&file={path}" for path in first if pairs]
    if key == "attempts:runs-compare":
        return [f"?a={run}&b={run}" for run in world["run_ids"]]
    return [""]


def _world() -> dict:
    """The values every parameter of every page takes: every row there is."""
    attempts = list(Attempt.objects.order_by("pk"))
    files = {a.pk: (len(patches.patch_files(a)) if a.diff else 0) for a in attempts}
    outputs = {
        a.pk: sorted(
            {
                Path(e.data[s]["raw"]).name
                for e in a.events.filter(kind=EventKind.EXEC, data__phase="end")
                for s in ("stdout", "stderr")
                if (e.data.get(s) or {}).get("raw")
            }
        )
        for a in attempts
    }
    numbers, paths = {}, {}
    for task in Task.objects.all():
        mine = [a for a in attempts if a.task_id == task.pk]
        numbers[task.slug] = [a.number for a in mine]
        if mine and mine[0].diff:
            paths[task.slug] = [f.new_path for f in patches.patch_files(mine[0])]
    return {
        "attempts": [a.pk for a in attempts],
        "pools": list(Pool.objects.values_list("pk", flat=True)),
        "runs": list(Evaluation.objects.values_list("pk", flat=True)),
        "run_ids": list(Evaluation.objects.values_list("run_id", flat=True)),
        "slugs": list(Task.objects.values_list("slug", flat=True)),
        "files": files,
        "outputs": outputs,
        "numbers": numbers,
        "paths": paths,
    }


def _api_gets(api: httpx.Client, grep: Grep, *, sandbox: int, reads: list[str]) -> set[str]:
    """Every GET of the OpenAPI document, with every value there is. Returns the keys."""
    from attempts.api.routes import api as ninja_api

    schema = ninja_api.get_openapi_schema()
    values = {
        "slug": list(Task.objects.values_list("slug", flat=True)),
        "attempt_id": list(Attempt.objects.values_list("pk", flat=True)),
        "sandbox_id": [sandbox],
        "pool_id": list(Pool.objects.values_list("pk", flat=True)),
        "evaluation_id": list(Evaluation.objects.values_list("pk", flat=True)),
    }
    queries = {"path": reads}
    outputs = _world()["outputs"]
    done = set()
    for path, operations in schema["paths"].items():
        if "get" not in operations:
            continue
        params = operations["get"].get("parameters", [])
        in_path = [p["name"] for p in params if p["in"] == "path"]
        required = [p["name"] for p in params if p["in"] == "query" and p.get("required")]
        optional = [p["name"] for p in params if p["in"] == "query" and not p.get("required")]
        if in_path == ["attempt_id", "name"]:  # only names an attempt has: its raw outputs
            combos = [(pk, name) for pk, names in outputs.items() for name in names]
            assert combos, f"GET {path}: no attempt kept a raw output to fetch"
        else:
            assert all(n in values for n in in_path), f"GET {path}: fill {in_path}"
            combos = list(itertools.product(*(values[n] for n in in_path)))
        for combo in combos:
            url = "/api" + path.format(**dict(zip(in_path, combo, strict=True)))
            asked = [n for n in (*required, *optional) if n in queries]
            assert set(required) <= set(asked), f"GET {path}: give {required}"
            variants = [{}] if not asked else [{asked[0]: v} for v in queries[asked[0]]]
            for query in variants:
                grep.fetch(api, url, params=query, kind="api")
        done.add(f"GET {path}")
    return done


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(1200)  # two agents, a sandbox and a pool on a shared host, then ~300 fetches
def test_a_planted_secret_is_on_no_page_in_no_api_answer_and_in_no_export(
    worker, web, load_example, make_task, tmp_path, figure
):
    task_secret = f"stage-{settings.BOLTZ_QUEUE}-key"
    grep = Grep([SECRET, task_secret])
    stage_env = {"environment": {"TASK_KEY": "stage-${BOLTZ_QUEUE}-key"}}
    fresh = load_example("fix-add", stage_env=stage_env)
    in_place = make_task(  # its JUnit report quotes the agent's calc.py in a test's message
        mode="in_place",
        check="python3 -m pytest -q -p no:cacheprovider tests "
        '--junitxml="$BOLTZ_CHECK_DIR/junit.xml"',
    )
    in_place.stage_env = stage_env
    in_place.save()
    for mode in ("fix", "break"):
        Agent.objects.create(
            name=f"leaky-{mode}",
            command=LEAKY,
            environment={"SECRET_TOKEN": SECRET, "LEAK_MODE": mode},
        )
    reviewer = get_user_model().objects.create_superuser("reviewer", "", "review-pass")
    _row, token = token_create(user=reviewer)
    api = httpx.Client(base_url=web, headers={"Authorization": f"Bearer {token}"}, timeout=180)
    called: set[str] = set()

    def call(method: str, route: str, url: str, **kwargs):
        called.add(f"{method} {route}")
        response = grep.fetch(api, url, method=method, kind="api", **kwargs)
        assert response.status_code < 400, f"{method} {url}: {response.text[-500:]}"
        return response

    # 1. Saved agents that leak, started through the API: one checked in a fresh container (on
    # the recorded, redacted files), one checked in place (on the agent's own files).
    started = []
    for task, agent in ((fresh, "leaky-fix"), (in_place, "leaky-break")):
        answer = call(
            "POST",
            "/api/tasks/{slug}/attempts",
            f"/api/tasks/{task.slug}/attempts",
            json={"agent": agent},
        )
        started += [a["id"] for a in answer.json()]
    fixed, broken = wait_finished(Attempt.objects.filter(pk__in=started), timeout=400)
    call("POST", "/api/attempts/wait", "/api/attempts/wait", json={"ids": started, "timeout": 5})
    assert fixed.outcome == "passed", fixed.failure_reason  # the check ran on the redacted files
    assert broken.outcome == "failed", broken.failure_reason
    assert "[redacted]" in fixed.diff and "name-[redacted].txt" in fixed.diff
    assert fixed.commits and "[redacted]" in fixed.commits[0]["subject"]
    recorded = fixed.events.get(kind=EventKind.FILE, data__action="diff").data
    assert recorded["redacted"] >= 8, recorded  # the timeline says how many files held one
    in_place_test = broken.checks.get().tests.get(name__endswith="test_add")
    assert "[redacted]" in in_place_test.message  # the check read the agent's own calc.py
    assert "[redacted]" in broken.checks.get().junit_xml

    # 2. An API sandbox whose task setting holds a secret, driven and read while live.
    sandbox = call(
        "POST", "/api/sandboxes", "/api/sandboxes", json={"task": fresh.slug, "wait": 120}
    ).json()["id"]
    live = f"/api/sandboxes/{sandbox}"
    ran = call(
        "POST",
        "/api/sandboxes/{sandbox_id}/exec",
        f"{live}/exec",
        json={
            "command": 'printf "k=%s\\n" "$TASK_KEY" > api-leak.txt; '
            'echo x > "api-$TASK_KEY.txt"; mkdir -p "api-dir-$TASK_KEY"; echo "$TASK_KEY"'
        },
    ).json()
    assert ran["exit_code"] == 0 and "[redacted]" in ran["stdout"]
    read = call(
        "GET", "/api/sandboxes/{sandbox_id}/files", f"{live}/files", params={"path": "api-leak.txt"}
    )
    assert read.content == b"k=[redacted]\n"
    listed = call("GET", "/api/sandboxes/{sandbox_id}/files/list", f"{live}/files/list").json()
    assert "api-[redacted].txt" in {e["name"] for e in listed}
    archive = call("GET", "/api/sandboxes/{sandbox_id}/archive", f"{live}/archive")
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        names = {m.name: m for m in tar}
        assert "workspace/api-[redacted].txt" in names
        leak = tar.extractfile(names["workspace/api-leak.txt"]).read()
        assert leak == b"k=[redacted]\n"
    called |= _api_gets(api, grep, sandbox=sandbox, reads=["api-leak.txt", "task-leak.txt"])
    call("POST", "/api/sandboxes/{sandbox_id}/check", f"{live}/check")
    call("POST", "/api/sandboxes/{sandbox_id}/close", f"{live}/close", json={"check": True})

    # 3. A pool whose environment writes and prints the task's secret, then submits.
    pool = call("POST", "/api/pools", "/api/pools", json={"task": fresh.slug, "size": 1}).json()
    pools = f"/api/pools/{pool['id']}"
    call("POST", "/api/pools/{pool_id}/reset", f"{pools}/reset", json={"wait": 120})
    call(
        "POST",
        "/api/pools/{pool_id}/envs/{index}/step",
        f"{pools}/envs/0/step",
        json={
            "action": {"run": 'printf "%s" "$TASK_KEY" > "pool-$TASK_KEY.txt"; echo "$TASK_KEY"'}
        },
    )
    stepped = call(
        "POST",
        "/api/pools/{pool_id}/step",
        f"{pools}/step",
        json={"actions": [{"write": {"note.txt": "n\n"}, "run": "cat pool-*.txt", "submit": True}]},
    ).json()
    assert "[redacted]" in stepped[0]["observation"]["stdout"]
    call("POST", "/api/pools/{pool_id}/close", f"{pools}/close")
    wait_finished(Attempt.objects.all(), timeout=300)

    # 4. A run (SWE-bench predictions' pages) holding the failed attempt.
    run = Evaluation.objects.create(
        run_id="leak-run",
        models_evaluated=["leaky"],
        items=[
            {
                "line": 1,
                "instance_id": "calc-1",
                "model": "leaky",
                "task": in_place.slug,
                "attempt": broken.pk,
                "empty": False,
                "patch_is_none": False,
                "error": "",
                "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
                "PASS_TO_PASS": [],
            }
        ],
    )
    Attempt.objects.filter(pk=broken.pk).update(evaluation=run)

    # 5. Every page and export, every API answer once all has ended.
    called |= _api_gets(api, grep, sandbox=sandbox, reads=["api-leak.txt"])
    operations = {
        f"{method.upper()} {path}"
        for path, ops in json.loads(httpx.get(web + "/api/openapi.json").text)["paths"].items()
        for method in ops
    }
    assert operations - called - set(NOT_CALLED) == set(), (
        "API operations neither called nor left out"
    )
    browser = _signed_in(web, "reviewer", "review-pass")
    for url, export in _page_urls(_world()):
        if any(url == reverse(name) for name in SIGN_OUT):
            continue
        grep.fetch(browser, url, kind="export" if export else "page")
    for name in SIGN_OUT:  # last: they end the session
        grep.fetch(browser, reverse(name))

    # 6. The same exports written by the management commands.
    for attempt in Attempt.objects.all():
        out = tmp_path / f"bundle-{attempt.pk}.zip"
        call_command("export_attempt", str(attempt.pk), "-o", str(out))
        grep.seen["export"].append(f"manage.py export_attempt {attempt.pk}")
        grep.bytes(str(out), out.read_bytes())
    for task in Task.objects.all():
        for choice, _label in CHOICES:
            fmt, flavour = choice.split(":")
            out = tmp_path / f"{task.slug}-{fmt}-{flavour}.jsonl"
            call_command(
                "export_task",
                task.slug,
                "--format",
                fmt,
                "--flavour",
                flavour,
                "--include-all",
                "--include-oracles",
                "-o",
                str(out),
            )
            for written in tmp_path.glob(f"{task.slug}-{fmt}-{flavour}*"):
                grep.seen["export"].append(f"manage.py export_task {choice} ({written.name})")
                grep.bytes(str(written), written.read_bytes())

    # 7. What is kept: every stored file of these attempts, every row recorded of them (but the
    # agent's environment, which is where the secret is given).
    for attempt in Attempt.objects.all():
        for stored in (Path(settings.MEDIA_ROOT) / "attempts" / str(attempt.pk)).rglob("*"):
            if stored.is_file():
                grep.seen["kept"].append(str(stored))
                grep.bytes(f"storage {stored}", stored.read_bytes())
    kept = [f.name for f in Attempt._meta.fields if f.name != "agent_env"]
    rows = serializers.serialize("json", Attempt.objects.all(), fields=kept) + "".join(
        serializers.serialize("json", model.objects.all())
        for model in (Event, CheckResult, TestOutcome, AuditEntry, Pool, Evaluation, Task)
    )
    grep.seen["kept"].append("the database's rows")
    grep.bytes("the database's rows", rows.encode())

    counts = {kind: len(urls) for kind, urls in grep.seen.items()}
    print(
        f"\n{counts['page']} pages, {counts['api']} API answers, {counts['export']} exports and "
        f"{counts['kept']} stored files and tables grepped for 2 secrets: "
        f"{len(grep.found)} occurrences"
    )
    assert grep.found == [], "\n".join(grep.found[:50])
    assert counts["page"] > 100 and counts["api"] > 20 and counts["export"] > 20
    figure(
        f"{counts['page']} pages, {counts['api']} API answers, {counts['export']} exports, "
        f"{counts['kept']} stored files and tables grepped for {len(grep.values)} secrets: "
        f"{len(grep.found)} occurrences"
    )
