"""Fuzzed readers of task definitions from outside: a Boltz task folder's task.toml (its keys
alone, and the whole folder with instruction.md and solution.patch), a Harbor task's task.toml
and folder, SWE-bench JSONL rows, and the sizes and durations task.toml and settings take.
Each gives checked values or TaskInvalid naming the key to fix (an importer: a refused item);
values given are storable (no NUL byte, finite numbers within their columns). See
tests/fuzz_inputs.py.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attempts.core.errors import TaskInvalid
from attempts.dispatch.limits import MAX_STAGE_SECONDS
from attempts.taskio import folders
from attempts.taskio.importers import harbor, swebench
from attempts.taskio.importers.harbor_config import HarborSpec, read_spec
from attempts.taskio.importers.items import ImportItem
from attempts.taskio.repos import commit_folder
from boltz_web.env_values import MAX_BYTES, parse_bytes, parse_seconds
from tests.fuzz_inputs import (
    DEEP_JSON,
    LONG_INTEGER,
    bytes_like,
    examples,
    json_bytes,
    json_values,
    toml_text,
    toml_values,
)

EXAMPLES = examples(60)
SLOW_EXAMPLES = examples(20)  # examples that may reach git: tens of milliseconds each

# Values a limit or a size is written as, right and wrong.
numbers = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["10m", "1g", "512m", "90", "2h", "7d", "nan", "inf", "-1", "0", "1e999"]),
    st.sampled_from(["9" * 400 + "d", "9" * 400 + "t", "1.5G", "4096K", "0.0001K", "3 G"]),
    st.text(max_size=8),
)


def assert_storable(value, where: str = "") -> None:
    """What a database column can keep: no NUL in a string, finite floats, 64-bit integers."""
    if isinstance(value, str):
        assert "\0" not in value, where
    elif isinstance(value, float):
        assert math.isfinite(value), where
    elif isinstance(value, int) and not isinstance(value, bool):
        assert -(2**63) <= value < 2**63, where
    elif isinstance(value, dict):
        for key, inner in value.items():
            assert_storable(key, where)
            assert_storable(inner, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for inner in value:
            assert_storable(inner, where)


def assert_names_a_field(exc: TaskInvalid) -> None:
    assert exc.field and exc.message, exc


# --- sizes and durations ---------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(numbers)
@example("9" * 400 + "t")  # was OverflowError: int(inf)
@example(10**400)  # was a size no column holds
@example(float("nan"))  # was accepted as a duration
@example("9" * 400 + "d")  # was accepted as an infinite duration
def test_sizes_and_durations_are_numbers_or_a_value_error(raw):
    try:
        size = parse_bytes(raw)
    except ValueError as exc:
        assert str(exc)
    else:
        assert isinstance(size, int) and size <= MAX_BYTES
    try:
        seconds = parse_seconds(raw)
    except ValueError as exc:
        assert str(exc)
    else:
        assert math.isfinite(seconds)


# --- a Boltz task.toml ---------------------------------------------------------------------------

_any_key = st.one_of(st.sampled_from(sorted(folders._TOP_KEYS)), st.text(max_size=8))
boltz_specs = st.one_of(
    st.dictionaries(_any_key, toml_values, max_size=6),
    st.fixed_dictionaries(
        {"instruction": st.just("Fix it."), "check": st.just("python3 -m pytest -q")},
        optional={
            "slug": st.one_of(toml_values, st.text(max_size=200)),
            "title": toml_values,
            "setup": toml_values,
            "image": toml_values,
            "limits": st.one_of(
                toml_values,
                st.dictionaries(st.sampled_from(sorted(folders._LIMIT_KEYS)), numbers),
            ),
            "repository": st.one_of(
                toml_values,
                st.dictionaries(
                    st.sampled_from(["path", "url", "ref", "other"]),
                    st.one_of(toml_values, st.text(max_size=10)),
                ),
            ),
            "protected_paths": st.one_of(toml_values, st.lists(st.text(max_size=12), max_size=3)),
            "rebuild": toml_values,
            "rebuild_outputs": st.one_of(toml_values, st.lists(st.text(max_size=12), max_size=3)),
            "reward_file": st.one_of(st.sampled_from([True, False, "harbor"]), toml_values),
            "check_mode": st.one_of(st.sampled_from(["fresh", "in_place"]), toml_values),
            "runner_access": st.one_of(st.sampled_from(["fail", "report"]), toml_values),
            "compiled_files": st.one_of(st.sampled_from(["remove", "allow"]), toml_values),
            "agent_writes_tests": toml_values,
        },
    ),
)


@settings(max_examples=EXAMPLES * 3 // 2, deadline=None)
@given(boltz_specs, st.text(max_size=20))
@example({"instruction": "x", "check": "c", "limits": {"memory": "9" * 400 + "t"}}, "t")
@example({"instruction": "x", "check": "c", "limits": {"pids": 2**40}}, "t")
@example({"instruction": "x", "check": "c", "limits": {"cpus": float("nan")}}, "t")
@example({"instruction": "x", "check": "c", "limits": {"agent_timeout": float("inf")}}, "t")
@example({"instruction": "x", "check": "c", "slug": "s" * 300}, "t")
@example({"instruction": "x", "check": "c", "repository": {"ref": "a\0b"}}, "t")
def test_task_toml_keys_are_task_values_or_task_invalid(spec, folder_name):
    try:
        values = folders.spec_values(spec, folder_name=folder_name)
    except TaskInvalid as exc:
        assert_names_a_field(exc)
        return
    assert_storable(values)
    assert 1 <= len(values["slug"]) <= 100 and len(values["title"]) <= 200
    for key in ("agent_timeout", "check_timeout", "setup_timeout"):
        assert 0 < values[key] <= MAX_STAGE_SECONDS
    assert 0 < values["pids_limit"] < 2**31 and 0 < values["memory_bytes"] <= MAX_BYTES


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A small git repository a task folder names by its path (`repository.url`)."""
    source = tmp_path_factory.mktemp("src")
    (source / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    target = tmp_path_factory.mktemp("upstream") / "calc"
    commit_folder(source, target)
    return target


GOOD_PATCH = (
    b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    b" def add(a, b):\n-    return a - b\n+    return a + b\n"
)
folder_texts = st.one_of(bytes_like(), st.just(GOOD_PATCH), st.just(b"Fix add().\n"))


@pytest.mark.django_db
@settings(
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.one_of(
        boltz_specs.map(lambda spec: toml_text(spec).encode()),
        bytes_like(),
    ),
    st.one_of(st.none(), folder_texts),
    st.one_of(st.none(), folder_texts),
)
@example(b'check = "c"\nrepository = {url = "UPSTREAM"}\n', b"\xff\xfe", None)  # was Unicode
@example(b'check = "c"\ninstruction = "x"\nrepository = {url = "UPSTREAM"}\n', None, b"\xc3(")
def test_a_task_folder_is_task_values_or_task_invalid(upstream, toml, instruction, reference):
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "task"
        folder.mkdir()
        toml = toml.replace(b"UPSTREAM", str(upstream).encode())
        if b"repository" not in toml:  # most examples name the repository, as a task does
            toml = f"repository = {{url = {json.dumps(str(upstream))}}}\n".encode() + toml
        (folder / "task.toml").write_bytes(toml)
        (folder / "Dockerfile").write_text("FROM scratch\n")  # a context packed: no Docker asked
        if instruction is not None:
            (folder / "instruction.md").write_bytes(instruction)
        if reference is not None:
            (folder / "solution.patch").write_bytes(reference)
        try:
            values = folders.read_task_dir(folder)
        except TaskInvalid as exc:
            assert_names_a_field(exc)
            return
    assert_storable(values)
    assert values["instruction"].strip() and len(values["base_commit"]) == 40


# --- a Harbor task ---------------------------------------------------------------------------------


def _section(keys: list[str], values) -> st.SearchStrategy[dict]:
    return st.dictionaries(
        st.one_of(st.sampled_from(keys), st.text(max_size=6)), values, max_size=4
    )


harbor_values = st.one_of(toml_values, numbers, st.sampled_from(["linux", "public", "shared"]))
harbor_specs = st.one_of(
    st.dictionaries(st.text(max_size=10), toml_values, max_size=4),
    st.fixed_dictionaries(
        {},
        optional={
            "version": st.one_of(st.just("1.0"), toml_values),
            "task": _section(["name", "description", "keywords"], harbor_values),
            "metadata": st.dictionaries(st.text(max_size=6), harbor_values, max_size=3),
            "agent": _section(["timeout_sec", "user", "network_mode"], harbor_values),
            "verifier": _section(
                ["timeout_sec", "env", "user", "environment_mode", "collect"], harbor_values
            ),
            "solution": _section(["env"], st.dictionaries(st.text(max_size=6), harbor_values)),
            "environment": _section(
                [
                    "cpus",
                    "memory_mb",
                    "memory",
                    "storage",
                    "gpus",
                    "env",
                    "workdir",
                    "docker_image",
                    "allow_internet",
                    "network_mode",
                    "build_timeout_sec",
                ],
                harbor_values,
            ),
        },
    ),
)


def _harbor_folder(root: Path, toml: bytes, instruction: bytes | None, verifier: bool) -> Path:
    folder = root / "dataset" / "task"
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text("FROM scratch\nWORKDIR /app\n")
    (folder / "task.toml").write_bytes(toml)
    if instruction is not None:
        (folder / "instruction.md").write_bytes(instruction)
    if verifier:
        (folder / "tests").mkdir()
        (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return folder


@settings(max_examples=EXAMPLES * 3 // 2, deadline=None)
@given(st.one_of(harbor_specs.map(lambda spec: toml_text(spec).encode()), bytes_like()))
@example(b"[environment]\ncpus = nan\n")  # was ValueError: int(nan)
@example(b"[environment]\ncpus = inf\n")  # was OverflowError: int(inf)
@example(b"[environment]\nmemory_mb = inf\n")  # was OverflowError
@example(b'[environment]\nmemory = "' + b"9" * 400 + b'G"\n')  # was OverflowError
@example(b"[agent]\ntimeout_sec = nan\n")  # was accepted
@example(b'[verifier]\nenv = {A = "a\\u0000b"}\n')  # was a NUL kept
def test_harbor_task_toml_is_a_spec_or_task_invalid(toml):
    with tempfile.TemporaryDirectory() as scratch:
        folder = _harbor_folder(Path(scratch), toml, b"Do it.\n", True)
        try:
            spec = read_spec(folder)
        except TaskInvalid as exc:
            assert_names_a_field(exc)
            return
    assert isinstance(spec, HarborSpec)
    assert_storable(vars(spec))
    for seconds in (spec.agent_timeout, spec.verifier_timeout, spec.build_timeout):
        assert 0 < seconds <= MAX_STAGE_SECONDS
    assert 0 < spec.memory_bytes <= MAX_BYTES and spec.cpus >= 1


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.one_of(harbor_specs.map(lambda spec: toml_text(spec).encode()), bytes_like()),
    st.one_of(st.none(), bytes_like()),
    st.booleans(),
)
@example(b"", b"\xff\xfeinstructions", True)  # was UnicodeDecodeError out of the import
def test_a_harbor_folder_is_an_item_never_an_error(toml, instruction, verifier):
    with tempfile.TemporaryDirectory() as scratch:
        folder = _harbor_folder(Path(scratch), toml, instruction, verifier)
        item = harbor.read_one(folder)  # without Docker: refused at the image, at the latest
    assert isinstance(item, ImportItem)
    assert item.values is None and item.refused


# --- SWE-bench rows ---------------------------------------------------------------------------

SWEBENCH = Path(__file__).parent / "data" / "swebench"
ROW = json.loads((SWEBENCH / "rows.jsonl").read_text().splitlines()[0])


@pytest.fixture(scope="module")
def clones(tmp_path_factory):
    """Local clones as SWE-bench rows name them (DIR/owner__name)."""
    root = tmp_path_factory.mktemp("repos")
    commit_folder(SWEBENCH / "repos_src" / "acme__calc", root / "acme__calc")
    return root


swebench_rows = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(sorted(ROW)), json_values, max_size=4),
    # The good row with fields replaced or dropped: every check after the first one reached.
    st.tuples(
        st.dictionaries(
            st.sampled_from(swebench.REQUIRED),
            st.one_of(json_values, st.text(max_size=30), st.just("")),
            max_size=2,
        ),
        st.lists(st.sampled_from(swebench.REQUIRED), max_size=1),
    ).map(lambda change: {k: v for k, v in {**ROW, **change[0]}.items() if k not in change[1]}),
)
jsonl_lines = st.lists(
    st.one_of(swebench_rows.map(json_bytes), bytes_like()), min_size=1, max_size=3
)


