"""attempts.taskio.importers.harbor_config: Harbor task.toml files as Harbor's docs write them."""

from __future__ import annotations

import textwrap

import pytest

from attempts.core.errors import TaskInvalid
from attempts.taskio.importers.harbor_config import parse_size_mb, read_spec

MIB = 1024 * 1024

# The example in harborframework.com/docs/tasks (schema 1.0 form, deprecated size strings).
DOCS_1_0 = """
version = "1.0"

[metadata]
author_name = "Steve Jobs"
author_email = "steve@apple.com"
difficulty = "easy"
category = "programming"
tags = ["trivial"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 900.0
cpus = 2
memory = "4G"
storage = "10G"
allow_internet = true
"""

# The schema 1.3 example in harborframework.com/docs/task-format.
DOCS_1_3 = """
schema_version = "1.3"

[task]
name = "acme/hello-world"
description = "A short description of the task"
authors = [{ name = "Steve Jobs", email = "steve@apple.com" }]
keywords = ["trivial", "programming"]

[metadata]
difficulty_explanation = "Trivial task for demonstration"
category = "programming"

[verifier]
timeout_sec = 120.0
env = { API_KEY = "sk-test-123", HOST_TOKEN = "${HOST_TOKEN:-none}" }
user = "root"

[agent]
timeout_sec = 240.0
user = "agent"

[solution]
env = { API_KEY = "sk-test-123" }

[environment]
build_timeout_sec = 600.0
docker_image = "some-org/some-name:some-tag"
os = "linux"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
network_mode = "no-network"
env = { OPENAI_API_KEY = "${OPENAI_API_KEY}" }
workdir = "/app"
"""


