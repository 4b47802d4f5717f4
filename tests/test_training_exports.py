"""The training exports (`export_task --format sft|pairs|rl --flavour ...`) as trainers read them,
on real attempts (the session's worker, Docker, a web server process for one API agent):

- the sft openai file keeps every rule of OpenAI's chat fine-tuning format (tests/openai_chat_rules.py);
- Hugging Face `datasets` loads every format and flavour with the right number of rows;
- the hf flavour renders through TRL's shipped chat templates (qwen2_5, qwen3, llama3_1, gptoss),
  each command once per call and never JSON-encoded twice;
- TRL's SFTTrainer (assistant_only_loss=True) and GRPOTrainer (a reward function reading the
  rows' `reward` and `mask` columns) each run a step on a tiny random model, on CPU, offline;
- the verl flavour has verl's columns and types;
- every token trained on (the tokenizer's assistant mask) is a command or message the agent
  really produced, as its timeline has it.

Needs the `train` extra (`pip install -e '.[train]' torch==2.13.0`); without it the tests that
need it are skipped, and with CI=true they fail. Nothing is downloaded: the tokenizer is trained
on the fly, the model is a randomly initialised tiny Llama.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

# Read by huggingface_hub / datasets / transformers when they are imported: set before that.
_HF_HOME = tempfile.mkdtemp(prefix="boltz-test-hf-")
atexit.register(shutil.rmtree, _HF_HOME, ignore_errors=True)
os.environ.update(
    {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": _HF_HOME,
        "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets"),
        "WANDB_DISABLED": "true",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "",
        "TRL_EXPERIMENTAL_SILENCE": "1",
    }
)

import pytest  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402

from tests import openai_chat_rules  # noqa: E402
from tests.conftest import (  # noqa: E402
    EXAMPLES,
    containers_of,
    require,
    sdk_client,
    wait_finished,
)

# transaction=True: the module's attempts are written (committed) once, for the worker to see,
# by a module-scoped fixture; each test's end empties the database, as for every real test.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.train,
    pytest.mark.docker,
    pytest.mark.worker,
    pytest.mark.timeout(300),
]

ORACLES = ("reference", "noop")
SLUG = "fix-add"
# Two different fixes (one with quotes, backslashes and a non-ASCII character, to catch an
# argument encoded twice), two failures.
PASSING = [
    "sed -i 's/a - b/a + b/' calc.py",
    "python3 -c \"import pathlib; p = pathlib.Path('calc.py'); "
    'p.write_text(p.read_text().replace(\'a - b\', \'a + b\'))" && echo "fixed \\"add\\" → a+b"',
]
FAILING = ["cat calc.py", "sed -i 's/a - b/a * b/' calc.py"]
API_MESSAGES = [
    "I will read calc.py first, then fix add().",
    'add() subtracted: it now returns "a + b" — running the tests.',
]
TEMPLATES = ("qwen2_5", "qwen3", "llama3_1", "gptoss")
TRAINER_ARGS = {
    "max_steps": 1,
    "learning_rate": 1e-3,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "use_cpu": True,
    "bf16": False,
    "fp16": False,
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": False,
    "disable_tqdm": True,
    "seed": 0,
}
# (format, flavour, extra options): what the module exports once, by name.
EXPORTS = {
    "sft_openai": ("sft", "openai", []),
    "sft_openai_all": ("sft", "openai", ["--include-all"]),
    "sft_hf": ("sft", "hf", []),
    "pairs_dpo": ("pairs", "dpo", []),
    "pairs_kto": ("pairs", "kto", []),
    "rl_jsonl": ("rl", "jsonl", []),
    "rl_jsonl_oracles": ("rl", "jsonl", ["--include-oracles"]),
    "rl_verl": ("rl", "verl", []),
}


def _need(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        require(False, f"{name} is not installed ({exc}): pip install -e '.[train]' torch==2.13.0")


@pytest.fixture(scope="module")
def hf():
    """The training packages (skipped without them; a failure with CI=true)."""
    mods = SimpleNamespace(
        datasets=_need("datasets"),
        pyarrow=_need("pyarrow"),
        torch=_need("torch"),
        transformers=_need("transformers"),
        trl=_need("trl"),
        tokenizers=_need("tokenizers"),
    )
    mods.torch.set_num_threads(2)
    mods.templates = Path(mods.trl.__file__).parent / "chat_templates"
    return mods


# --- the real attempts, and their exports ------------------------------------------------------
def _api_attempt(web) -> int:
    """An API agent's session: a message, two commands, a message, a last command (whose
    result is the trailing tool message every export drops), then the check."""
    with sdk_client(web, "trainee") as client, client.sandbox(SLUG, agent="api-trainee") as box:
        box.message("assistant", API_MESSAGES[0])
        box.exec("cat calc.py")
        box.exec(PASSING[0])
        box.message("assistant", API_MESSAGES[1])
        box.exec("python3 -m pytest -q -p no:cacheprovider tests")
        box.close(check=True)
        return box.id


OTHER = "text-utils"  # a second task: its pairs' chosen of the other shape (file writes)
FIXES = {
    'text = re.sub(r"[^a-z0-9]+", "-", text)': 'text = re.sub(r"[^a-z0-9]+", "-", text.lower())',
    'return len(text.split(" "))': "return len(text.split())",
    'return text[:width] + "..."': 'return text[: max(width - 3, 0)] + "..."',
}


def _writing_attempts(web) -> list[int]:
    """Two API agents of OTHER that change files only through the API (no command): one
    writes the fix and passes, one writes a wrong file and fails."""
    source = (EXAMPLES / OTHER / "repo" / "textutils.py").read_text()
    for old, new in FIXES.items():
        source = source.replace(old, new)
    done = []
    with sdk_client(web, "writer") as client:
        with client.sandbox(OTHER, agent="api-writer") as box:
            box.files.write("textutils.py", source)
            box.message("assistant", "Wrote the fix.")
            box.close(check=True)
            done.append(box.id)
        with client.sandbox(OTHER, agent="api-writer") as box:
            box.files.write("NOTES.md", "slugify: look at it later\n")
            box.message("assistant", "Left a note.")
            box.close(check=True)
            done.append(box.id)
    return done


def _plain(attempt) -> dict:
    """What the tests compare with: the attempt and its agent's actions, from its timeline."""
    from attempts.models import EventKind

    actions = []
    for event in attempt.events.filter(actor="agent").order_by("seq"):
        if event.kind == EventKind.EXEC and event.data.get("phase") == "start":
            actions.append(("exec", event.data["command"]))
        elif event.kind == EventKind.MESSAGE:
            actions.append((event.data.get("role", "assistant"), event.data.get("text", "")))
        elif event.kind == EventKind.FILE and event.data.get("action") == "write":
            actions.append(("write", event.data["path"], event.data["content"]))
    return {
        "id": attempt.pk,
        "agent": attempt.agent,
        "outcome": attempt.outcome,
        "score": attempt.score,
        "actions": actions,
    }