@pytest.mark.django_db
@settings(
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(jsonl_lines)
@example([DEEP_JSON])  # was RecursionError out of the import
@example([LONG_INTEGER])  # was ValueError out of the import
@example([json_bytes({**ROW, "patch": 5})])  # was TypeError writing the patch
@example([json_bytes({**ROW, "instance_id": "--"})])  # was a task with the slug ""
@example([json_bytes({**ROW, "repo": "acme/\0"})])  # refused, its NUL never in a message
@example([json_bytes({**ROW, "base_commit": "HEAD\0"})])  # was ValueError out of git
@example([json_bytes({**ROW, "FAIL_TO_PASS": "[" * 5000})])  # was RecursionError
def test_swebench_rows_are_items_never_an_error(clones, lines):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "rows.jsonl"
        path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
        # The image is Docker's to know: here every image is there, so rows get past it.
        with mock.patch.object(swebench, "require_image", lambda image, **_: image):
            items = swebench.read(path, repos_dir=clones, image="fuzz:1")
    assert all(isinstance(item, ImportItem) for item in items)
    for item in items:
        if item.values is None:
            assert item.refused and "\0" not in item.refused  # a report a database keeps
        else:
            assert_storable(item.values)
            assert 1 <= len(item.values["slug"]) <= 100 and item.values["required_tests"]
