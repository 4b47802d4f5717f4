"""SWE-bench predictions evaluated as a run, reported in the harness's own format.

Predictions are the harness's: objects with `instance_id`, `model_name_or_path` and
`model_patch`, as JSONL (one a line) or JSON (a list, or an object of them keyed by instance id
as SWE-agent writes it). Each one is checked on its own: a malformed line, a missing field, an
instance id the dataset does not have, or a second prediction for the same instance is refused
with its line number (for JSON, its position in the list), and the rest are evaluated.

Only the dataset rows the predictions name are imported (taskio/importers/swebench.py, so
the task is the one `import_tasks` makes). Every prediction with a patch becomes one attempt of the
built-in `patch` agent (agents.py) whose agent label is the model's name; an empty patch gets an
attempt record too, ended at once without a sandbox, as the harness runs nothing for it. Nothing
here talks to Docker: attempts are queued, and the report is built from what was recorded once
every attempt has ended (by whichever of the command, the API or the run page sees it first).

Results, as the harness reports them: resolved (the check passed: every FAIL_TO_PASS and
PASS_TO_PASS test passed), unresolved (it ran and did not pass; a patch that does not apply is
unresolved, with that reason), empty (no patch), error (infrastructure: the attempt ended as an
infrastructure error or was cancelled, or its dataset row could not be imported). An
infrastructure failure is never reported as unresolved.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from attempts.core.agents import PATCH_FILE, PATCH_NOT_APPLIED, not_applied_reason
from attempts.core.errors import TaskInvalid
from attempts.core.test_ids import junit_name
from attempts.core.timeline import Timeline
from attempts.models import (
    DONE_STATUSES,
    Actor,
    Attempt,
    CheckResult,
    Evaluation,
    Event,
    EventKind,
    Outcome,
    Status,
    Task,
    TestOutcome,
)
from attempts.services import attempts as services
from attempts.taskio.importers import import_path

KEY_ID, KEY_MODEL, KEY_PATCH = "instance_id", "model_name_or_path", "model_patch"
MAX_PREDICTIONS = 5000
MAX_PATCH_BYTES = services.MAX_AGENT_FILES_BYTES
RUN_ID = re.compile(r"^[\w][\w.-]{0,99}$")
EMPTY_REASON = "empty patch: nothing to apply, so nothing was run"
RESULTS = ("resolved", "unresolved", "empty", "error")


@dataclass
class Prediction:
    line: int
    instance_id: str
    model: str
    patch: str | None


@dataclass
class RefusedPrediction:
    line: int
    instance_id: str
    reason: str

    def __post_init__(self):  # kept as JSON in the database: no NUL, a bounded length
        self.instance_id = self.instance_id.replace("\x00", "\\0")[:200]
        self.reason = self.reason.replace("\x00", "\\0")[:1000]

    def text(self) -> str:
        return f"line {self.line}: {self.reason}"


# --- reading ------------------------------------------------------------------------------------
class _Unreadable:
    def __init__(self, reason: str):
        self.reason = reason


def _entries(value: str | list) -> list[tuple[int, Any]]:
    """(line, entry) for each entry of a JSONL text, a JSON text (a list, one object, or an
    object of objects keyed by instance id), or a list already parsed. An entry that is not
    JSON is an `_Unreadable`."""
    if isinstance(value, list):
        return list(enumerate(value, start=1))
    stripped = value.strip()
    if stripped[:1] in ("[", "{"):
        try:
            whole = json.loads(stripped)
        except (ValueError, RecursionError):  # ValueError: also a number of 5000 digits
            whole = None  # not one JSON document: read it as JSONL
        if isinstance(whole, list):
            return list(enumerate(whole, start=1))
        if isinstance(whole, dict):
            start = value[: value.index("{")].count("\n") + 1
            if KEY_ID in whole or not all(isinstance(v, dict) for v in whole.values()):
                return [(start, whole)]  # one prediction (a JSONL file of one line)
            return [(n, {KEY_ID: key, **entry}) for n, (key, entry) in enumerate(whole.items(), 1)]
    found = []
    for number, line in enumerate(value.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            found.append((number, _Unreadable(f"not JSON ({exc.msg}, column {exc.colno})")))
        except ValueError as exc:  # a number longer than Python reads
            found.append((number, _Unreadable(f"not JSON ({exc})")))
        except RecursionError:
            found.append((number, _Unreadable("not JSON (nested too deeply)")))
    return found


def parse_predictions(value: str | list) -> tuple[list[Prediction], list[RefusedPrediction]]:
    """The predictions to evaluate, and the refused ones with their line and reason."""
    accepted: list[Prediction] = []
    refused: list[RefusedPrediction] = []
    first_line: dict[str, int] = {}
    for line, entry in _entries(value):
        if isinstance(entry, _Unreadable):
            refused.append(RefusedPrediction(line, "", entry.reason))
            continue
        if not isinstance(entry, dict):
            refused.append(RefusedPrediction(line, "", "not a JSON object"))
            continue
        instance_id = entry.get(KEY_ID)
        name = instance_id if isinstance(instance_id, str) else ""
        problem = _prediction_problem(entry)
        if problem:
            refused.append(RefusedPrediction(line, name, problem))
        elif name in first_line:
            refused.append(
                RefusedPrediction(
                    line,
                    name,
                    f"duplicate instance_id {name}: line {first_line[name]} has it already "
                    "(that one is evaluated)",
                )
            )
        elif len(accepted) >= MAX_PREDICTIONS:
            refused.append(
                RefusedPrediction(line, name, f"more than {MAX_PREDICTIONS} predictions")
            )
        else:
            first_line[name] = line
            accepted.append(Prediction(line, name, entry[KEY_MODEL], entry[KEY_PATCH]))
    return accepted, refused


def _prediction_problem(entry: dict) -> str:
    instance_id = entry.get(KEY_ID)
    if not isinstance(instance_id, str) or not instance_id.strip():
        return f"{KEY_ID} is missing (a prediction needs {KEY_ID}, {KEY_MODEL}, {KEY_PATCH})"
    model = entry.get(KEY_MODEL)
    if not isinstance(model, str) or not model.strip():
        return f"{KEY_MODEL} is missing or not a string"
    for key, value in ((KEY_ID, instance_id), (KEY_MODEL, model)):
        if "\0" in value:  # no database keeps a NUL byte
            return f"{key} holds a NUL byte"
    if KEY_PATCH not in entry:
        return f'{KEY_PATCH} is missing (give "" or null for no patch)'
    patch = entry[KEY_PATCH]
    if patch is not None and not isinstance(patch, str):
        return f"{KEY_PATCH} must be a string (a diff) or null"
    if patch and len(patch.encode("utf-8", errors="replace")) > MAX_PATCH_BYTES:
        return f"{KEY_PATCH} is larger than {MAX_PATCH_BYTES} bytes"
    return ""


def parse_dataset(value: str | list) -> tuple[dict[str, dict], list[int]]:
    """Dataset rows by instance id (the first row of an id wins), and the lines that are not
    rows (not JSON, not an object, no instance_id)."""
    rows: dict[str, dict] = {}
    unreadable: list[int] = []
    for line, entry in _entries(value):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get(KEY_ID), str)
            or "\0" in entry[KEY_ID]
        ):
            unreadable.append(line)
            continue
        rows.setdefault(entry[KEY_ID], entry)
    return rows, unreadable


def _tests(row: dict, key: str) -> list[str]:
    value = row.get(key, [])
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return []
    return [str(v) for v in value] if isinstance(value, list) else []


def is_empty(patch: str | None) -> bool:
    """The harness's empty patch ("" or null); a patch of only whitespace is empty too."""
    return not patch or not patch.strip()


