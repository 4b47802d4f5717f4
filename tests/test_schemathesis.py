"""Property-based checks of the HTTP API with schemathesis, against a real web server process."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from django.contrib.auth import get_user_model
from schemathesis.engine import Status, events, from_schema

from attempts.tokens import token_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]


def bound(ctx, case):
    body = case.body if isinstance(case.body, dict) else None
    if body is not None:
        path, method = case.operation.path, case.method.upper()
        if path == "/api/sandboxes/{sandbox_id}/exec":
            timeout = body.get("timeout")
            if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 5:
                body["timeout"] = 5
        elif path == "/api/attempts/wait":
            timeout = body.get("timeout")
            if not isinstance(timeout, int | float) or timeout > 2:
                body["timeout"] = 2
        elif path == "/api/sandboxes" and method == "POST":
            wait = body.get("wait")
            if not isinstance(wait, int | float) or wait > 1:
                body["wait"] = 1
    return case


@pytest.mark.timeout(900)
def test_schemathesis(web, worker, load_example):
    user = get_user_model().objects.create_user("fuzzer", password="x")
    token = token_create(user=user)[1]
    load_example("fix-add")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=web, headers=headers, timeout=120) as api:
        live = api.post("/api/sandboxes", json={"task": "fix-add"})
        assert live.status_code == 201, live.text
        victim = api.post("/api/sandboxes", json={"task": "fix-add"})
        assert victim.status_code == 201, victim.text
        sid, vid = live.json()["id"], victim.json()["id"]
        try:
            config = schemathesis.Config.from_dict(
                {
                    "headers": headers,
                    "request-timeout": 60,
                    "generation": {"max-examples": 20, "database": "none"},
                    "phases": {"stateful": {"enabled": False}},
                    "parameters": {"sandbox_id": sid, "slug": "fix-add"},
                    "operations": [
                        {
                            "include-name": [
                                "POST /api/sandboxes/{sandbox_id}/close",
                                "DELETE /api/sandboxes/{sandbox_id}",
                            ],
                            "parameters": {"sandbox_id": vid},
                        },
                    ],
                }
            )
            schema = schemathesis.openapi.from_url(f"{web}/api/openapi.json", config=config)
            schema.hook("map_case")(bound)
            failures = []
            import time
            t0 = time.monotonic()
            for event in from_schema(schema).execute():
                if isinstance(event, events.ScenarioFinished):
                    n = len(event.recorder.interactions)
                    print(f"{time.monotonic()-t0:7.1f} {event.phase} {event.label} {event.status} {n} {event.elapsed_time:.1f}s")
                    for case_id, checks in event.recorder.checks.items():
                        for check in checks:
                            if check.status == Status.FAILURE and check.failure_info:
                                f = check.failure_info.failure
                                failures.append(f"{event.label} [{check.name}] {f.title}: {f.message[:300]}\n  {check.failure_info.code_sample}")
                elif isinstance(event, (events.NonFatalError, events.FatalError)):
                    print("ERROR", event)
                    failures.append(repr(event))
                elif isinstance(event, events.EngineFinished):
                    print("finished", event.stop_reason, event.running_time)
            print("\n".join(failures))
            assert not failures
        finally:
            for sandbox in api.get("/api/sandboxes").json():
                api.delete(f"/api/sandboxes/{sandbox['id']}")
