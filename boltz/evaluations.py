"""SWE-bench predictions evaluated by Boltz: the typed report `Client.evaluate` returns.

The report has the harness's own fields (`resolved_ids`, `unresolved_ids`, `empty_patch_ids`,
`error_ids`, the counts, ...), each instance's result with its attempt's link, and the refused
predictions with their line numbers. `report.write()` saves it as the harness does,
`{model_name_or_path}.{run_id}.json`.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boltz.errors import OperationTimeout
from boltz.types import _build, _list_of, _raw

__all__ = ["EvaluationReport", "InstanceResult", "PredictionRefusal"]


@dataclass
class PredictionRefusal:
    """A prediction that was not evaluated: its line (for a list, its position) and why."""

    line: int = 0
    instance_id: str = ""
    reason: str = ""
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, data: Any) -> PredictionRefusal:
        return _build(cls, data)


@dataclass
class InstanceResult:
    """One prediction's result: `resolved`, `unresolved`, `empty` or `error` (infrastructure),
    why, its attempt (`TASK #N`, id and page) and the required tests that passed. `report` is
    the harness's per-instance report.json content (`tests_status` and the rest)."""

    instance_id: str = ""
    model_name_or_path: str = ""
    line: int = 0
    result: str = ""
    reason: str = ""
    task: str = ""
    attempt: str | None = None
    attempt_id: int | None = None
    url: str | None = None
    tests_passed: int = 0
    tests_required: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = _raw()

    @property
    def resolved(self) -> bool:
        return self.result == "resolved"

    @classmethod
    def from_json(cls, data: Any) -> InstanceResult:
        return _build(cls, data)


@dataclass
class EvaluationReport:
    """An evaluation of predictions: its state and, once `finished`, the harness's report."""

    id: int | None = None
    run_id: str = ""
    models: list[str] = field(default_factory=list)
    state: str = ""
    done: int = 0
    total: int = 0
    url: str = ""
    report_file: str = ""
    refused: list[PredictionRefusal] = field(default_factory=list)
    total_instances: int = 0
    submitted_instances: int = 0
    completed_instances: int = 0
    resolved_instances: int = 0
    unresolved_instances: int = 0
    empty_patch_instances: int = 0
    error_instances: int = 0
    completed_ids: list[str] = field(default_factory=list)
    incomplete_ids: list[str] = field(default_factory=list)
    empty_patch_ids: list[str] = field(default_factory=list)
    submitted_ids: list[str] = field(default_factory=list)
    resolved_ids: list[str] = field(default_factory=list)
    unresolved_ids: list[str] = field(default_factory=list)
    error_ids: list[str] = field(default_factory=list)
    instances: dict[str, InstanceResult] = field(default_factory=dict)
    harness: dict[str, Any] | None = None  # the report as the harness writes it
    raw: dict[str, Any] = _raw()

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    def write(self, folder: str | os.PathLike[str] = ".") -> Path:
        """Save the report as the harness does: FOLDER/{model}.{run_id}.json."""
        if self.harness is None:
            raise ValueError(f"evaluation {self.id} has not finished: no report yet")
        target = Path(folder) / self.report_file
        target.write_text(json.dumps(self.harness, indent=4) + "\n", encoding="utf-8")
        return target

    @classmethod
    def from_json(cls, data: Any) -> EvaluationReport:
        data = data if isinstance(data, dict) else {}
        report = data.get("report") if isinstance(data.get("report"), dict) else None
        values = {k: v for k, v in (report or {}).items() if k != "boltz"}
        instances = ((report or {}).get("boltz") or {}).get("instances") or {}
        built = _build(cls, {**values, **data}, refused=_list_of(PredictionRefusal))
        built.harness = report
        built.instances = {
            key: InstanceResult.from_json({"instance_id": key, **value})
            for key, value in instances.items()
            if isinstance(value, dict)
        }
        return built


def evaluation_input(value: Any) -> list[Any] | str:
    """Predictions or dataset rows as the API takes them: a list of objects as it is, the text
    of a JSONL / JSON file as it is, or a path (str or PathLike) read as text."""
    if isinstance(value, os.PathLike):
        return Path(value).read_text(encoding="utf-8")
    if isinstance(value, str):
        stripped = value.lstrip()
        if "\n" in value.strip() or stripped.startswith(("{", "[")):
            return value
        return Path(value).read_text(encoding="utf-8")
    if isinstance(value, Mapping):  # one prediction, or SWE-agent's {instance_id: prediction}
        if "instance_id" in value:
            return [dict(value)]
        return [{"instance_id": key, **dict(item)} for key, item in value.items()]
    if isinstance(value, Iterable):
        return [dict(v) if isinstance(v, Mapping) else v for v in value]
    raise TypeError(f"give a list of objects, a path or the text of a file, not {value!r}")


class Waiting:
    """Polling an evaluation until it finishes: `pause(report)` gives the seconds to sleep
    before asking again, or raises OperationTimeout once `timeout` has passed."""

    POLL_SECONDS = 1.0

    def __init__(self, timeout: float | datetime.timedelta) -> None:
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        self.timeout = float(timeout)
        self.deadline = time.monotonic() + self.timeout

    def pause(self, report: EvaluationReport) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OperationTimeout(
                f"evaluation {report.id} ({report.run_id}) did not finish within "
                f"{self.timeout:g}s: {report.done} of {report.total} attempts ended; it goes "
                f"on at {report.url} (client.evaluation({report.id}, wait=True) waits again)"
            )
        return min(self.POLL_SECONDS, left)
