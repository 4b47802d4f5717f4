"""Training data a trainer loads as it is (docs/EXPORTS.md):

- `sft`, flavour `openai` (OpenAI's chat fine-tuning format: arguments as JSON strings, every
  tool result answering a call, metadata in a side file) or `hf` (arguments as objects, empty
  content as "", a `tools` list: what TRL's chat templates render);
- `pairs`, flavour `dpo` (`chosen` / `rejected` from attempts of one group with different
  outcomes) or `kto` (`completion` and `label`);
- `rl`, flavour `jsonl` (prompt and completion as chat messages, reward, passed, mask with a
  reason code, group, policy, per-message loss mask) or `verl` (parquet with verl's columns).

Every example ends on an assistant turn. Trainable by default: passed attempts (or at least
`min_score`), no masked outcome, at least one assistant turn; with `include_all` the rest are
kept with weight 0. Pure logic over the database (and pyarrow for parquet).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from itertools import islice

from django.db.models import QuerySet

from attempts.exports.bundle import tamper_record
from attempts.exports.trajectories import (
    SHELL_TOOL,
    Conversation,
    conversation,
    group_id,
    mask_of,
    openai_messages,
    policy_of,
)
from attempts.models import Attempt, Outcome

BATCH = 200
PAIRS_PER_GROUP = 32


def rows(attempts: QuerySet[Attempt], spec) -> Iterator[tuple[dict, dict]]:
    """(line, metadata) per example of a training format."""
    if spec.fmt == "sft" and not spec.include_all:  # only what may be trained on is read
        if spec.min_score is not None:
            attempts = attempts.filter(score__gte=spec.min_score)
        else:
            attempts = attempts.filter(outcome=Outcome.PASSED)
    examples = _examples(attempts, spec)
    if spec.fmt == "sft":
        for example in examples:  # never a conversation with no assistant turn
            if example.trainable or (spec.include_all and example.turns):
                meta = example.meta(spec)
                yield _sft(example, spec, meta), meta
    elif spec.fmt == "pairs":
        yield from (_dpo_pairs(list(examples)) if spec.flavour == "dpo" else _kto_rows(examples))
    elif spec.fmt == "rl":
        for example in examples:
            yield _rl(example, spec), example.meta(spec)


class Example:
    """One attempt as training data: its conversation, mask and whether it may be trained on."""

    def __init__(self, attempt: Attempt, spec):
        self.attempt = attempt
        self.convo: Conversation = conversation(attempt)
        self.turns = self.convo.trimmed()
        self.masked, self.mask_code, self.mask_detail = mask_of(attempt, self.convo)
        self.group = group_id(attempt)
        self.policy = policy_of(attempt)
        if spec.min_score is not None:
            good = attempt.score is not None and attempt.score >= spec.min_score
        else:
            good = attempt.outcome == Outcome.PASSED
        self.trainable = good and not self.masked and bool(self.turns)

    def meta(self, spec) -> dict:
        a, convo = self.attempt, self.convo
        return {
            "attempt_id": a.pk,
            "name": a.name,
            "number": a.number,
            "task": a.task.slug,
            "policy": self.policy,
            "agent": a.agent,
            "group_id": self.group,
            "outcome": a.outcome,
            "score": a.score,
            "trainable": self.trainable,
            "synthetic": list(convo.synthetic),
            "replaced_utf8": list(convo.replaced_utf8),
            "cut_off": list(convo.cut_off),
            "files_cut": list(convo.files_cut),
            "dropped_messages": convo.dropped,
            "tampered": a.tampered,
            "tamper": tamper_record(a),
        }


def _examples(attempts: QuerySet[Attempt], spec) -> Iterator[Example]:
    iterator = attempts.select_related("task").iterator(chunk_size=BATCH)
    while batch := list(islice(iterator, BATCH)):
        yield from (Example(a, spec) for a in batch)


def _sft(example: Example, spec, meta: dict) -> dict:
    messages = [*example.convo.prompt, *example.turns]
    if spec.flavour == "openai":
        messages = openai_messages(messages)
        if spec.include_all:
            weight = 1 if example.trainable else 0
            messages = [
                {**m, "weight": weight} if m["role"] == "assistant" else m for m in messages
            ]
        return {"messages": messages, "tools": [SHELL_TOOL], "parallel_tool_calls": False}
    line = {"messages": messages, "tools": [SHELL_TOOL], "metadata": meta}
    if spec.include_all:
        line["weight"] = 1 if example.trainable else 0
    return line


def _completion_mask(turns: list[dict]) -> list[int]:
    return [1 if m["role"] == "assistant" else 0 for m in turns]


def _rl(example: Example, spec) -> dict:
    a = example.attempt
    masked = example.masked
    completion = example.convo.turns  # every turn: the observations are the environment's
    return {
        "prompt": example.convo.prompt,
        "completion": completion,
        "tools": [SHELL_TOOL],
        "reward": None if masked else a.score,
        "passed": None if masked else a.outcome == Outcome.PASSED,
        "mask": masked,
        "mask_reason": example.mask_code,
        "mask_detail": example.mask_detail,
        "group_id": example.group,
        "policy": example.policy,
        "completion_mask": _completion_mask(completion),
        "task": a.task.slug,
        "attempt_id": a.pk,
        "number": a.number,
        "outcome": a.outcome,
        "score": a.score,
        "tampered": a.tampered,
        "tamper": tamper_record(a),
        "synthetic": list(example.convo.synthetic),
        "replaced_utf8": list(example.convo.replaced_utf8),
        "cut_off": list(example.convo.cut_off),
        "files_cut": list(example.convo.files_cut),
    }


def _scored(example: Example) -> bool:
    return not example.masked and bool(example.turns)


def _kto_rows(examples: Iterator[Example]) -> Iterator[tuple[dict, dict]]:
    for example in examples:
        if not _scored(example):
            continue
        a = example.attempt
        yield (
            {
                "prompt": example.convo.prompt,
                "completion": example.turns,
                "label": a.outcome == Outcome.PASSED,
                "tools": [SHELL_TOOL],
                "group_id": example.group,
                "attempt_id": a.pk,
                "score": a.score,
            },
            {},
        )


def _dpo_pairs(examples: list[Example]) -> Iterator[tuple[dict, dict]]:
    """Within each group: every passed attempt against every attempt that scored lower (at
    most PAIRS_PER_GROUP a group, best against worst first)."""
    groups: dict[str, list[Example]] = {}
    for example in examples:
        if _scored(example):
            groups.setdefault(example.group, []).append(example)
    for group, members in groups.items():
        chosen = sorted(
            (e for e in members if e.attempt.outcome == Outcome.PASSED),
            key=lambda e: (-e.attempt.score, e.attempt.number),
        )
        rejected = sorted(members, key=lambda e: (e.attempt.score, e.attempt.number))
        pairs = [(c, r) for c in chosen for r in rejected if r.attempt.score < c.attempt.score]
        for good, bad in pairs[:PAIRS_PER_GROUP]:
            yield (
                {
                    "prompt": good.convo.prompt,
                    "chosen": good.turns,
                    "rejected": bad.turns,
                    "tools": [SHELL_TOOL],
                    "group_id": group,
                    "chosen_attempt": good.attempt.pk,
                    "rejected_attempt": bad.attempt.pk,
                    "chosen_score": good.attempt.score,
                    "rejected_score": bad.attempt.score,
                },
                {},
            )


VERL_ABILITY = "coding-agent"


def verl_parquet(lines: list[dict]) -> bytes:
    """RL rows as verl's parquet: data_source, prompt, ability, reward_model, extra_info."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # an optional extra
        raise RuntimeError(
            "the verl flavour writes parquet, which needs pyarrow: pip install 'boltz[datasets]'"
        ) from None
    records = [
        {
            "data_source": f"boltz/{line['task']}",
            "prompt": [{"role": m["role"], "content": m["content"]} for m in line["prompt"]],
            "ability": VERL_ABILITY,
            "reward_model": {
                "style": "rule",
                "ground_truth": json.dumps({"task": line["task"], "reward": line["reward"]}),
            },
            "extra_info": {
                "index": index,
                "split": "train",
                "attempt_id": line["attempt_id"],
                "group_id": line["group_id"],
                "policy": line["policy"],
                "reward": line["reward"],
                "passed": line["passed"],
                "mask": line["mask"],
                "mask_reason": line["mask_reason"],
                "completion": json.dumps(line["completion"], ensure_ascii=False),
                "completion_mask": line["completion_mask"],
            },
        }
        for index, line in enumerate(lines)
    ]
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("index", pa.int64()),
                        ("split", pa.string()),
                        ("attempt_id", pa.int64()),
                        ("group_id", pa.string()),
                        ("policy", pa.string()),
                        ("reward", pa.float64()),
                        ("passed", pa.bool_()),
                        ("mask", pa.bool_()),
                        ("mask_reason", pa.string()),
                        ("completion", pa.string()),
                        ("completion_mask", pa.list_(pa.int8())),
                    ]
                ),
            ),
        ]
    )
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records, schema=schema), buffer)
    return buffer.getvalue()