# --- starting -----------------------------------------------------------------------------------
@dataclass
class Started:
    evaluation: Evaluation
    notes: list[str]  # what the import said worth knowing (the image chosen)


def default_run_id() -> str:
    return timezone.now().strftime("run-%Y%m%d-%H%M%S")


def evaluation_start(
    *,
    predictions: str | list,
    dataset: str | list,
    run_id: str = "",
    image: str = "",
    repos_dir: Path | None = None,
    owner=None,
    source: str = "",
) -> Started:
    """Read the predictions, import the dataset rows they name, and queue one attempt each.
    TaskInvalid when nothing can be evaluated (the refusals say why)."""
    run_id = run_id.strip() or default_run_id()
    if not RUN_ID.match(run_id):
        raise TaskInvalid("run_id", "use up to 100 letters, digits, '.', '_' or '-'")
    if image and len(image) > 300:
        raise TaskInvalid("image", "longer than 300 characters")
    preds, refused = parse_predictions(predictions)
    rows, unreadable = parse_dataset(dataset)
    if not rows:
        raise TaskInvalid(
            "dataset", "no row could be read (JSONL or a JSON list of SWE-bench rows)"
        )
    accepted = []
    for p in preds:
        if p.instance_id in rows:
            accepted.append(p)
            continue
        why = f"instance_id {p.instance_id} is not in the dataset"
        if unreadable:
            why += f" (dataset lines that could not be read: {_numbers(unreadable)})"
        refused.append(RefusedPrediction(p.line, p.instance_id, why))
    refused.sort(key=lambda r: r.line)
    if not accepted:
        shown = "; ".join(r.text() for r in refused[:5]) or "there are none"
        raise TaskInvalid("predictions", f"nothing to evaluate: {shown}")
    tasks, import_errors, notes = _import_rows(
        [rows[p.instance_id] for p in accepted], repos_dir, image
    )
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            run_id=run_id,
            models_evaluated=list(dict.fromkeys(p.model for p in accepted)),
            owner=owner,
            source=source[:300],
            image=image,
            dataset_ids=list(rows),
            refused=[asdict(r) for r in refused],
        )
        items = []
        for p in accepted:
            row = rows[p.instance_id]
            item = {
                "line": p.line,
                "instance_id": p.instance_id,
                "model": p.model,
                "patch_is_none": p.patch is None,
                "empty": is_empty(p.patch),
                "task": "",
                "attempt": None,
                "error": import_errors.get(p.instance_id, ""),
                "FAIL_TO_PASS": _tests(row, "FAIL_TO_PASS"),
                "PASS_TO_PASS": _tests(row, "PASS_TO_PASS"),
            }
            task = tasks.get(p.instance_id)
            if task is not None:
                item["task"] = task.slug
                item["attempt"] = _attempt_for(evaluation, task, p, owner).pk
            items.append(item)
        evaluation.items = items
        evaluation.save(update_fields=["items"])
    return Started(evaluation, notes)


