"""The API's SWE-bench predictions evaluations (/api/evaluations): thin handlers over
predictions.py. The rows' repositories are found under the server's BOLTZ_SWEBENCH_REPOS."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from ninja import Router, Schema
from pydantic import Field

from attempts.api.errors import ERRORS
from attempts.api.fields import Body
from attempts.dispatch.errors import NotFound
from attempts.models import Evaluation
from attempts.services.predictions import (
    current_report,
    evaluation_refresh,
    evaluation_start,
    progress,
    report_filename,
    with_base_url,
)

router = Router(tags=["evaluations"])

# The body itself is bounded by Django's DATA_UPLOAD_MAX_MEMORY_SIZE; these bound its parts.
MAX_ITEMS = 50_000
MAX_TEXT = 64 * 1024 * 1024
Entries = (
    Annotated[list[Any], Field(max_length=MAX_ITEMS)] | Annotated[str, Field(max_length=MAX_TEXT)]
)


class EvaluationIn(Body):
    """`predictions`: a list of prediction objects, or the text of a predictions file (JSONL
    or JSON). `dataset`: the SWE-bench rows, as a list or as the text of a JSONL / JSON file."""

    predictions: Entries
    dataset: Entries
    run_id: str = Field("", max_length=100)
    image: str = Field("", max_length=300)


class RefusalOut(Schema):
    line: int
    instance_id: str
    reason: str


class EvaluationOut(Schema):
    id: int
    run_id: str
    models: list[str]
    state: str
    done: int
    total: int
    created_at: datetime
    finished_at: datetime | None
    refused: list[RefusalOut]
    url: str
    report_file: str
    report: dict[str, Any] | None


def _visible(user):
    return Evaluation.objects.all() if user.is_staff else Evaluation.objects.filter(owner=user)


def evaluation_out(request, evaluation: Evaluation) -> dict:
    base = request.build_absolute_uri("/")[:-1]
    done, total = progress(evaluation)
    finished = evaluation.state == Evaluation.State.FINISHED
    return {
        "id": evaluation.pk,
        "run_id": evaluation.run_id,
        "models": evaluation.models_evaluated,
        "state": evaluation.state,
        "done": done,
        "total": total,
        "created_at": evaluation.created_at,
        "finished_at": evaluation.finished_at,
        "refused": evaluation.refused,
        "url": base + evaluation.get_absolute_url(),
        "report_file": report_filename(evaluation),
        "report": with_base_url(current_report(evaluation), base) if finished else None,
    }


@router.post("", response={201: EvaluationOut, **ERRORS})
def create_evaluation(request, body: EvaluationIn):
    started = evaluation_start(
        predictions=body.predictions,
        dataset=body.dataset,
        run_id=body.run_id,
        image=body.image,
        repos_dir=None,  # the importer falls back to BOLTZ_SWEBENCH_REPOS
        owner=request.user,
        source="api",
    )
    return 201, evaluation_out(request, started.evaluation)


@router.get("/{evaluation_id}", response={200: EvaluationOut, **ERRORS})
def get_evaluation(request, evaluation_id: int):
    found = _visible(request.user).filter(pk=evaluation_id).first()
    if found is None:
        raise NotFound(f"no evaluation {evaluation_id}")
    return evaluation_out(request, evaluation_refresh(found))
