"""Task-level exports: attempt records, and training data a trainer loads as it is (SFT
conversations, preference pairs, RL rows; see training_formats.py).

Each line is built from an attempt and its timeline; docs/EXPORTS.md describes the formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from attempts.exports.bundle import attempt_record
from attempts.exports.trajectories import ORACLES
from attempts.models import Attempt, CheckResult, TestOutcome
from attempts.services.selectors import latest_checks

# Each format, and its flavours (the first is the default).
FLAVOURS = {
    "attempts": ("jsonl",),
    "sft": ("openai", "hf"),
    "pairs": ("dpo", "kto"),
    "rl": ("jsonl", "verl"),
}
FORMATS = tuple(FLAVOURS)
TRAINING = ("sft", "pairs", "rl")
# What a page offers: (format:flavour, label).
CHOICES = [
    (f"{fmt}:{flavour}", fmt if len(flavours) == 1 else f"{fmt} ({flavour})")
    for fmt, flavours in FLAVOURS.items()
    for flavour in flavours
]


class ExportRefused(ValueError):
    """An export asked for something that does not exist; the message lists what does."""


@dataclass(frozen=True)
class ExportSpec:
    """What to write: a format, its flavour, and which examples count."""

    fmt: str = "attempts"
    flavour: str = ""
    min_score: float | None = None  # sft: trainable at this score or more (else: passed)
    include_all: bool = False  # keep untrainable examples, with weight 0
    include_oracles: bool = False  # keep the reference and noop agents' attempts

    @classmethod
    def parse(cls, fmt: str, flavour: str | None = None, **options) -> ExportSpec:
        """`fmt` and `flavour`, or `fmt` as "format:flavour"; ExportRefused lists the valid
        ones."""
        if ":" in fmt and not flavour:
            fmt, flavour = fmt.split(":", 1)
        if fmt not in FLAVOURS:
            raise ExportRefused(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
        flavour = flavour or FLAVOURS[fmt][0]
        if flavour not in FLAVOURS[fmt]:
            raise ExportRefused(
                f"flavour {flavour!r} of {fmt}: choose one of {', '.join(FLAVOURS[fmt])}"
            )
        return cls(fmt, flavour, **options)

    @property
    def binary(self) -> bool:
        return self.fmt == "rl" and self.flavour == "verl"

    @property
    def has_meta(self) -> bool:
        """Metadata in a side file (OpenAI's format has no room for it)."""
        return self.fmt == "sft" and self.flavour == "openai"

    @property
    def suffix(self) -> str:
        return ".parquet" if self.binary else ".jsonl"


def select_attempts(
    attempts: QuerySet[Attempt],
    *,
    outcome: str | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[Attempt]:
    if outcome:
        attempts = attempts.filter(outcome=outcome)
    if agent:
        attempts = attempts.filter(agent=agent)
    if since:
        attempts = attempts.filter(created_at__gte=since)
    if until:
        attempts = attempts.filter(created_at__lt=until)
    return attempts.select_related("task").order_by("task__slug", "number")


def attempts_line(attempt: Attempt, check: CheckResult | None, tests: dict[str, str]) -> dict:
    record = attempt_record(attempt)
    record["check"] = (
        None
        if check is None
        else {
            "passed": check.passed,
            "score": check.score,
            "source": check.source,
            "mode": check.mode,
            "summary": check.summary,
            "problem": check.problem,
            "ignored_reward_files": check.ignored_reward_files,
            "tests_passed": check.tests_passed,
            "tests_total": check.tests_total,
            "tests": tests,
        }
    )
    return record


def _attempts_lines(batch: list[Attempt]) -> Iterator[dict]:
    """Attempt records with their last check: two queries per batch, not two per attempt."""
    checks = latest_checks([a.pk for a in batch])
    tests: dict[int, dict[str, str]] = {}
    outcomes = TestOutcome.objects.filter(check_result_id__in=[c.pk for c in checks.values()])
    for check_id, name, outcome in outcomes.values_list("check_result_id", "name", "outcome"):
        tests.setdefault(check_id, {})[name] = outcome
    for attempt in batch:
        check = checks.get(attempt.pk)
        yield attempts_line(attempt, check, tests.get(check.pk, {}) if check else {})


BATCH = 200
PARQUET = "application/vnd.apache.parquet"


def export_lines(attempts: QuerySet[Attempt], spec: ExportSpec | str) -> Iterator[bytes]:
    """The export's JSONL lines (not for parquet: see `write_export`)."""
    spec = ExportSpec.parse(spec) if isinstance(spec, str) else spec
    for line, _meta in export_rows(attempts, spec):
        yield _encode(line)


def export_meta_lines(attempts: QuerySet[Attempt], spec: ExportSpec) -> Iterator[bytes]:
    """The side file of an export whose format has no room for metadata (sft, openai)."""
    for _line, meta in export_rows(attempts, spec):
        yield _encode(meta)


def export_rows(attempts: QuerySet[Attempt], spec: ExportSpec) -> Iterator[tuple[dict, dict]]:
    """(line, metadata) per example, in the attempts' order."""
    if spec.fmt == "attempts":
        for line in _attempts_rows(attempts):
            yield line, {}
        return
    from attempts.exports import training_formats

    kept = attempts if spec.include_oracles else attempts.exclude(agent__in=ORACLES)
    yield from training_formats.rows(kept.defer("diff"), spec)


def _attempts_rows(attempts: QuerySet[Attempt]) -> Iterator[dict]:
    batch: list[Attempt] = []
    for attempt in attempts.defer("diff").iterator(chunk_size=BATCH):  # no line holds the diff
        batch.append(attempt)
        if len(batch) == BATCH:
            yield from _attempts_lines(batch)
            batch = []
    if batch:
        yield from _attempts_lines(batch)


def write_export(attempts: QuerySet[Attempt], spec: ExportSpec, out, meta=None) -> int:
    """Write the export to the binary file `out` (and its metadata to `meta`, when the format
    keeps it apart and a file is given); the number of examples written."""
    if spec.binary:
        from attempts.exports import training_formats

        rows = [line for line, _ in export_rows(attempts, spec)]
        out.write(training_formats.verl_parquet(rows))
        return len(rows)
    count = 0
    for line, extra in export_rows(attempts, spec):
        out.write(_encode(line))
        if meta is not None and spec.has_meta:
            meta.write(_encode(extra))
        count += 1
    return count


def why_empty(
    *,
    slug: str,
    task_attempts: QuerySet[Attempt],
    matched: QuerySet[Attempt],
    spec: ExportSpec,
    filters: dict,
) -> str:
    """Why an export of a task wrote no example, naming the filter or rule that removed what:
    `task_attempts` are all the task's attempts, `matched` those the filters kept."""
    total, count = task_attempts.count(), matched.count()
    if total == 0:
        return f"task {slug} has no attempts yet"
    if count == 0:
        given = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in filters.items() if v)
        return f"{total} attempt(s) of {slug}, none matched {given}"
    if not spec.include_oracles:
        agents = sorted(set(matched.values_list("agent", flat=True)))
        if set(agents) <= set(ORACLES):
            return (
                f"{count} attempt(s) matched, all oracle runs ({', '.join(agents)}): "
                "add --include-oracles"
            )
        matched = matched.exclude(agent__in=ORACLES)
    finished = matched.exclude(outcome="")
    if not finished.exists():
        return f"no attempt of task {slug} has finished ({count} matched, none ended yet)"
    if spec.fmt == "sft" and not spec.include_all:
        if spec.min_score is not None:
            if not finished.filter(score__gte=spec.min_score).exists():
                return (
                    f"{finished.count()} finished attempt(s), none scored {spec.min_score:g} or "
                    "more: lower --min-score, or --include-all keeps them with weight 0"
                )
        elif not finished.filter(outcome="passed").exists():
            return (
                f"{finished.count()} finished attempt(s), none passed (sft keeps passed ones): "
                "--min-score X or --include-all keeps others"
            )
    if spec.fmt == "pairs" and spec.flavour == "dpo":
        return (
            f"{finished.count()} finished attempt(s), but no group holds a passed attempt and "
            "one that scored lower: DPO pairs need both (kto takes single attempts)"
        )
    return (
        f"{finished.count()} finished attempt(s), none usable: each is masked (an infrastructure "
        "error, cancelled, unscored) or took no action (see the rl format's mask_reason)"
    )


def _encode(line: dict) -> bytes:
    return json.dumps(line, ensure_ascii=False).encode() + b"\n"