def _numbers(numbers: list[int], most: int = 10) -> str:
    shown = ", ".join(map(str, numbers[:most]))
    return shown + (f" and {len(numbers) - most} more" if len(numbers) > most else "")


def _import_rows(
    rows: list[dict], repos_dir: Path | None, image: str
) -> tuple[dict[str, Task], dict[str, str], list[str]]:
    """Import these rows as `import_tasks` does; their tasks by instance id, and why each row
    that could not be imported was refused."""
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="predictions-", dir=settings.DATA_DIR) as scratch:
        path = Path(scratch) / "rows.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        report = import_path(path, repos_dir=repos_dir, image=image)
    errors = {}
    for source, reason in report.refused:
        number = int(source.rsplit(":", 1)[1])
        errors[str(rows[number - 1][KEY_ID])] = reason
    wanted = {f"swe-bench:{row[KEY_ID]}": str(row[KEY_ID]) for row in rows}
    tasks = {wanted[t.source_dir]: t for t in Task.objects.filter(source_dir__in=list(wanted))}
    notes = [f"image: {report.default_image} (the default)"] if report.default_image else []
    return tasks, errors, notes


def _attempt_for(evaluation: Evaluation, task: Task, p: Prediction, owner) -> Attempt:
    """The prediction's attempt: the patch agent applying its patch, queued (on commit); or,
    for an empty patch, a record that ends at once with the reason."""
    label = p.model[:100]
    labels = {"run": evaluation.run_id, "model": p.model[:200], "instance_id": p.instance_id}
    if is_empty(p.patch):
        attempt = services.numbered_attempt(
            task,
            agent=label,
            status=Status.FINISHED,
            outcome=Outcome.FAILED,
            score=0.0,
            failure_reason=EMPTY_REASON,
            finished_at=timezone.now(),
            base_commit=task.base_commit,
            evaluation=evaluation,
            owner=owner,
            labels={**labels, "patch": "empty"},
        )
        Timeline(attempt.pk).add(
            EventKind.LIFECYCLE,
            status=Status.FINISHED,
            outcome=Outcome.FAILED,
            reason=EMPTY_REASON,
            message=f"finished: {EMPTY_REASON}",
        )
        return attempt
    patch = p.patch.encode("utf-8", errors="replace")
    [attempt] = services.attempts_create(task=task, agent="patch", files={PATCH_FILE: patch})
    Attempt.objects.filter(pk=attempt.pk).update(
        agent=label, evaluation=evaluation, owner=owner, labels=labels
    )
    return attempt