@pytest.fixture(scope="module")
def exported(django_db_setup, django_db_blocker, worker, web, tmp_path_factory):
    from attempts.models import Attempt
    from attempts.run.docker import runtime
    from attempts.services.attempts import attempt_create
    from attempts.taskio.folders import load_task_dir

    out = tmp_path_factory.mktemp("training-exports")
    with django_db_blocker.unblock():
        task, _ = load_task_dir(EXAMPLES / SLUG)
        load_task_dir(EXAMPLES / OTHER)
        api_id = _api_attempt(web)
        writers = _writing_attempts(web)
        queued = [attempt_create(task=task, agent="command", command=c) for c in PASSING + FAILING]
        queued += [attempt_create(task=task, agent=a) for a in ORACLES]
        finished = wait_finished([Attempt.objects.get(pk=api_id), *queued], timeout=150)
        attempts = {a.pk: _plain(a) for a in finished}
        others = {a.pk: _plain(a) for a in Attempt.objects.filter(pk__in=writers)}
        files, messages = {}, {}
        for name, (fmt, flavour, extra) in EXPORTS.items():
            path = out / (name + (".parquet" if flavour == "verl" else ".jsonl"))
            said = io.StringIO()
            call_command(
                "export_task", SLUG, "--format", fmt, "--flavour", flavour, *extra,
                "-o", str(path), stdout=said,
            )  # fmt: skip
            files[name], messages[name] = path, said.getvalue()
        for name in ("sft_hf", "pairs_dpo", "pairs_kto", "rl_jsonl"):
            fmt, flavour, extra = EXPORTS[name]
            path = out / "other" / f"{name}.jsonl"
            path.parent.mkdir(exist_ok=True)
            call_command(
                "export_task", OTHER, "--format", fmt, "--flavour", flavour, *extra,
                "-o", str(path), stdout=io.StringIO(),
            )  # fmt: skip
            files[f"other_{name}"] = path
    try:
        yield SimpleNamespace(
            task=task, attempts=attempts, others=others, files=files, messages=messages
        )
    finally:
        with django_db_blocker.unblock():
            for pk in [*attempts, *others]:
                for container in containers_of(pk):
                    runtime.remove_container(container["id"])
            # As a transactional test leaves it: the next module starts on an empty database.
            call_command("flush", interactive=False, verbosity=0)


