"""The HTTP API fuzzed with schemathesis: every operation of /api/openapi.json, against a real web
server process, a real worker and live sandboxes, answers no server error, and its answers
conform to the document.

By hand, against a running demo: see "Checking the API with schemathesis" in docs/API.md.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import httpx
import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis.errors import FailedHealthCheck
from schemathesis.engine import Status, StopReason, events, from_schema

from attempts.api.tokens import token_create
from attempts.dispatch import limits
from tests.conftest import containers_of, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

DAY, HOUR = limits.MAX_COMMAND_SECONDS, limits.MAX_ATTEMPTS_WAIT
MAX_EXAMPLES = 20  # per operation and fuzzing round (the coverage phase adds its own cases)
SEED = os.environ.get("BOLTZ_SCHEMATHESIS_SEED", "")
TIME_BUDGET = 90  # seconds: fuzzing goes round after round until then, and stops there

# Every check of the installed schemathesis (status codes, content types, response headers and
# schemas, negative data rejected, positive data accepted, missing headers, unsupported methods,
# Allow headers, use after free, resource availability, ignored and object-level auth).
CHECKS = {
    "enabled": True,
    # 413 is how the server refuses a value past a length the document states (a command's
    # argument over MAX_ARG_BYTES): a rejection like 400 and 422.
    "negative_data_rejection": {
        "expected-statuses": ["400", "401", "403", "404", "405", "409", "413", "422", "429"]
    },
}


def _past_hypothesis(error: BaseException) -> bool:
    """Whether schemathesis could not make a case because Hypothesis cannot draw it: a negative
    case for a bound the document states past what Hypothesis draws (a string one byte over a
    command's 128 KiB: InvalidArgument "larger than Hypothesis is designed to handle", which
    schemathesis reports as this health check; Hypothesis's own check of that name is
    suppressed in the config). Not the server's doing: tests/test_request_limits.py sends those
    over-bound values itself."""
    return isinstance(error, FailedHealthCheck) and "Minimum possible example is too large" in str(
        error
    )


def bound_blocking_inputs(ctx, case):
    """Cut down to seconds the generated values that would make a call block for minutes (the
    server allows an hour for /attempts/wait, a day for an exec, ten minutes of waiting for room
    for a new sandbox); values of the wrong type, or past the document's bounds, are left for
    the server to refuse (cutting those would make a negative case valid)."""

    def number(value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    body = case.body
    if not isinstance(body, dict):
        return case
    operation = f"{case.method.upper()} {case.operation.path}"
    if operation == "POST /api/sandboxes/{sandbox_id}/exec":
        timeout = body.get("timeout")  # absent, null or 0: the server's default of 600 s
        if timeout is None or (number(timeout) and (timeout == 0 or 5 < timeout <= DAY)):
            body["timeout"] = 5
    elif operation == "POST /api/attempts/wait":
        if number(body.get("timeout", 600)) and 2 < body.get("timeout", 600) <= HOUR:
            body["timeout"] = 2
    elif operation == "POST /api/sandboxes":
        if number(body.get("wait", 60)) and body.get("wait", 60) > 1:
            body["wait"] = 1
    elif operation == "POST /api/pools":
        if number(body.get("size")) and 2 < body["size"] <= limits.MAX_POOL_SIZE:
            body["size"] = 2  # pools start nothing until a reset; this keeps those small too
    elif operation == "POST /api/pools/{pool_id}/reset":
        if number(body.get("wait", 60)) and body.get("wait", 60) > 1:
            body["wait"] = 1
    elif operation in (
        "POST /api/pools/{pool_id}/step",
        "POST /api/pools/{pool_id}/envs/{index}/step",
    ):
        if number(body.get("timeout")) and body["timeout"] > 5:
            body["timeout"] = 5
        actions = body.get("actions") if "actions" in body else [body.get("action")]
        for action in actions if isinstance(actions, list) else []:
            timeout = action.get("timeout") if isinstance(action, dict) else None
            if number(timeout) and 5 < timeout <= DAY:
                action["timeout"] = 5
    elif operation == "POST /api/tasks/{slug}/attempts":
        if number(body.get("n")) and 2 < body["n"] <= 100:
            body["n"] = 2
        url = body.get("callback_url")
        if isinstance(url, str) and url.strip().startswith(("http://", "https://")):
            body["callback_url"] = "http://127.0.0.1:9/callback"  # traffic stays on this host
    return case


# Refusals of schema-valid input that no schema can foresee, since they depend on what is in
# the sandbox, the pool or the database, or on what a body's bytes hold. Each names the
# operation (None: any), the error code and a part of the detail; only positive data
# acceptance lets them through, and only these: any other refusal of valid data fails.
SEMANTIC: tuple[tuple[str | None, str, str, str], ...] = (
    (None, "user_not_found", "", "the exec's user is looked up in the image's /etc/passwd"),
    (None, "user_not_allowed", "", "root's group members are known inside the sandbox only"),
    (None, "not_a_directory", "", "whether a path is a folder is known inside the sandbox only"),
    (None, "is_a_directory", "", "whether a path is a file is known inside the sandbox only"),
    (None, "invalid", "stdin_base64", "base64 is a format the document names, not a rule"),
    (None, "invalid", "environment", "a pool's size and its environments' indices"),
    (None, "invalid", "actions", "one action per environment: the pool's size"),
    (None, "invalid", "is not the number of tasks", "size with tasks: the list's length"),
    (None, "invalid", "not an agent", "a saved agent's name is looked up"),
    (None, "invalid", "has no check", "whether a task has a check is in the database"),
    (None, "invalid", "no reference patch", "whether a task has one is in the database"),
    ("PUT /api/sandboxes/{sandbox_id}/archive", "invalid", "", "what the bytes hold"),
    ("POST /api/evaluations", "invalid", "", "what the predictions and rows hold"),
    (None, "too_large", "larger than", "a file's size is known inside the sandbox only"),
    ("POST /api/sandboxes", "invalid", "not on this Docker host", "which images a host has"),
)


def _answer(response) -> dict:
    """An error answer's JSON object, or {}."""
    try:
        answer = json.loads(response.content)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def semantic(operation, failure, response) -> bool:
    if failure.title != "Schema-valid request rejected" or response.status_code not in (400, 413):
        return False
    answer = _answer(response)
    code, detail = answer.get("code"), str(answer.get("detail", ""))
    return any(
        (op is None or op == operation) and code == kind and part in detail
        for op, kind, part, _why in SEMANTIC
    )


