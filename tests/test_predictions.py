"""SWE-bench predictions evaluated as runs: the harness's predictions read line by line (bad
lines refused with their number, the rest evaluated), one attempt per prediction with the patch
agent, and the report in the harness's own format. Against the real things: a Celery worker,
Docker, a served web process for the API and the SDK."""

from __future__ import annotations

import json
import subprocess
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client as PageClient

from attempts.models import Attempt, Evaluation, Outcome
from attempts.run.heartbeat import register_this_host
from attempts.services.predictions import (
    EMPTY_REASON,
    build_report,
    parse_predictions,
    report_filename,
    report_table,
)
from attempts.taskio.repos import commit_folder
from tests.conftest import run_web, sdk_client

DATA = Path(__file__).parent / "data" / "swebench"
BASE = "e55ca5df802ebe4950358d2d6aae2d0359b2de23"
ROW = json.loads((DATA / "rows.jsonl").read_text().splitlines()[0])  # acme__calc-1
GOLD = ROW["patch"]
WRONG = GOLD.replace("+    return a + b", "+    return a * b")  # applies; add(2, 3) is 6
STALE = GOLD.replace("-    return a - b", "-    return a - b - 0")  # does not apply
ADD, MULTIPLY = "tests/test_calc.py::test_add", "tests/test_calc.py::test_multiply"


def pred(instance_id: str, patch: str | None, model: str = "acme/model-1") -> dict:
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch}


def rows(*numbers: int) -> list[dict]:
    """Rows acme__calc-N: the same repository, base and tests as rows.jsonl's first row."""
    return [{**ROW, "instance_id": f"acme__calc-{n}"} for n in numbers]


def jsonl(entries: list) -> str:
    return "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries)


# --- reading predictions and building the report: pure ----------------------------------------
def test_bad_lines_are_refused_with_their_number_and_the_rest_are_read():
    text = jsonl(
        [
            pred("a", GOLD),
            "{not json",
            "",
            [1, 2],
            pred("a", WRONG),
            {"instance_id": "b", "model_name_or_path": "m"},
            pred("c", None),
        ]
    )
    accepted, refused = parse_predictions(text)
    assert [(p.line, p.instance_id, p.patch) for p in accepted] == [(1, "a", GOLD), (7, "c", None)]
    assert [(r.line, r.instance_id) for r in refused] == [(2, ""), (4, ""), (5, "a"), (6, "b")]
    assert refused[0].reason.startswith("not JSON")
    assert refused[1].reason == "not a JSON object"
    assert (
        refused[2].reason
        == "duplicate instance_id a: line 1 has it already (that one is evaluated)"
    )
    assert refused[3].reason == 'model_patch is missing (give "" or null for no patch)'


def test_json_lists_and_swe_agent_dicts_are_read_as_the_harness_reads_them():
    as_list, _ = parse_predictions(json.dumps([pred("a", GOLD), pred("b", "")]))
    assert [(p.line, p.instance_id) for p in as_list] == [(1, "a"), (2, "b")]
    keyed = {"a": {"model_name_or_path": "m", "model_patch": GOLD}}
    as_dict, refused = parse_predictions(json.dumps(keyed))
    assert [(p.instance_id, p.model, p.patch) for p in as_dict] == [
        ("a", "m", GOLD)
    ] and not refused


def snapshot_entry(instance_id, *, empty=False, error="", attempt=None):
    item = {
        "line": 1,
        "instance_id": instance_id,
        "model": "acme/model-1",
        "patch_is_none": False,
        "empty": empty,
        "task": instance_id if not error else "",
        "attempt": attempt and attempt["id"],
        "error": error,
        "FAIL_TO_PASS": [ADD],
        "PASS_TO_PASS": [MULTIPLY],
    }
    return {"item": item, "attempt": attempt}


def attempt_info(pk, outcome, *, applied=True, tests=None, reason=""):
    return {
        "id": pk,
        "name": f"t#{pk}",
        "url": f"/attempts/{pk}/",
        "status": "finished",
        "outcome": outcome,
        "failure_reason": reason,
        "applied": applied,
        "not_applied": "" if applied else "patch did not apply (error: patch failed: calc.py:1)",
        "tests": tests,
    }