def meta_of(path: Path) -> Path:
    """The side file of an sft openai export: OUT.meta.jsonl beside OUT.jsonl (the spec's
    FILE.meta.jsonl read literally, OUT.jsonl.meta.jsonl, is accepted too)."""
    found = [p for p in (path.with_suffix(".meta.jsonl"), Path(f"{path}.meta.jsonl")) if p.exists()]
    assert len(found) == 1, f"one metadata file beside {path}: {found}"
    return found[0]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def expected(exported, *, oracles=False, passed_only=False) -> list[dict]:
    """The attempts an export keeps, as the spec has it."""
    return [
        a
        for a in exported.attempts.values()
        if (oracles or a["agent"] not in ORACLES) and (not passed_only or a["outcome"] == "passed")
    ]


def ids(rows, key="attempt_id") -> list:
    return sorted(r[key] for r in rows)


def test_the_real_attempts_came_out_as_planned(exported):
    by_outcome = {}
    for a in exported.attempts.values():
        by_outcome.setdefault(a["outcome"], []).append(a["agent"])
    assert sorted(by_outcome["passed"]) == ["api-trainee", "command", "command", "reference"]
    assert sorted(by_outcome["failed"]) == ["command", "command", "noop"]
    api = next(a for a in exported.attempts.values() if a["agent"] == "api-trainee")
    assert [kind for kind, _ in api["actions"]] == [
        "assistant",
        "exec",
        "exec",
        "assistant",
        "exec",
    ]


# --- 1. OpenAI's chat fine-tuning format --------------------------------------------------------
def test_the_openai_flavour_keeps_every_rule_of_openais_chat_fine_tuning_format(exported):
    trainable = ids(expected(exported, passed_only=True), "id")
    rows = lines(exported.files["sft_openai"])
    meta = lines(meta_of(exported.files["sft_openai"]))
    assert len(rows) == len(meta) == len(trainable)
    assert ids(meta) == trainable
    for row, info in zip(rows, meta, strict=True):
        openai_chat_rules.check(row)
        assert row["parallel_tool_calls"] is False and row["messages"][-1]["role"] == "assistant"
        assert info["trainable"] is True and info["task"] == SLUG
        assert set(info["synthetic"]) >= {"system_prompt", "tools"}
        calls = [m for m in row["messages"] if m.get("tool_calls")]
        assert calls and all("content" not in m for m in calls)
        commands = [json.loads(m["tool_calls"][0]["function"]["arguments"]) for m in calls]
        actions = exported.attempts[info["attempt_id"]]["actions"]
        assert commands == [{"command": c} for kind, c in actions if kind == "exec"]

    everything = lines(exported.files["sft_openai_all"])
    everything_meta = lines(meta_of(exported.files["sft_openai_all"]))
    assert ids(everything_meta) == ids(expected(exported), "id")
    for row, info in zip(everything, everything_meta, strict=True):
        openai_chat_rules.check(row)
        weights = {m.get("weight") for m in row["messages"] if m["role"] == "assistant"}
        assert weights == ({1} if info["trainable"] else {0}), info
        assert info["trainable"] == (info["outcome"] == "passed")


def _example(**changes) -> dict:
    example = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "[exit code 0]\na"},
            {"role": "assistant", "content": "done", "weight": 1},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "shell",
                    "parameters": {"type": "object", "properties": {}, "required": ["command"]},
                },
            }
        ],
        "parallel_tool_calls": False,
    }
    example.update(changes)
    return example


def _broken(edit) -> list[str]:
    example = _example()
    edit(example)
    return openai_chat_rules.problems(example)