def not_known(ctx, failure, case, response) -> bool:
    return not semantic(f"{case.method.upper()} {case.operation.path}", failure, response)


def _example(check, interaction) -> str:
    """A failure's message, its request as curl, and what the server answered."""
    text = f"{check.failure_info.failure.message}\n    {check.failure_info.code_sample}"
    if interaction is not None and interaction.response is not None:
        body = interaction.response.content[:500].decode(errors="replace")
        text += f"\n    -> {interaction.response.status_code} {body}"
    return text


def run(schema) -> tuple[list[str], set[str], StopReason | None]:
    """Run schemathesis; the failures (each with a request that shows it), the operations it
    called, and why it stopped."""
    failures: Counter = Counter()
    examples: dict[tuple, str] = {}
    errors, called, stop = [], set(), None
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished) and event.recorder.interactions:
            called.add(event.label)
            for case_id, checks in event.recorder.checks.items():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info:
                        interaction = event.recorder.interactions.get(case_id)
                        answered = interaction.response if interaction else None
                        code = (
                            f"{answered.status_code} {_answer(answered).get('code', '')}"
                            if answered is not None
                            else ""
                        )
                        key = (event.label, check.name, check.failure_info.failure.title, code)
                        failures[key] += 1
                        examples.setdefault(key, _example(check, interaction))
        elif isinstance(event, events.NonFatalError):
            if not _past_hypothesis(event.value):
                errors.append(f"{event.label} ({event.phase}): {event.info.format()}")
        elif isinstance(event, events.FatalError):
            errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            stop = event.stop_reason
    report = [
        f"{key[0]} [{key[1]}] {key[2]} (x{count}): {examples[key]}"
        for key, count in sorted(failures.items())
    ]
    return report + errors, called, stop