def test_the_report_has_the_harness_keys_and_never_counts_infrastructure_as_unresolved():
    passing = {"tests.test_calc::test_add": "passed", "tests.test_calc::test_multiply": "passed"}
    failing = {**passing, "tests.test_calc::test_add": "failed"}
    snapshot = [
        snapshot_entry("r", attempt=attempt_info(1, "passed", tests=passing)),
        snapshot_entry("u", attempt=attempt_info(2, "failed", tests=failing)),
        snapshot_entry("n", attempt=attempt_info(3, "failed", applied=False, tests=failing)),
        snapshot_entry("e", empty=True),
        snapshot_entry("i", attempt=attempt_info(4, "infra_error", reason="check: image gone")),
        snapshot_entry("x", error="repo: no local clone"),
    ]
    facts = {"id": 9, "run_id": "r1", "models": ["acme/model-1"], "url": "/runs/9/"}
    facts |= {"dataset_ids": ["r", "u", "n", "e", "i", "x", "other"], "refused": []}
    report = build_report(facts, snapshot)
    assert report["resolved_ids"] == ["r"] and report["unresolved_ids"] == ["n", "u"]
    assert report["empty_patch_ids"] == ["e"] and report["error_ids"] == ["i", "x"]
    assert report["completed_ids"] == ["n", "r", "u"] and report["incomplete_ids"] == ["other"]
    assert (report["total_instances"], report["submitted_instances"]) == (7, 6)
    assert report["schema_version"] == 2
    instances = report["boltz"]["instances"]
    assert instances["n"]["reason"].startswith("patch did not apply")
    assert instances["i"]["reason"] == "infrastructure error: check: image gone"
    assert instances["u"]["report"] == {
        "patch_is_None": False,
        "patch_exists": True,
        "patch_successfully_applied": True,
        "resolved": False,
        "tests_status": {
            "FAIL_TO_PASS": {"success": [], "failure": [ADD]},
            "PASS_TO_PASS": {"success": [MULTIPLY], "failure": []},
            "FAIL_TO_FAIL": {"success": [], "failure": []},
            "PASS_TO_FAIL": {"success": [], "failure": []},
        },
    }
    assert (instances["u"]["tests_passed"], instances["u"]["tests_required"]) == (1, 2)
    table = report_table(report)
    assert "Instances resolved: 1" in table and "Instances with errors: 2" in table


def test_the_report_file_is_named_as_the_harness_names_it():
    evaluation = Evaluation(run_id="nightly", models_evaluated=["acme/model-1"])
    assert report_filename(evaluation) == "acme__model-1.nightly.json"


# --- against a worker and Docker ------------------------------------------------------------------
@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """DIR/acme__calc.git: a bare clone of the repository the rows name."""
    root = tmp_path_factory.mktemp("swebench")
    assert commit_folder(DATA / "repos_src" / "acme__calc", root / "src") == BASE
    subprocess.run(
        [
            "git",
            "clone",
            "--quiet",
            "--bare",
            str(root / "src"),
            str(root / "repos" / "acme__calc.git"),
        ],
        check=True,
    )
    return root / "repos"


def evaluate(tmp_path, predictions: list, dataset: list, *args) -> str:
    (tmp_path / "preds.jsonl").write_text(jsonl(predictions))
    (tmp_path / "rows.jsonl").write_text(jsonl(dataset))
    out = StringIO()
    call_command(
        "evaluate_predictions",
        str(tmp_path / "preds.jsonl"),
        "--dataset",
        str(tmp_path / "rows.jsonl"),
        "--report-dir",
        str(tmp_path / "out"),
        *args,
        stdout=out,
    )
    return out.getvalue()