def test_the_openai_rules_pass_a_good_example_and_catch_broken_ones():
    assert openai_chat_rules.problems(_example()) == []
    m = lambda i: lambda e: e["messages"][i]  # noqa: E731
    cases = {
        "arguments is a JSON string": lambda e: m(2)(e)["tool_calls"][0]["function"].update(
            arguments={"command": "ls"}
        ),
        "is not JSON": lambda e: m(2)(e)["tool_calls"][0]["function"].update(arguments="ls -l"),
        "names no earlier call": lambda e: m(3)(e).update(tool_call_id="call_9"),
        "not answered before this assistant turn": lambda e: e["messages"].pop(3),
        "weight is 0 or 1": lambda e: m(4)(e).update(weight=0.5),
        "unknown key 'weight' on a user message": lambda e: m(1)(e).update(weight=1),
        "unknown key 'metadata' in the example": lambda e: e.update(metadata={}),
        "content is a string": lambda e: m(4)(e).update(content=None),
        "at least one assistant message": lambda e: e.update(messages=e["messages"][:2]),
        "role 'developer'": lambda e: m(0)(e).update(role="developer"),
        "not among the declared tools": lambda e: m(2)(e)["tool_calls"][0]["function"].update(
            name="bash"
        ),
        "required argument(s) ['command'] missing": lambda e: m(2)(e)["tool_calls"][0][
            "function"
        ].update(arguments="{}"),
        "parameters is a JSON schema": lambda e: e["tools"][0]["function"].pop("parameters"),
        "unknown key 'name' on a tool message": lambda e: m(3)(e).update(name="shell"),
        "was answered already": lambda e: e["messages"].insert(4, dict(m(3)(e))),
        "parallel_tool_calls false": lambda e: m(2)(e)["tool_calls"].append(
            {**m(2)(e)["tool_calls"][0], "id": "call_2"}
        ),
    }
    for expected_problem, edit in cases.items():
        found = _broken(edit)
        assert any(expected_problem in p for p in found), (expected_problem, found)
    # a weight of True is not the integer 1 (bool is an int in Python)
    assert any("weight" in p for p in _broken(lambda e: m(4)(e).update(weight=True)))
    # a last call left unanswered is allowed: the example ends on the assistant's turn
    assert openai_chat_rules.problems(_example(messages=_example()["messages"][:3])) == []


# --- 2. datasets.load_dataset reads every format -----------------------------------------------
def test_datasets_loads_every_format_and_flavour_with_the_right_row_counts(hf, exported):
    passed = expected(exported, passed_only=True)
    every = expected(exported)
    failed = [a for a in every if a["outcome"] != "passed"]
    counts = {
        "sft_openai": len(passed),
        "sft_openai_all": len(every),
        "sft_hf": len(passed),
        "pairs_dpo": len(passed) * len(failed),  # one group: every pass over every failure
        "pairs_kto": len(every),
        "rl_jsonl": len(every),
        "rl_jsonl_oracles": len(expected(exported, oracles=True)),
        "rl_verl": len(every),
    }
    cache = Path(_HF_HOME) / "load"
    for name, path in exported.files.items():
        if name.startswith("other_"):
            continue  # the second task's: see the next test
        kind = "parquet" if path.suffix == ".parquet" else "json"
        ds = hf.datasets.load_dataset(
            kind, data_files=str(path), split="train", cache_dir=str(cache)
        )
        assert len(ds) == counts[name], (name, len(ds), counts[name])
    dpo = lines(exported.files["pairs_dpo"])
    assert all(r["chosen_score"] > r["rejected_score"] for r in dpo)
    assert {r["label"] for r in lines(exported.files["pairs_kto"])} == {True, False}