# --- following and finishing --------------------------------------------------------------------
def attempt_ids(evaluation: Evaluation) -> list[int]:
    return [i["attempt"] for i in evaluation.items if i.get("attempt")]


def progress(evaluation: Evaluation) -> tuple[int, int]:
    """(attempts ended, attempts) of an evaluation."""
    ids = attempt_ids(evaluation)
    done = Attempt.objects.filter(pk__in=ids, status__in=DONE_STATUSES).count()
    return done, len(ids)


def evaluation_refresh(evaluation: Evaluation) -> Evaluation:
    """Once every attempt has ended, build and keep the report (a compare-and-set: once). A
    patch that did not apply has its reason already: the runner's verdict gives it."""
    if evaluation.state == Evaluation.State.FINISHED:
        return evaluation
    done, total = progress(evaluation)
    if done < total:  # a count: cheap enough to ask every second
        return evaluation
    snapshot = evaluation_snapshot(evaluation)
    if any(e["attempt"] and e["attempt"]["status"] not in DONE_STATUSES for e in snapshot):
        return evaluation  # an attempt deleted and made again meanwhile: not yet
    report = build_report(evaluation_facts(evaluation), snapshot)
    Evaluation.objects.filter(pk=evaluation.pk, state=Evaluation.State.RUNNING).update(
        state=Evaluation.State.FINISHED, report=report, finished_at=timezone.now()
    )
    evaluation.refresh_from_db()
    return evaluation


def on_attempt_ended(sender, *, attempt_id: int, **kwargs) -> None:
    """Subscribed to "an attempt ended" (core/ended.py): the report of the evaluation the
    attempt belongs to, once its last attempt has ended."""
    evaluation = Evaluation.objects.filter(attempts__pk=attempt_id).first()
    if evaluation is not None:
        evaluation_refresh(evaluation)


def evaluation_facts(evaluation: Evaluation) -> dict:
    return {
        "id": evaluation.pk,
        "run_id": evaluation.run_id,
        "models": evaluation.models_evaluated,
        "dataset_ids": evaluation.dataset_ids,
        "refused": evaluation.refused,
        "url": evaluation.get_absolute_url(),
    }


def evaluation_snapshot(evaluation: Evaluation) -> list[dict]:
    """Each prediction (its item) with what its attempt recorded: status, outcome, reason,
    whether its patch applied, and the last check's test outcomes. A few queries in all."""
    ids = attempt_ids(evaluation)
    attempts = {
        a.pk: a
        for a in Attempt.objects.filter(pk__in=ids)
        .select_related("task")
        .only("id", "number", "status", "outcome", "failure_reason", "task__slug", "labels")
    }
    tests = _last_tests(ids)
    exits = _agent_exits(ids)
    snapshot = []
    for item in evaluation.items:
        attempt = attempts.get(item.get("attempt"))
        entry = {"item": item, "attempt": None}
        if attempt is not None:
            exit_code, stderr = exits.get(attempt.pk, (None, ""))
            applied = None if exit_code is None else exit_code == 0
            entry["attempt"] = {
                "id": attempt.pk,
                "name": attempt.name,
                "url": reverse("attempts:attempt", args=[attempt.pk]),
                "status": attempt.status,
                "outcome": attempt.outcome,
                "failure_reason": attempt.failure_reason,
                "applied": applied,
                "not_applied": not_applied_reason(stderr) if exit_code == PATCH_NOT_APPLIED else "",
                "tests": tests.get(attempt.pk),
            }
            if exit_code is not None and exit_code != 0 and exit_code != PATCH_NOT_APPLIED:
                entry["attempt"]["not_applied"] = f"the patch agent exited {exit_code}"
        snapshot.append(entry)
    return snapshot


def _last_tests(ids: list[int]) -> dict[int, dict[str, str]]:
    """Each attempt's last check's test outcomes by name (None-free: no check, no entry)."""
    last: dict[int, int] = {}
    for attempt_id, check_id in (
        CheckResult.objects.filter(attempt_id__in=ids)
        .order_by("created_at", "pk")
        .values_list("attempt_id", "pk")
    ):
        last[attempt_id] = check_id
    outcomes: dict[int, dict[str, str]] = {a: {} for a in last}
    by_check = {c: a for a, c in last.items()}
    for check_id, name, outcome in TestOutcome.objects.filter(
        check_result_id__in=list(by_check)
    ).values_list("check_result_id", "name", "outcome"):
        outcomes[by_check[check_id]][name] = outcome
    return outcomes