@pytest.mark.timeout(300)  # the budget, plus setup and a call in flight at its end
def test_schemathesis_finds_no_server_error_and_answers_conform(web, worker, load_example):
    user = get_user_model().objects.create_user("fuzzer", password="x")
    headers = {"Authorization": f"Bearer {token_create(user=user)[1]}"}
    load_example("fix-add")
    with httpx.Client(base_url=web, headers=headers, timeout=120) as api:
        made = [api.post("/api/sandboxes", json={"task": "fix-add"}) for _ in range(2)]
        assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
        live, victim = (m.json()["id"] for m in made)
        pool = api.post("/api/pools", json={"task": "fix-add", "size": 1})
        assert pool.status_code == 201, pool.text
        try:
            config = schemathesis.Config.from_dict(
                {
                    "max-time": TIME_BUDGET,
                    "suppress-health-check": ["large_base_example"],  # see _past_hypothesis
                    # BOLTZ_SCHEMATHESIS_SEED replays a run (its seed is in a failure's message).
                    **({"seed": int(SEED)} if SEED else {}),
                    "headers": headers,
                    "request-timeout": 90,
                    "continue-on-failure": True,
                    "cache": {"enabled": False},  # no .schemathesis/ left in the checkout
                    "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
                    "checks": CHECKS,
                    "phases": {"stateful": {"enabled": False}},
                    "parameters": {
                        "sandbox_id": live,
                        "slug": "fix-add",
                        "pool_id": pool.json()["id"],
                        "index": 0,
                    },
                    "operations": [
                        # Closing and deleting are fuzzed on the second sandbox, so the first
                        # stays live for every other operation, whatever the order.
                        {
                            "include-name": [
                                "POST /api/sandboxes/{sandbox_id}/close",
                                "DELETE /api/sandboxes/{sandbox_id}",
                            ],
                            "parameters": {"sandbox_id": victim},
                            # The fuzzer itself deletes it: 410 is then the right answer.
                            "checks": {
                                "positive_data_acceptance": {
                                    "expected-statuses": ["2xx", "401", "404", "409", "410"]
                                }
                            },
                        },
                        # 504 is how /attempts/wait says that not every attempt ended in time
                        # (the live sandbox's id among "ids" never ends).
                        {
                            "include-name": "POST /api/attempts/wait",
                            "checks": {
                                "not_a_server_error": {
                                    "expected-statuses": ["2xx", "3xx", "4xx", "504"]
                                }
                            },
                        },
                    ],
                }
            )
            schema = schemathesis.openapi.from_url(f"{web}/api/openapi.json", config=config)
            schema.hook("map_case")(bound_blocking_inputs)
            schema.hook("filter_failure")(not_known)
            failures, called, stop = run(schema)
        finally:
            for made_pool in api.get("/api/pools").json():
                api.post(f"/api/pools/{made_pool['id']}/close")
            ids = {live, victim} | {s["id"] for s in api.get("/api/sandboxes").json()}
            for sandbox in ids:
                api.delete(f"/api/sandboxes/{sandbox}")
            wait_until(
                lambda: not any(containers_of(sandbox) for sandbox in ids),
                timeout=60,
                what="the fuzzed sandboxes' containers to go",
            )

    assert not failures, f"seed {config.seed} (to replay):\n" + "\n\n".join(failures)
    assert stop in (StopReason.COMPLETED, StopReason.MAX_TIME), stop
    every = {
        f"{method.upper()} {path}"
        for path, ops in schema.raw_schema["paths"].items()
        for method in ops
    }
    assert called == every, every - called