def test_two_tasks_files_load_in_one_call_and_train_a_step_together(
    hf, exported, tokenizer, tmp_path
):
    """fix-add's chosen are shell commands and their results; text-utils' chosen is an API
    client's file write and a message (it used to be the message alone, typed differently).
    Each format's files of both tasks load in one load_dataset call, in either order."""
    writer_pass, _writer_fail = sorted(exported.others)
    fixed = exported.others[writer_pass]
    assert fixed["outcome"] == "passed" and [a[0] for a in fixed["actions"]] == [
        "write",
        "assistant",
    ]
    dpo = lines(exported.files["other_pairs_dpo"])
    assert len(dpo) == 1 and dpo[0]["chosen_attempt"] == writer_pass
    [write_call] = [m for m in dpo[0]["chosen"] if m["tool_calls"]]
    command = write_call["tool_calls"][0]["function"]["arguments"]["command"]
    assert (
        command.startswith("cat > textutils.py <<'BOLTZ_EOF'\n")
        and FIXES['return len(text.split(" "))'] in command
    )  # the content the client wrote, not "Wrote the fix." alone
    assert dpo[0]["chosen"][-1]["content"] == "Wrote the fix."
    cache = str(Path(_HF_HOME) / "together")
    for name in ("sft_hf", "pairs_dpo", "pairs_kto", "rl_jsonl"):
        pair = [str(exported.files[name]), str(exported.files[f"other_{name}"])]
        for files in (pair, pair[::-1]):
            ds = hf.datasets.load_dataset("json", data_files=files, split="train", cache_dir=cache)
            assert len(ds) == sum(len(lines(Path(f))) for f in files), name
    both = hf.datasets.load_dataset(
        "json",
        data_files=[str(exported.files["other_sft_hf"]), str(exported.files["sft_hf"])],
        split="train",
        cache_dir=cache,
    )
    assert OTHER in both["metadata"][0]["task"]
    tok = _copy(tokenizer, _template(hf, "qwen3"))
    args = hf.trl.SFTConfig(
        output_dir=str(tmp_path / "sft-two"),
        assistant_only_loss=True,
        per_device_train_batch_size=2,
        max_length=2048,
        **TRAINER_ARGS,
    )
    trainer = hf.trl.SFTTrainer(
        model=_tiny_model(hf, tok), args=args, train_dataset=both, processing_class=tok
    )
    assert trainer.train().global_step == 1


def test_a_filter_matching_nothing_writes_an_empty_file_and_says_so(load_example, tmp_path):
    load_example(SLUG)
    for fmt, flavour in (("sft", "hf"), ("pairs", "dpo"), ("rl", "jsonl"), ("rl", "verl")):
        out, said = tmp_path / f"{fmt}-{flavour}.out", io.StringIO()
        call_command(
            "export_task", SLUG, "--format", fmt, "--flavour", flavour,
            "--agent", "nobody", "-o", str(out), stdout=said,
        )  # fmt: skip
        assert said.getvalue().strip(), (fmt, flavour)
        if flavour == "verl" and out.stat().st_size:  # a parquet file of no rows is fine too
            import pyarrow.parquet as pq

            assert pq.read_table(out).num_rows == 0
        else:
            assert out.read_bytes() == b"", (fmt, flavour)
    with pytest.raises(CommandError, match="dpo, kto"):
        call_command("export_task", SLUG, "--format", "pairs", "--flavour", "nope", "-o", "-")


# --- a tokenizer of our own ---------------------------------------------------------------------
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
]


@pytest.fixture(scope="module")
def tokenizer(hf, exported):
    """A byte-level BPE tokenizer trained on the exports (anything is encodable anyway)."""
    tk = hf.tokenizers
    model = tk.Tokenizer(tk.models.BPE(unk_token=None))
    model.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIAL,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [exported.files["sft_hf"].read_text(), exported.files["rl_jsonl"].read_text()]
    model.train_from_iterator(corpus, trainer=trainer)
    return hf.transformers.PreTrainedTokenizerFast(
        tokenizer_object=model,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
    )


def _template(hf, name: str) -> str:
    return (hf.templates / f"{name}.jinja").read_text()


def _tiny_model(hf, tokenizer):
    hf.torch.manual_seed(0)
    config = hf.transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return hf.transformers.LlamaForCausalLM(config)


def _load(hf, path: Path):
    kind = "parquet" if path.suffix == ".parquet" else "json"
    cache = str(Path(_HF_HOME) / "load")
    return hf.datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=cache)


# --- 3. the hf flavour renders through TRL's shipped templates ---------------------------------
def test_the_hf_flavour_renders_through_trls_chat_templates_each_command_once(
    hf, exported, tokenizer
):
    ds = _load(hf, exported.files["sft_hf"])
    assert len(ds) == len(expected(exported, passed_only=True))
    for name in TEMPLATES:
        template = _template(hf, name)
        for row in ds:
            text = tokenizer.apply_chat_template(
                row["messages"], tools=row["tools"], chat_template=template, tokenize=False
            )
            commands = [
                call["function"]["arguments"]["command"]
                for m in row["messages"]
                for call in (m.get("tool_calls") or [])
            ]
            assert commands, row["metadata"]
            for command in set(commands):
                shown = '"command": ' + json.dumps(command, ensure_ascii=False)
                assert text.count(shown) == commands.count(command), (name, command, text)
            assert '\\"command\\"' not in text, (name, text)  # arguments encoded twice
            assert row["messages"][1]["content"] in text  # the instruction
            for m in row["messages"]:
                if m["role"] == "assistant" and m["content"]:
                    assert m["content"] in text, (name, m["content"])