def make_task(
    tmp_path, toml: str, *, dockerfile: bool = True, dataset="my-dataset", folder="my-task"
):
    task = tmp_path / dataset / folder
    (task / "environment").mkdir(parents=True)
    (task / "task.toml").write_text(textwrap.dedent(toml))
    (task / "instruction.md").write_text("Do the thing.\n")
    if dockerfile:
        (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    return task


def refused(tmp_path, toml: str, **options) -> TaskInvalid:
    with pytest.raises(TaskInvalid) as caught:
        read_spec(make_task(tmp_path, toml, **options))
    return caught.value


def test_docs_1_0_example(tmp_path):
    spec = read_spec(make_task(tmp_path, DOCS_1_0))
    assert spec.name == "my-task"
    assert spec.dataset == "my-dataset"
    assert spec.title == "my-task"
    assert spec.agent_timeout == 300.0
    assert spec.verifier_timeout == 120.0
    assert spec.build_timeout == 900.0
    assert spec.solution_timeout == 300.0  # Harbor's oracle runs under the agent's timeout
    assert spec.cpus == 2.0
    assert spec.memory_bytes == 4096 * MIB
    assert spec.storage_bytes == 10240 * MIB
    assert spec.network is True
    assert spec.docker_image == ""  # builds environment/Dockerfile
    assert spec.workdir == spec.agent_user == spec.verifier_user == spec.solution_user == ""
    assert spec.env == {"environment": {}, "verifier": {}, "solution": {}}
    assert spec.ignored == [
        "version: schema version, informational",
        "metadata.author_name: informational",
        "metadata.author_email: informational",
        "metadata.difficulty: informational",
        "metadata.category: informational",
        "metadata.tags: informational",
    ]


def test_docs_1_3_example(tmp_path):
    spec = read_spec(make_task(tmp_path, DOCS_1_3, dockerfile=False))
    assert (spec.name, spec.dataset) == ("hello-world", "acme")  # org/name, org wins
    assert spec.title == "hello-world"
    assert spec.agent_timeout == spec.solution_timeout == 240.0
    assert spec.verifier_timeout == 120.0
    assert spec.build_timeout == 600.0
    assert spec.cpus == 1.0
    assert spec.memory_bytes == 2048 * MIB
    assert spec.storage_bytes == 10240 * MIB
    assert spec.network is False
    assert spec.docker_image == "some-org/some-name:some-tag"
    assert spec.workdir == "/app"
    assert spec.agent_user == spec.solution_user == "agent"
    assert spec.verifier_user == "root"
    assert spec.env == {
        "environment": {"OPENAI_API_KEY": "${OPENAI_API_KEY}"},
        "verifier": {"API_KEY": "sk-test-123", "HOST_TOKEN": "${HOST_TOKEN:-none}"},
        "solution": {"API_KEY": "sk-test-123"},
    }
    assert "schema_version: schema version, informational" in spec.ignored
    for key in ("task.description", "task.authors", "task.keywords"):
        assert f"{key}: informational" in spec.ignored
    assert "metadata.category: informational" in spec.ignored


def test_defaults_for_an_empty_task_toml(tmp_path):
    spec = read_spec(make_task(tmp_path, ""))
    assert spec.agent_timeout == spec.verifier_timeout == spec.build_timeout == 600.0
    assert spec.solution_timeout == 600.0
    assert spec.cpus == 1.0
    assert spec.memory_bytes == 2048 * MIB
    assert spec.storage_bytes is None
    assert spec.network is True  # Harbor's default network is public
    assert spec.ignored == []


def test_metadata_title_is_the_title(tmp_path):
    spec = read_spec(make_task(tmp_path, '[metadata]\ntitle = "Say hello"\ndifficulty = "easy"\n'))
    assert spec.title == "Say hello"
    assert spec.ignored == ["metadata.difficulty: informational"]


def test_name_without_org_takes_the_dataset_from_the_folder(tmp_path):
    spec = read_spec(make_task(tmp_path, '[task]\nname = "solo"\n', dataset="tb2"))
    assert (spec.name, spec.dataset) == ("solo", "tb2")


def test_relative_folder_still_names_its_dataset(tmp_path, monkeypatch):
    make_task(tmp_path, "", dataset="bench", folder="t1")
    monkeypatch.chdir(tmp_path / "bench" / "t1")
    spec = read_spec(type(tmp_path)("."))
    assert (spec.name, spec.dataset) == ("t1", "bench")


@pytest.mark.parametrize(
    "line, mb",
    [
        ('memory = "512M"', 512),
        ('memory = "2G"', 2048),
        ('memory = "1.5G"', 1536),
        ('memory = "2g"', 2048),
        ("memory_mb = 2048", 2048),
        ('memory_mb = 2048\nmemory = "2G"', 2048),
    ],
)
def test_memory_forms(tmp_path, line, mb):
    spec = read_spec(make_task(tmp_path, f"[environment]\n{line}\n"))
    assert spec.memory_bytes == mb * MIB


@pytest.mark.parametrize(
    "line, mb", [('storage = "10G"', 10240), ('storage = "512M"', 512), ("storage_mb = 4096", 4096)]
)
def test_storage_forms(tmp_path, line, mb):
    spec = read_spec(make_task(tmp_path, f"[environment]\n{line}\n"))
    assert spec.storage_bytes == mb * MIB


def test_parse_size_mb_matches_harbor():
    assert parse_size_mb("2G") == 2048
    assert parse_size_mb(" 512m ") == 512
    assert parse_size_mb("4096K") == 4
    for bad in ("2GB", "2Gi", "2048", "lots", "G"):
        with pytest.raises(ValueError):
            parse_size_mb(bad)


def test_network_forms(tmp_path):
    def network(body: str) -> bool:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        return read_spec(make_task(folder, f"[environment]\n{body}\n")).network

    assert network("allow_internet = false") is False
    assert network("allow_internet = true") is True
    assert network('network_mode = "public"') is True
    assert network('network_mode = "no-network"') is False
    # network_mode wins over the deprecated allow_internet, as in Harbor
    assert network('network_mode = "public"\nallow_internet = false') is True


def test_allow_internet_overridden_is_listed(tmp_path):
    spec = read_spec(
        make_task(tmp_path, '[environment]\nnetwork_mode = "no-network"\nallow_internet = true\n')
    )
    assert spec.network is False
    assert "environment.allow_internet: environment.network_mode overrides it" in spec.ignored


def test_phase_network_equal_to_the_environment_is_accepted(tmp_path):
    toml = """
    [agent]
    network_mode = "no-network"
    [verifier]
    network_mode = "no-network"
    [environment]
    allow_internet = false
    """
    assert read_spec(make_task(tmp_path, toml)).network is False


def test_user_as_uid(tmp_path):
    spec = read_spec(make_task(tmp_path, "[agent]\nuser = 1000\n[verifier]\nuser = 0\n"))
    assert (spec.agent_user, spec.verifier_user, spec.solution_user) == ("1000", "0", "1000")


def test_ignored_listing_of_harmless_keys(tmp_path):
    toml = """
    source = "terminal-bench"
    multi_step_reward_strategy = "mean"
    artifacts = ["/app/out.txt"]
    [verifier]
    environment_mode = "shared"
    collect = []
    [environment]
    gpus = 0
    gpu_types = ["H100"]
    mcp_servers = []
    """
    spec = read_spec(make_task(tmp_path, toml))
    assert spec.ignored == [
        "source: informational",
        "multi_step_reward_strategy: only applies to multi-step tasks ([[steps]])",
        "environment.gpu_types: no GPUs are requested (gpus is 0 or unset)",
        "environment.mcp_servers: empty",
        "artifacts: the verifier runs in the agent's container, where they already are; "
        "Boltz keeps the agent's changes and the check's output",
        "verifier.collect: empty",
    ]
    assert spec.artifacts == ["/app/out.txt"] and spec.verifier_environment is None


@pytest.mark.parametrize(
    "toml, expected",
    [
        ('[verifier]\nenvironment_mode = "separate"', {"docker_image": "", "workdir": ""}),
        (
            '[verifier.environment]\ndocker_image = "grader:1"\nworkdir = "/grade"\ncpus = 2',
            {"docker_image": "grader:1", "workdir": "/grade"},
        ),
    ],
)
def test_a_separate_verifier_is_read_as_harbor_resolves_its_mode(tmp_path, toml, expected):
    spec = read_spec(
        make_task(tmp_path, 'artifacts = ["/app/out.txt", {source = "/data"}]\n' + toml)
    )
    assert spec.verifier_environment == expected
    assert spec.artifacts == ["/app/out.txt", "/data"]
    assert not any(line.startswith("artifacts:") for line in spec.ignored)


@pytest.mark.parametrize(
    "toml, field, words",
    [
        (
            '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 1',
            "verifier.environment",
            "Harbor refuses",
        ),
        (
            'artifacts = ["out.txt"]\n[verifier]\nenvironment_mode = "separate"',
            "artifacts[0]",
            "absolute",
        ),
        (
            '[verifier.environment]\nnetwork_mode = "public"\n[environment]\nallow_internet = false',
            "verifier.environment.network_mode",
            "the task's network",
        ),
    ],
)
def test_a_separate_verifier_harbor_or_boltz_would_not_run_is_refused(tmp_path, toml, field, words):
    error = refused(tmp_path, toml + "\n")
    assert error.field == field and words in error.message


def test_docker_image_without_a_dockerfile_is_enough(tmp_path):
    spec = read_spec(
        make_task(tmp_path, '[environment]\ndocker_image = "alpine:3.20"\n', dockerfile=False)
    )
    assert spec.docker_image == "alpine:3.20"


def test_neither_dockerfile_nor_docker_image(tmp_path):
    error = refused(tmp_path, DOCS_1_0, dockerfile=False)
    assert error.field == "environment.docker_image"
    assert "environment/Dockerfile" in error.message
    assert "docker_image" in error.message


def test_missing_task_toml(tmp_path):
    task = make_task(tmp_path, "")
    (task / "task.toml").unlink()
    with pytest.raises(TaskInvalid) as caught:
        read_spec(task)
    assert caught.value.field == "task.toml"


def test_invalid_toml(tmp_path):
    error = refused(tmp_path, "[agent\ntimeout_sec = 1\n")
    assert error.field == "task.toml"
    assert "not valid TOML" in error.message


@pytest.mark.parametrize(
    "toml, field, expected",
    [
        ("[agent]\ntimeout_sec = 0", "agent.timeout_sec", "positive number"),
        ('[agent]\ntimeout_sec = "600"', "agent.timeout_sec", "positive number"),
        ("[verifier]\ntimeout_sec = -5.0", "verifier.timeout_sec", "positive number"),
        ("[environment]\nbuild_timeout_sec = true", "environment.build_timeout_sec", "positive"),
        ("[environment]\ncpus = 0", "environment.cpus", "positive whole number"),
        ("[environment]\ncpus = 1.5", "environment.cpus", "positive whole number"),
        ('[environment]\ncpus = "2"', "environment.cpus", "positive whole number"),
        ("[environment]\nmemory_mb = -1", "environment.memory_mb", "positive whole number"),
        ('[environment]\nmemory_mb = "2G"', "environment.memory_mb", "positive whole number"),
        ("[environment]\nstorage_mb = 0", "environment.storage_mb", "positive whole number"),
        ('[environment]\nmemory = "2GB"', "environment.memory", "not a size"),
        ('[environment]\nmemory = "2048"', "environment.memory", "not a size"),
        ("[environment]\nmemory = 2048", "environment.memory", "expected a string"),
        ('[environment]\nmemory = "0M"', "environment.memory", "at least 1M"),
        ('[environment]\nstorage = "ten gigs"', "environment.storage", "not a size"),
        ('[environment]\nmemory = "2G"\nmemory_mb = 4096', "environment.memory", "conflicts"),
        ("[environment]\ngpus = -1", "environment.gpus", "0 or more"),
        ('[environment]\nallow_internet = "yes"', "environment.allow_internet", "true or false"),
        ('[environment]\nnetwork_mode = "bridge"', "environment.network_mode", "public"),
        ("[environment]\ndocker_image = 3", "environment.docker_image", "expected a string"),
        ('[environment]\nworkdir = "app"', "environment.workdir", "absolute path"),
        ("[environment]\nenv = { PORT = 8080 }", "environment.env.PORT", "expected a string"),
        ('[environment.env]\n"BAD-NAME" = "x"', "environment.env.BAD-NAME", "shell variable"),
        ('[verifier]\nenv = { "1X" = "x" }', "verifier.env.1X", "shell variable"),
        ("[solution]\nenv = { DEBUG = true }", "solution.env.DEBUG", "expected a string"),
        ('[verifier]\nenv = "A=1"', "verifier.env", "expected a table"),
        ("[agent]\nuser = -1", "agent.user", "UID"),
        ("[agent]\nuser = true", "agent.user", "expected a string"),
        ("[verifier]\nuser = [1]", "verifier.user", "expected a string"),
        ('environment = "docker"', "environment", "expected a table"),
        ("[task]\nname = 5", "task.name", "expected a string"),
        ('[task]\nname = "a/b/c"', "task.name", "org/name"),
        ('[task]\nname = "org/../x"', "task.name", "org/name"),
        ('[task]\ndescription = "no name"', "task.name", "missing"),
        ('[environment]\nos = "macos"', "environment.os", "'linux' or 'windows'"),
        ('[verifier]\nenvironment_mode = "other"', "verifier.environment_mode", "'shared'"),
    ],
)
def test_wrong_types_and_values(tmp_path, toml, field, expected):
    error = refused(tmp_path, toml + "\n")
    assert error.field == field
    assert expected in error.message


@pytest.mark.parametrize(
    "toml, field",
    [
        ("timeout = 5", "timeout"),
        ("[agent]\ntimeout = 5", "agent.timeout"),
        ("[agent]\nsetup_timeout_sec = 5", "agent.setup_timeout_sec"),
        ("[verifier]\ntimeout = 5", "verifier.timeout"),
        ("[solution]\ntimeout_sec = 5", "solution.timeout_sec"),
        ("[environment]\nmemory_gb = 4", "environment.memory_gb"),
        ('[task]\nname = "a/b"\ntitle = "x"', "task.title"),
        ("[oracle]\ntimeout_sec = 5", "oracle"),
    ],
)
def test_unknown_keys(tmp_path, toml, field):
    error = refused(tmp_path, toml + "\n")
    assert error.field == field
    key = field.rsplit(".", 1)[-1]
    assert f"unknown key {key!r}" in error.message


STEPS = """
schema_version = "1.1"
[task]
name = "harbor/example-multi-step"
[agent]
timeout_sec = 100.0
[environment]
workdir = "/app"
[[steps]]
name = "scaffold"
min_reward = 1.0
[steps.agent]
timeout_sec = 60.0
[[steps]]
name = "implement"
min_reward = { correctness = 0.8, style = 0.5 }
[steps.verifier]
user = "grader"
env = { LEVEL = "2" }
"""


def with_steps(tmp_path, toml: str = STEPS, names=("scaffold", "implement")):
    task = make_task(tmp_path, toml)
    for name in names:
        (task / "steps" / name / "tests").mkdir(parents=True)
        (task / "steps" / name / "instruction.md").write_text(f"Do {name}.\n")
        (task / "steps" / name / "tests" / "test.sh").write_text(
            "echo 1 > /logs/verifier/reward.txt\n"
        )
    return task


def test_a_healthcheck_is_read_with_harbors_defaults(tmp_path):
    spec = read_spec(make_task(tmp_path, '[environment.healthcheck]\ncommand = "curl -f x"\n'))
    assert spec.healthcheck == {
        "command": "curl -f x",
        "interval_sec": 5.0,
        "timeout_sec": 30.0,
        "start_period_sec": 0.0,
        "start_interval_sec": 5.0,
        "retries": 3,
    }
    error = refused(tmp_path / "b", '[environment.healthcheck]\ncommand = "x"\nretries = 0\n')
    assert error.field == "environment.healthcheck.retries"


def test_steps_are_read_in_order_with_their_own_settings_over_the_tasks(tmp_path):
    spec = read_spec(with_steps(tmp_path))
    assert spec.step_rewards == "mean"
    scaffold, implement = spec.steps
    assert (scaffold.name, scaffold.agent_timeout, scaffold.min_reward) == (
        "scaffold",
        60.0,
        {"reward": 1.0},
    )
    assert (implement.agent_timeout, implement.verifier_user, implement.verifier_env) == (
        100.0,
        "grader",
        {"LEVEL": "2"},
    )
    assert implement.min_reward == {"correctness": 0.8, "style": 0.5}
    final = read_spec(with_steps(tmp_path / "f", 'multi_step_reward_strategy = "final"\n' + STEPS))
    assert final.step_rewards == "final"


@pytest.mark.parametrize(
    "extra, names, field, words",
    [
        ("", ("scaffold",), "steps/implement/instruction.md", "each step's instruction"),
        ('multi_step_reward_strategy = "max"\n', None, "multi_step_reward_strategy", "'final'"),
        ("[[steps]]\nname = 'scaffold'\n", None, "steps[3].name", "two steps of one name"),
        ("[[steps]]\nname = '../up'\n", None, "steps[3].name", "folder name"),
        ("[[steps]]\nname = 'x'\nmin_reward = 'high'\n", ("scaffold", "implement", "x"),
         "steps[3].min_reward", "a number or a table"),
        ("[[steps]]\nname = 'x'\nhealthcheck = { retries = 2 }\n",
         ("scaffold", "implement", "x"), "steps[3].healthcheck.command", "exit 0 means ready"),
        ("[[steps]]\nname = 'x'\n[steps.verifier]\nenvironment_mode = 'separate'\n",
         ("scaffold", "implement", "x"), "steps[3].verifier.environment_mode", "separate"),
        ("[[steps]]\nname = 'x'\nretries = 2\n", ("scaffold", "implement", "x"),
         "steps[3].retries", "unknown key"),
    ],
)  # fmt: skip
def test_a_step_harbor_would_not_run_is_refused_naming_it(tmp_path, extra, names, field, words):
    toml = extra + STEPS if extra.startswith("multi") else STEPS + extra
    with pytest.raises(TaskInvalid) as caught:
        read_spec(with_steps(tmp_path, toml, names or ("scaffold", "implement")))
    assert caught.value.field == field and words in caught.value.message


@pytest.mark.parametrize(
    "toml, field, words",
    [
        (
            '[[verifier.collect]]\ncommand = "pg_dump > /logs/db.sql"',
            "verifier.collect",
            "[[verifier.collect]]",
        ),
        ("[verifier.continuous]\nenabled = true", "verifier.continuous", "while the agent works"),
        ("[environment]\ngpus = 1", "environment.gpus", "GPU"),
        ('[environment]\ngpus = 2\ngpu_types = ["H100"]', "environment.gpus", "GPU"),
        ('[environment.tpu]\ntype = "v6e"\ntopology = "2x4"', "environment.tpu", "TPU"),
        ('[environment]\nos = "windows"', "environment.os", "Windows"),
        ('[environment]\nos = "Windows"', "environment.os", "Windows"),
        ('[environment]\nnetwork_mode = "allowlist"', "environment.network_mode", "allowed hosts"),
        (
            '[environment]\nallowed_hosts = ["pypi.org"]',
            "environment.allowed_hosts",
            "allowed hosts",
        ),
        (
            '[[environment.mcp_servers]]\nname = "search"\nurl = "http://mcp:8000/sse"',
            "environment.mcp_servers",
            "MCP",
        ),
        ('[environment]\nskills_dir = "/skills"', "environment.skills_dir", "skills"),
        ('[agent]\nnetwork_mode = "no-network"', "agent.network_mode", "agent phase"),
        (
            '[verifier]\nnetwork_mode = "public"\n[environment]\nallow_internet = false',
            "verifier.network_mode",
            "verifier phase",
        ),
        ('[agent]\nallowed_hosts = ["github.com"]', "agent.allowed_hosts", "allowed hosts"),
    ],
)
def test_unsupported_features(tmp_path, toml, field, words):
    error = refused(tmp_path, toml + "\n")
    assert error.field == field
    assert words in error.message
    assert "Harbor" in error.message
    assert field.rsplit(".", 1)[-1] in error.message  # the message names the key


@pytest.mark.parametrize(
    "filename", ["docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"]
)
def test_compose_file(tmp_path, filename):
    task = make_task(tmp_path, DOCS_1_0)
    (task / "environment" / filename).write_text("services:\n  main:\n    build: .\n")
    with pytest.raises(TaskInvalid) as caught:
        read_spec(task)
    assert caught.value.field == f"environment/{filename}"
    assert "Docker Compose" in caught.value.message
    assert filename in caught.value.message