def reviewer() -> PageClient:
    pages = PageClient()
    pages.force_login(get_user_model().objects.create_superuser("reviewer", "r@example.com", "pw"))
    return pages


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(180)
def test_the_command_evaluates_predictions_into_the_harness_report(worker, repos, tmp_path):
    predictions = [
        pred("acme__calc-1", GOLD),
        pred("acme__calc-2", WRONG),
        pred("acme__calc-3", ""),
        pred("acme__calc-4", STALE),
        "not json at all",
        pred("ghost__lib-9", GOLD),
        pred("acme__calc-1", WRONG),
    ]
    out = evaluate(
        tmp_path,
        predictions,
        [*rows(1, 2, 3, 4, 5), "broken"],
        "--repos",
        repos,
        "--run-id",
        "nightly",
    )
    report = json.loads((tmp_path / "out" / "acme__model-1.nightly.json").read_text())
    assert report["resolved_ids"] == ["acme__calc-1"]
    assert report["unresolved_ids"] == ["acme__calc-2", "acme__calc-4"]
    assert report["empty_patch_ids"] == ["acme__calc-3"] and report["error_ids"] == []
    assert report["incomplete_ids"] == ["acme__calc-5"]
    assert (report["total_instances"], report["submitted_instances"]) == (5, 4)
    refused = [(r["line"], r["reason"]) for r in report["boltz"]["refused"]]
    assert refused[0][0] == 5 and refused[0][1].startswith("not JSON")
    assert refused[1] == (
        6,
        "instance_id ghost__lib-9 is not in the dataset (dataset lines that could not be read: 6)",
    )
    assert refused[2] == (
        7,
        "duplicate instance_id acme__calc-1: line 1 has it already (that one is evaluated)",
    )
    instances = report["boltz"]["instances"]
    stale = instances["acme__calc-4"]
    assert stale["reason"].startswith("patch did not apply (error: patch failed: calc.py:1")
    assert stale["report"]["patch_successfully_applied"] is False
    assert instances["acme__calc-2"]["report"]["tests_status"]["FAIL_TO_PASS"]["failure"] == [ADD]
    assert instances["acme__calc-3"]["reason"] == EMPTY_REASON
    per_instance = (
        tmp_path / "out/logs/run_evaluation/nightly/acme__model-1/acme__calc-1/report.json"
    )
    assert json.loads(per_instance.read_text())["acme__calc-1"]["resolved"] is True
    # The table printed at the end: one row each, with the attempt and its page.
    row = next(line for line in out.splitlines() if line.startswith("acme__calc-4 "))
    assert "unresolved: patch did not apply" in row and "acme__calc-4 #1" in row
    assert f"http://127.0.0.1:8000/attempts/{stale['attempt_id']}/" in row
    assert "refused line 6: instance_id ghost__lib-9 is not in the dataset" in out

    # Every prediction is an attempt, labelled with the model; the one that did not apply is a
    # failure with that reason, never an infrastructure error.
    attempts = {a.task.slug: a for a in Attempt.objects.select_related("task")}
    assert sorted(attempts) == ["acme__calc-1", "acme__calc-2", "acme__calc-3", "acme__calc-4"]
    assert {a.agent for a in attempts.values()} == {"acme/model-1"}
    assert attempts["acme__calc-4"].outcome == Outcome.FAILED
    assert attempts["acme__calc-4"].failure_reason.startswith("patch did not apply")
    assert attempts["acme__calc-1"].outcome == Outcome.PASSED
    assert attempts["acme__calc-3"].failure_reason == EMPTY_REASON

    # The dashboard: the run, its instances and refusals; the task page filtered by run.
    pages = reviewer()
    evaluation = Evaluation.objects.get()
    listing = pages.get("/runs/").content.decode()
    assert "nightly" in listing and "1 resolved" in listing and "2 unresolved" in listing
    detail = pages.get(f"/runs/{evaluation.pk}/").content.decode()
    assert "line 6 (ghost__lib-9): instance_id ghost__lib-9 is not in the dataset" in detail
    assert f'href="/attempts/{stale["attempt_id"]}/">acme__calc-4 #1</a>' in detail
    task_page = pages.get("/tasks/acme__calc-1/?run=nightly").content.decode()
    assert 'id="attempt-1"' in task_page and "nightly</a>" in task_page
    assert 'id="attempt-1"' not in pages.get("/tasks/acme__calc-1/?run=other").content.decode()
    download = pages.get(f"/runs/{evaluation.pk}/report.json")
    assert download["Content-Disposition"] == 'attachment; filename="acme__model-1.nightly.json"'
    assert json.loads(download.content)["resolved_ids"] == ["acme__calc-1"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.timeout(60)
def test_an_infrastructure_failure_is_an_error_and_unusable_input_fails_the_command(
    docker_ready, repos, tmp_path
):
    out = evaluate(
        tmp_path,
        [pred("acme__calc-1", GOLD)],
        rows(1),
        "--repos",
        repos,
        "--image",
        "boltz-missing:none",
    )
    [written] = (tmp_path / "out").glob("*.json")
    assert written.name == report_filename(Evaluation.objects.get())  # the run id: run-DATE
    report = json.loads(written.read_text())
    assert report["error_ids"] == ["acme__calc-1"] and report["unresolved_ids"] == []
    reason = report["boltz"]["instances"]["acme__calc-1"]["reason"]
    assert reason.startswith(
        "its dataset row could not be imported: image: boltz-missing:none is not"
    )
    assert "error: its dataset row could not be imported" in out
    with pytest.raises(CommandError, match="nothing to evaluate: line 1: instance_id nope is not"):
        evaluate(tmp_path, [pred("nope", GOLD)], rows(1), "--repos", repos)


# --- the API and the SDK against a served web process -----------------------------------------------
@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker, redis_ready, repos):
    """A web process that finds the rows' repositories under BOLTZ_SWEBENCH_REPOS."""
    with run_web(env={"BOLTZ_SWEBENCH_REPOS": str(repos)}) as url:
        yield url


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(180)
def test_the_sdk_evaluates_runs_and_the_dashboard_compares_them(worker, served):
    register_this_host()  # the images the web process checks rows against
    assert httpx.post(f"{served}/api/evaluations", json={}).status_code == 401
    dataset = jsonl(rows(1, 2))  # the text of a rows file
    with sdk_client(served, "evaluator") as client:
        first = client.evaluate(
            [pred("acme__calc-1", GOLD), "not an object", pred("acme__calc-2", WRONG)],
            dataset,
            run_id="gold-run",
            wait=False,
        )
        second = client.evaluate(
            [pred("acme__calc-1", WRONG, "other"), pred("acme__calc-2", GOLD, "other")],
            dataset,
            run_id="other-run",
            wait=False,
        )
        assert [(r.line, r.reason) for r in first.refused] == [(2, "not a JSON object")]
        first = client.evaluation(first.id, wait=True, timeout=150)
        second = client.evaluation(second.id, wait=True, timeout=150)
    assert first.finished and first.resolved_ids == ["acme__calc-1"]
    assert (
        first.unresolved_ids == ["acme__calc-2"]
        and first.report_file == "acme__model-1.gold-run.json"
    )
    assert second.resolved_ids == ["acme__calc-2"] and second.unresolved_ids == ["acme__calc-1"]
    result = first.instances["acme__calc-2"]
    assert (result.result, result.tests_passed, result.tests_required) == ("unresolved", 1, 2)
    assert result.url == f"{served}/attempts/{result.attempt_id}/"
    assert result.report["tests_status"]["PASS_TO_PASS"]["success"] == [MULTIPLY]

    # Compared: what each run resolved that the other did not, with both attempts linked.
    pages = reviewer()
    assert 'id="compare-runs"' in pages.get("/tasks/acme__calc-1/").content.decode()
    html = pages.get("/runs/compare/?a=gold-run&b=other-run").content.decode()
    only_a = html.split('id="only-a"')[1].split('id="only-b"')[0]
    only_b = html.split('id="only-b"')[1]
    assert "acme__calc-1" in only_a and "acme__calc-2" not in only_a
    assert "acme__calc-2" in only_b and "acme__calc-1" not in only_b
    gold_attempt = first.instances["acme__calc-1"].attempt_id
    assert f'href="/attempts/{gold_attempt}/"' in only_a
    one_task = pages.get("/runs/compare/?a=gold-run&b=other-run&task=acme__calc-2").content
    assert "acme__calc-1" not in one_task.decode().split('id="only-a"')[1]