# --- 4. SFTTrainer, assistant_only_loss ---------------------------------------------------------
def test_sft_trainer_with_assistant_only_loss_runs_a_step_on_the_hf_file(
    hf, exported, tokenizer, tmp_path
):
    from trl.chat_template_utils import get_training_chat_template

    tokenizer = _copy(tokenizer, _template(hf, "qwen3"))
    ds = _load(hf, exported.files["sft_hf"])
    model = _tiny_model(hf, tokenizer)
    args = hf.trl.SFTConfig(
        output_dir=str(tmp_path / "sft"),
        assistant_only_loss=True,
        per_device_train_batch_size=2,
        max_length=2048,
        **TRAINER_ARGS,
    )
    trainer = hf.trl.SFTTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tokenizer
    )
    # qwen3's template has no {% generation %} markers: TRL swaps in its training template
    assert trainer.chat_template == get_training_chat_template(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    result = trainer.train()
    assert result.global_step == 1 and hf.torch.isfinite(hf.torch.tensor(result.training_loss))
    assert any(not hf.torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _copy(tokenizer, template: str):
    import copy

    fresh = copy.deepcopy(tokenizer)
    fresh.chat_template = template
    return fresh


# --- 5. verl ------------------------------------------------------------------------------------
def test_the_verl_flavour_has_verls_columns_and_types(hf, exported):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(exported.files["rl_verl"])
    schema = table.schema
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(schema.names)
    assert pa.types.is_string(schema.field("data_source").type)
    assert pa.types.is_string(schema.field("ability").type)
    prompt = schema.field("prompt").type
    assert pa.types.is_list(prompt) and pa.types.is_struct(prompt.value_type)
    assert {prompt.value_type.field(i).name for i in range(prompt.value_type.num_fields)} >= {
        "role",
        "content",
    }
    reward_model = schema.field("reward_model").type
    assert pa.types.is_struct(reward_model)
    assert pa.types.is_string(reward_model.field("style").type)
    assert pa.types.is_string(reward_model.field("ground_truth").type)
    extra = schema.field("extra_info").type
    assert pa.types.is_struct(extra)
    fields = {extra.field(i).name: extra.field(i).type for i in range(extra.num_fields)}
    for name in ("index", "split", "attempt_id", "group_id", "policy", "reward", "passed"):
        assert name in fields, (name, fields)
    for name in ("mask", "mask_reason", "completion"):
        assert name in fields, (name, fields)
    assert pa.types.is_integer(fields["index"]) and pa.types.is_boolean(fields["mask"])
    assert pa.types.is_string(fields["completion"]) and pa.types.is_floating(fields["reward"])
    rows = table.to_pylist()
    assert len(rows) == len(expected(exported))
    jsonl = {r["attempt_id"]: r for r in lines(exported.files["rl_jsonl"])}
    for i, row in enumerate(rows):
        assert row["data_source"] == f"boltz/{SLUG}" and row["ability"] == "coding-agent"
        assert row["reward_model"]["style"] == "rule"
        json.loads(row["reward_model"]["ground_truth"])
        info = row["extra_info"]
        assert info["index"] == i
        same = jsonl[info["attempt_id"]]
        assert json.loads(info["completion"]) == same["completion"]
        assert [{"role": m["role"], "content": m["content"]} for m in row["prompt"]] == [
            {"role": m["role"], "content": m["content"]} for m in same["prompt"]
        ]
        assert (info["reward"], info["passed"], info["mask"]) == (
            same["reward"],
            same["passed"],
            same["mask"],
        )


# --- 6. GRPO reads the RL rows as documented ----------------------------------------------------
def documented_reward(prompts, completions, reward, mask, **kwargs):
    """docs/EXPORTS.md's reward function for GRPOTrainer: the recorded reward, none where masked."""
    return [None if m else r for r, m in zip(reward, mask, strict=True)]


def test_a_grpo_reward_function_reads_the_rl_rows_as_documented(hf, exported, tokenizer, tmp_path):
    ds = _load(hf, exported.files["rl_jsonl_oracles"])
    rows = list(ds)
    assert len(rows) == len(expected(exported, oracles=True))
    for row in rows:
        attempt = exported.attempts[row["attempt_id"]]
        assert row["completion_mask"] == [
            1 if m["role"] == "assistant" else 0 for m in row["completion"]
        ]
        if row["mask"]:
            assert row["reward"] is None and row["mask_reason"], row
        else:
            assert row["reward"] == attempt["score"] and row["passed"] == (
                attempt["outcome"] == "passed"
            )
    masked = [r for r in rows if r["mask"]]
    assert [r["mask_reason"] for r in masked] == ["empty_completion"]  # the noop agent
    got = documented_reward(
        [r["prompt"] for r in rows], [r["completion"] for r in rows], ds["reward"], ds["mask"]
    )
    assert got == [None if r["mask"] else r["reward"] for r in rows]

    # One GRPO step on a masked row and a rewarded one: what TRL hands the function
    seen = {}

    def reward_fn(prompts, completions, reward, mask, **kwargs):
        seen.update(reward=list(reward), mask=list(mask), keys=set(kwargs))
        return documented_reward(prompts, completions, reward, mask, **kwargs)

    pick = [rows.index(masked[0]), next(i for i, r in enumerate(rows) if r["reward"] == 1.0)]
    tok = _copy(tokenizer, _template(hf, "qwen2_5"))
    args = hf.trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        use_vllm=False,
        **TRAINER_ARGS,
    )
    trainer = hf.trl.GRPOTrainer(
        model=_tiny_model(hf, tok),
        reward_funcs=[reward_fn],
        args=args,
        train_dataset=ds.select(pick),
        processing_class=tok,
    )
    result = trainer.train()
    # The step runs, and TRL takes None as "no reward" (NaN, advantage 0). Note what it learns:
    # every generation of a prompt gets the recorded attempt's reward, so a group's rewards are
    # all equal and its advantage is 0 (TRL logs frac_reward_zero_std == 1, loss 0): the
    # recorded reward scores the recorded completion, not what GRPO generates.
    assert result.global_step == 1
    assert sorted(seen["mask"]) == [False, False, True, True]
    assert sorted(r for r in seen["reward"] if r is not None) == [1.0, 1.0]
    assert "completion" not in seen["keys"]  # TRL never passes a `completion` column on
    assert {"group_id", "policy", "attempt_id"} <= seen["keys"]


# --- 7. round trip: what is trained is what the agent did ---------------------------------------
SPAN = re.compile(
    r"<think>\n(?P<think>.*?)\n</think>\n\n(?P<content>.*?)"
    r"(?P<calls>(?:\n?<tool_call>\n.*?\n</tool_call>)*)<\|im_end\|>\n?",
    re.DOTALL,
)
CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


def test_every_trained_token_is_a_command_or_message_the_agent_produced(hf, exported, tokenizer):
    from trl.chat_template_utils import get_training_chat_template

    tok = _copy(tokenizer, _template(hf, "qwen3"))
    training = get_training_chat_template(tok)
    rows = lines(exported.files["sft_hf"])
    assert len(rows) == len(expected(exported, passed_only=True))
    for row in rows:
        attempt = exported.attempts[row["metadata"]["attempt_id"]]
        assert attempt["outcome"] == "passed"
        encoded = tok.apply_chat_template(
            row["messages"],
            tools=row["tools"],
            chat_template=training,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        spans, current = [], []
        for token, trained in zip(encoded["input_ids"], encoded["assistant_masks"], strict=True):
            if trained:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        produced = []
        for span in spans:
            text = tok.decode(span, skip_special_tokens=False)
            match = SPAN.fullmatch(text)
            assert match, f"trained text is not one assistant turn: {text!r}"
            assert match["think"] == "", text  # the template's empty thinking block
            if match["content"]:
                produced.append(("assistant", match["content"]))
            for call in CALL.findall(match["calls"]):
                call = json.loads(call)
                assert call["name"] == "shell" and set(call["arguments"]) == {"command"}, call
                produced.append(("exec", call["arguments"]["command"]))
        # exactly the agent's own actions, in order: nothing else is trained on
        assert produced == attempt["actions"], (produced, attempt["actions"])