def _agent_exits(ids: list[int]) -> dict[int, tuple[int | None, str]]:
    """How each attempt's agent step ended: exit code and the head of its error output."""
    found = {}
    events = Event.objects.filter(
        attempt_id__in=ids, kind=EventKind.EXEC, actor=Actor.AGENT, data__phase="end"
    ).order_by("attempt_id", "seq")
    for event in events:
        if event.data.get("step") == "agent" and event.attempt_id not in found:
            stderr = (event.data.get("stderr") or {}).get("head", "")
            found[event.attempt_id] = (event.data.get("exit_code"), stderr)
    return found


def classify(entry: dict) -> tuple[str, str]:
    """A prediction's result (resolved, unresolved, empty, error, or running) and why."""
    item, attempt = entry["item"], entry["attempt"]
    if item["empty"]:
        return "empty", EMPTY_REASON
    if item["error"]:
        return "error", f"its dataset row could not be imported: {item['error']}"
    if attempt is None:
        return "error", "its attempt was deleted" if item["attempt"] else "no attempt was made"
    if attempt["status"] not in DONE_STATUSES:
        return "running", attempt["status"]
    if attempt["outcome"] == Outcome.INFRA_ERROR:
        return "error", f"infrastructure error: {attempt['failure_reason']}"
    if attempt["outcome"] == Outcome.VERIFIER_ERROR:
        return "error", attempt["failure_reason"]
    if attempt["outcome"] == Outcome.CANCELLED:
        return "error", attempt["failure_reason"] or "cancelled"
    if attempt["applied"] is False:
        return "unresolved", attempt["not_applied"] or "patch did not apply"
    if attempt["outcome"] == Outcome.PASSED:
        return "resolved", ""
    return "unresolved", attempt["failure_reason"]


def tests_status(item: dict, tests: dict[str, str]) -> dict:
    """The harness's tests_status: each FAIL_TO_PASS and PASS_TO_PASS test under success
    (it passed in the check) or failure (anything else, including not run)."""
    status = {}
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        ok = [t for t in item[key] if tests.get(junit_name(t)) == "passed"]
        status[key] = {"success": ok, "failure": [t for t in item[key] if t not in ok]}
    status["FAIL_TO_FAIL"] = {"success": [], "failure": []}
    status["PASS_TO_FAIL"] = {"success": [], "failure": []}
    return status


def instance_report(entry: dict, result: str) -> dict:
    """The harness's per-instance report.json content (the value under the instance id)."""
    item, attempt = entry["item"], entry["attempt"]
    report = {
        "patch_is_None": item["patch_is_none"],
        "patch_exists": not item["patch_is_none"],
        "patch_successfully_applied": bool(attempt and attempt["applied"]),
        "resolved": result == "resolved",
    }
    if attempt and attempt["tests"] is not None:
        report["tests_status"] = tests_status(item, attempt["tests"])
    return report


def build_report(facts: dict, snapshot: list[dict]) -> dict:
    """The run report, with the harness's keys (make_run_report, schema_version 2), and
    Boltz's own under "boltz": each instance's result, reason, attempt and per-instance report,
    and the refused predictions. URLs are paths on the server."""
    ids: dict[str, set[str]] = {r: set() for r in (*RESULTS, "running")}
    instances = {}
    for entry in snapshot:
        item, attempt = entry["item"], entry["attempt"]
        result, reason = classify(entry)
        ids[result].add(item["instance_id"])
        required = item["FAIL_TO_PASS"] + item["PASS_TO_PASS"]
        tests = (attempt or {}).get("tests") or {}
        instances[item["instance_id"]] = {
            "model_name_or_path": item["model"],
            "line": item["line"],
            "result": result,
            "reason": reason,
            "task": item["task"],
            "attempt": attempt["name"] if attempt else None,
            "attempt_id": attempt["id"] if attempt else None,
            "url": attempt["url"] if attempt else None,
            "tests_passed": sum(1 for t in required if tests.get(junit_name(t)) == "passed"),
            "tests_required": len(required),
            "report": instance_report(entry, result),
        }
    submitted = {e["item"]["instance_id"] for e in snapshot}
    completed = ids["resolved"] | ids["unresolved"]
    return {
        "total_instances": len(facts["dataset_ids"]),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(ids["resolved"]),
        "unresolved_instances": len(ids["unresolved"]),
        "empty_patch_instances": len(ids["empty"]),
        "error_instances": len(ids["error"]),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(set(facts["dataset_ids"]) - submitted),
        "empty_patch_ids": sorted(ids["empty"]),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(ids["resolved"]),
        "unresolved_ids": sorted(ids["unresolved"]),
        "error_ids": sorted(ids["error"]),
        "schema_version": 2,
        "boltz": {
            "evaluation": facts["id"],
            "run_id": facts["run_id"],
            "models": facts["models"],
            "url": facts["url"],
            "instances": instances,
            "refused": facts["refused"],
        },
    }