def test_the_sdk_reads_predictions_from_lists_paths_and_text_and_types_the_report(tmp_path):
    from boltz.evaluations import EvaluationReport, evaluation_input

    path = tmp_path / "preds.jsonl"
    path.write_text(jsonl([pred("a", GOLD)]))
    assert evaluation_input(path) == evaluation_input(str(path)) == path.read_text()
    assert evaluation_input([pred("a", GOLD)]) == [pred("a", GOLD)]
    assert evaluation_input({"a": {"model_name_or_path": "m", "model_patch": ""}}) == [
        {"instance_id": "a", "model_name_or_path": "m", "model_patch": ""}
    ]
    report = {"resolved_ids": ["a"], "boltz": {"instances": {"a": {"result": "resolved"}}}}
    data = {"id": 3, "state": "finished", "report_file": "m.r.json", "report": report}
    data["refused"] = [{"line": 2, "instance_id": "", "reason": "not a JSON object"}]
    typed = EvaluationReport.from_json(data)
    assert typed.finished and typed.resolved_ids == ["a"] and typed.instances["a"].resolved
    assert typed.refused[0].line == 2
    assert json.loads(typed.write(tmp_path).read_text()) == report


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(180)
def test_the_worked_example_of_docs_integrations_runs_as_written(worker, tmp_path):
    root = Path(__file__).parent.parent
    doc = (root / "docs" / "INTEGRATIONS.md").read_text()
    made = subprocess.run(
        ["sh", "examples/swebench_repos.sh", str(tmp_path / "repos")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    out = StringIO()
    call_command(
        "evaluate_predictions",
        str(root / "examples" / "swebench_predictions.jsonl"),
        "--dataset",
        str(root / "examples" / "swebench_rows.jsonl"),
        "--repos",
        str(tmp_path / "repos"),
        "--run-id",
        "demo-1",
        "--report-dir",
        str(tmp_path / "reports"),
        stdout=out,
    )
    # What the doc shows it prints (the lines that do not depend on the database's ids).
    for line in out.getvalue().splitlines():
        if line.startswith(("refused ", "Instances ", "Total ", "Predictions refused")):
            assert line in doc, line
    assert "Instances resolved: 1" in out.getvalue()
    report = json.loads((tmp_path / "reports" / "demo__model-1.demo-1.json").read_text())
    assert report["resolved_ids"] == ["acme__calc-1"]
    assert report["unresolved_ids"] == ["acme__calc-2"]
    assert report["empty_patch_ids"] == ["acme__calc-3"]