def with_base_url(report: dict, base_url: str) -> dict:
    """A copy of a stored report with its URLs made absolute on `base_url`."""
    out = json.loads(json.dumps(report))
    extra = out.get("boltz", {})
    if extra.get("url"):
        extra["url"] = base_url + extra["url"]
    for instance in extra.get("instances", {}).values():
        if instance.get("url"):
            instance["url"] = base_url + instance["url"]
    return out


def report_filename(evaluation: Evaluation) -> str:
    """`{model_name_or_path}.{run_id}.json`, as the harness names it ("/" becomes "__")."""
    model = (evaluation.models_evaluated or ["None"])[0]
    return f"{model.replace('/', '__')}.{evaluation.run_id}.json"


def instance_report_paths(report: dict) -> dict[str, tuple[str, dict]]:
    """Where the harness keeps each completed instance's report.json, relative to its
    working folder (logs/run_evaluation/RUN/MODEL/INSTANCE/report.json), and its content."""
    extra = report["boltz"]
    out = {}
    for instance_id, info in extra["instances"].items():
        if info["result"] not in ("resolved", "unresolved"):
            continue
        model = info["model_name_or_path"].replace("/", "__")
        path = f"logs/run_evaluation/{extra['run_id']}/{model}/{instance_id}/report.json"
        out[instance_id] = (path, {instance_id: info["report"]})
    return out


def report_table(report: dict) -> str:
    """The report as a plain-text table, then the harness's summary lines."""
    extra = report["boltz"]
    rows = []
    for instance_id, info in sorted(extra["instances"].items()):
        judged = info["result"] in ("resolved", "unresolved")
        shown = info["reason"] if info["result"] != "empty" else ""
        result = info["result"] + (f": {shown}" if shown else "")
        tests = f"{info['tests_passed']}/{info['tests_required']}" if judged else "-"
        attempt = info["attempt"] or "-"
        rows.append(
            (
                instance_id,
                info["model_name_or_path"],
                result[:120],
                tests,
                attempt,
                info["url"] or "",
            )
        )
    head = ("instance", "model", "result", "tests", "attempt", "url")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(5)]
    lines = [
        "  ".join(str(v).ljust(w) for v, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
        for r in [head, *rows]
    ]
    for refusal in extra["refused"]:
        lines.append(f"refused line {refusal['line']}: {refusal['reason']}")
    lines += [
        f"Total instances: {report['total_instances']}",
        f"Instances submitted: {report['submitted_instances']}",
        f"Instances completed: {report['completed_instances']}",
        f"Instances incomplete: {len(report['incomplete_ids'])}",
        f"Instances resolved: {report['resolved_instances']}",
        f"Instances unresolved: {report['unresolved_instances']}",
        f"Instances with empty patches: {report['empty_patch_instances']}",
        f"Instances with errors: {report['error_instances']}",
        f"Predictions refused: {len(extra['refused'])}",
    ]
    return "\n".join(line.rstrip() for line in lines)


# --- runs on the dashboard ------------------------------------------------------------------------
def current_report(evaluation: Evaluation) -> dict:
    """The kept report once the run has finished; until then, the report as things stand
    (instances still going are "running" and in none of the harness's lists)."""
    if evaluation.report:
        return evaluation.report
    return build_report(evaluation_facts(evaluation), evaluation_snapshot(evaluation))


def evaluation_counts(evaluation: Evaluation) -> dict[str, int]:
    """Predictions by result: from the report once finished, else as they stand."""
    if evaluation.report:
        report = evaluation.report
        return {
            "resolved": report["resolved_instances"],
            "unresolved": report["unresolved_instances"],
            "empty": report["empty_patch_instances"],
            "error": report["error_instances"],
            "running": 0,
        }
    counts = dict.fromkeys((*RESULTS, "running"), 0)
    for entry in evaluation_snapshot(evaluation):
        counts[classify(entry)[0]] += 1
    return counts
