"""The check runs nothing the record does not show (issue 20): one real attack per class of the
issue, each an agent that must end `failed` with a score of 0 and the reason, with the record
showing what was checked; and the honest fixes the old rules failed, which must pass.

Real Docker, a real Celery worker, tasks made in the test (tests/test_redteam.py's `make_task`:
calc.py's add is wrong, the hidden check files hold tests/test_calc.py). Classes 7 (a root agent
in an in-place verifier) and the runner reach of class 6 have their own modules:
tests/test_harbor_verifier_env.py and tests/test_runner_reach.py.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from attempts.models import Outcome
from tests.attacks import FLIP
from tests.conftest import sdk_client
from tests.test_redteam import CHECK, FLIP_PLUGIN, must_fail, run_all, verdict

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

# A flip plugin that finds pytest's plugin manager from code the check imports (no conftest,
# no entry point): the in-process reach that tests/test_runner_reach.py names statically.


def failed_with_zero(result: dict) -> list[str]:
    """The attacks that did not end `failed` with a score of 0 and the reason in words (the
    attempt's, or its check's verdict when its tests simply failed)."""
    problems = must_fail(result)
    for label, attempt in result.items():
        check = attempt.checks.order_by("pk").last()
        said = attempt.failure_reason or (check.summary if check else "")
        if attempt.outcome == Outcome.FAILED and (attempt.score != 0.0 or not said):
            problems.append(f"{label}: failed without a zero and a reason: {verdict(attempt)}")
    return problems


def test_class1_setup_runs_on_the_base_never_on_the_agents_changes(worker, make_task):
    """The task's setup runs in the check's fresh container on the base, then the recorded
    patch is applied: a build script the agent changed never runs, so what it would write (a
    conftest.py, a .pyc of a fixed calc.py) never reaches the check."""
    task = make_task(setup="sh scripts/setup.sh", files={"scripts/setup.sh": "echo ready\n"})
    writes_conftest = (
        "cat > scripts/setup.sh <<'EOF'\n"
        "echo ready\n"
        "cat > tests/conftest.py <<'PY'\n"
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    outcome.get_result().outcome = 'passed'\n"
        "PY\n"
        "EOF\n"
    )
    # An unchecked hash-based .pyc of a fixed calc.py, as setup would build it: Python uses it
    # without looking at the recorded (unfixed) calc.py.
    writes_pyc = (
        "cat > scripts/setup.sh <<'EOF'\n"
        "echo ready\n"
        "mkdir -p /tmp/fixed && sed 's/a - b/a + b/' calc.py > /tmp/fixed/calc.py\n"
        "python3 -c \"import py_compile; py_compile.compile('/tmp/fixed/calc.py', "
        "cfile='__pycache__/calc.cpython-311.pyc', "
        'invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"\n'
        "EOF\n"
    )
    honest = "sed -i 's/a - b/a + b/' calc.py\n"
    result = run_all(
        ("setup_writes_conftest", task, writes_conftest),
        ("setup_writes_pyc", task, writes_pyc),
        ("honest", task, honest),
    )
    fixer = result.pop("honest")
    problems = failed_with_zero(result)
    for label, attempt in result.items():
        if re.findall(r"^diff --git a/(\S+)", attempt.diff, re.M) != ["scripts/setup.sh"]:
            problems.append(
                f"{label}: the diff shows more than the build script: {verdict(attempt)}"
            )
        setup = attempt.events.filter(kind="exec", data__step="check-setup", data__phase="end")
        if not setup.exists():
            problems.append(f"{label}: the check's container was not set up")
    if fixer.outcome != Outcome.PASSED:
        problems.append(f"an honest fix with a setup command must pass: {verdict(fixer)}")
    assert not problems, "\n".join(problems)


def test_class2_compiled_files_the_agent_adds_are_kept_out_and_named(worker, make_task):
    """A compiled extension added next to the unchanged module would be imported in its place;
    no reviewer can read it. The check never sees it, and the tamper report names it."""
    task = make_task(check="ls -a; " + CHECK)
    so = "calc.cpython-311-x86_64-linux-gnu.so"
    # Any bytes will do: the check must not see the file at all.
    script = f"head -c 4096 /dev/urandom > {so}\n"
    result = run_all(("extension", task, script))
    attempt = result["extension"]
    problems = failed_with_zero(result)
    check = attempt.checks.get()
    if so in check.output:
        problems.append(f"the check saw the compiled file: {check.output[:500]}")
    named = {entry["path"]: entry["change"] for entry in attempt.tamper["protected"]}
    if named.get(so) != "added":
        problems.append(f"the tamper report does not name {so}: {attempt.tamper}")
    assert not problems, "\n".join(problems)


def test_class3_test_folders_belong_to_the_task(worker, make_task):
    """A module in the tests folder that shadows calc.py (pytest puts the test folder first on
    sys.path), and a new tests/__init__.py that registers a plugin turning failures into
    passes: both removed before the check and reported."""
    task = make_task()
    shadow = "sed 's/a - b/a + b/' calc.py > tests/calc.py\n"
    package = f"cat > tests/__init__.py <<'PY'\n{FLIP}PY\n"
    result = run_all(("shadow_module", task, shadow), ("package_plugin", task, package))
    problems = failed_with_zero(result)
    for label, path in (
        ("shadow_module", "tests/calc.py"),
        ("package_plugin", "tests/__init__.py"),
    ):
        named = {e["path"] for e in result[label].tamper["protected"]}
        if path not in named:
            problems.append(f"{label}: {path} is not in the tamper report: {result[label].tamper}")
    assert not problems, "\n".join(problems)


def test_class4_pytests_configuration_is_protected_in_every_spelling_and_case(worker, make_task):
    """A dist-info in upper case whose entry point loads a plugin, and pytest 9's own
    configuration files (pytest.toml), which the images' older pytest ignores."""
    task = make_task()
    upper = (
        FLIP_PLUGIN + "mkdir -p evil-1.0.DIST-INFO\n"
        "printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' "
        "> evil-1.0.DIST-INFO/METADATA\n"
        "printf '[pytest11]\\nevil = evilplug\\n' > evil-1.0.DIST-INFO/entry_points.txt\n"
    )
    toml = (
        'printf \'[pytest]\\naddopts = ["-k", "not test_add"]\\n\' > pytest.toml\n'
        "cp pytest.toml .pytest.toml; mkdir -p tests && cp pytest.toml tests/pytest.toml\n"
    )
    result = run_all(("dist_info_upper_case", task, upper), ("pytest_toml", task, toml))
    problems = failed_with_zero(result)
    named = {e["path"] for e in result["pytest_toml"].tamper["protected"]}
    if not {"pytest.toml", ".pytest.toml"} <= named:
        problems.append(f"pytest.toml is not in the tamper report: {named}")
    named = {e["path"] for e in result["dist_info_upper_case"].tamper["protected"]}
    if "evil-1.0.DIST-INFO/entry_points.txt" not in named:
        problems.append(f"the upper-case dist-info is not in the tamper report: {named}")
    assert not problems, "\n".join(problems)


def test_class5_an_in_place_check_sees_nothing_the_record_leaves_out(worker, make_task):
    """A package whose own .gitignore is `*` ignores itself. In place, the record holds every
    file the check sees: the package shows in the diff, and what it does is judged there."""
    task = make_task(mode="in_place")
    hidden_fix = (
        "mkdir -p calc && echo '*' > calc/.gitignore\n"
        "sed 's/a - b/a + b/' calc.py > calc/__init__.py\n"
        "python3 -c 'import calc'\n"  # bytecode, which is neither recorded nor checked
    )
    hidden_flip = f"mkdir -p helper && echo '*' > helper/.gitignore\ncat > helper/__init__.py <<'PY'\n{FLIP}PY\necho 'import helper' >> calc.py\n"
    result = run_all(("ignored_fix", task, hidden_fix), ("ignored_flip", task, hidden_flip))
    problems = failed_with_zero({"ignored_flip": result["ignored_flip"]})
    fixer = result["ignored_fix"]
    if "calc/__init__.py" not in fixer.diff or "a + b" not in fixer.diff:
        problems.append(f"the ignored package is not in the diff: {verdict(fixer)}")
    if "__pycache__" in fixer.diff:
        problems.append(f"bytecode was recorded: {verdict(fixer)}")
    if "helper/__init__.py" not in result["ignored_flip"].diff:
        problems.append(f"the ignored plugin is not in the diff: {verdict(result['ignored_flip'])}")
    assert not problems, "\n".join(problems)


def test_class6_the_witness_and_reward_files_cannot_be_rewritten(worker, make_task):
    """Per-test outcomes leave the test process as they happen: code under test that forges
    passes on the witness pipe and leaves with status 0, or writes reward.json over the
    check's own reward.txt, gets nothing for it. (runner_access = "report" here, so that the
    witness and the rewards are what stops them, not the static scan.)"""
    lenient = make_task(runner_access="report")
    rewarded = make_task(
        reward_file=True,
        runner_access="report",
        check=CHECK + ' && echo 1 > "$BOLTZ_CHECK_DIR/reward.txt" '
        '|| echo 0 > "$BOLTZ_CHECK_DIR/reward.txt"',
    )
    forge = textwrap.dedent(
        """
        cat >> calc.py <<'PY'
        import atexit, json, os
        def _forge():
            pipe = os.environ.get('BOLTZ_WITNESS_PIPE')
            if pipe:
                fd = os.open(pipe, os.O_WRONLY)
                for name in ('tests/test_calc.py::test_add', 'tests/test_calc.py::test_one'):
                    os.write(fd, (json.dumps({'run': 'x', 'event': 'test', 'id': name,
                                              'outcome': 'passed'}) + '\\n').encode())
                os.write(fd, b'{"run": "x", "event": "end", "exitstatus": 0}\\n')
            os._exit(0)
        atexit.register(_forge)
        PY
        """
    )
    reward = (
        "cat >> calc.py <<'PY'\n"
        "import os as _os\n"
        "_d = _os.environ.get('BOLTZ_CHECK_DIR')\n"
        "if _d:\n"
        "    open(_os.path.join(_d, 'reward.json'), 'w').write('{\"reward\": 1}')\n"
        "PY\n"
    )
    result = run_all(("forged_witness", lenient, forge), ("reward_json", rewarded, reward))
    assert not failed_with_zero(result), "\n".join(failed_with_zero(result))


def test_class8_a_repository_whose_package_is_a_pytest_dependency_can_be_fixed(worker, make_task):
    """tomli's repository holds a top-level `tomli/` package, which the defaults once reset as
    a module shadowing pytest's dependency: the honest fix there passes."""
    task = make_task(
        files={
            "tomli/__init__.py": "from tomli._parser import loads\n",
            "tomli/_parser.py": "def loads(text):\n    return {'broken': True}\n",
            "tests/test_tomli.py": "import tomli\n\ndef test_loads():\n    assert tomli.loads('') == {}\n",
        },
        check="python3 -m pytest -q -p no:cacheprovider tests/test_tomli.py",
    )
    fix = "printf 'def loads(text):\\n    return {}\\n' > tomli/_parser.py\n"
    result = run_all(("tomli_fix", task, fix))
    fixer = result["tomli_fix"]
    assert fixer.outcome == Outcome.PASSED, verdict(fixer)
    assert fixer.tamper["protected"] == []


def test_class9_a_killed_verifier_or_a_missing_reward_is_a_zero_not_a_dodge(worker, make_task):
    """Code under test that kills the check's shell leaves no reward file: that is the agent's
    failure, score 0 with the reason, never left out of the scores."""
    task = make_task(
        reward_file=True,
        runner_access="report",  # the zero is what is tested here, not the static scan
        check=CHECK + ' && echo 1 > "$BOLTZ_CHECK_DIR/reward.txt" '
        '|| echo 0 > "$BOLTZ_CHECK_DIR/reward.txt"',
    )
    kill = "printf 'import os, signal\\nos.kill(os.getppid(), signal.SIGKILL)\\n' >> calc.py\n"
    result = run_all(("kills_the_shell", task, kill))
    attempt = result["kills_the_shell"]
    assert not failed_with_zero(result), verdict(attempt)
    assert "reward file" in attempt.failure_reason, verdict(attempt)


def test_class10_hidden_files_never_outlive_an_in_place_check(web, worker, make_task):
    """After a check in place on a live API sandbox, the hidden tests are gone and the agent's
    own files are back; the diff and the tamper report say nothing Boltz did."""
    task = make_task(mode="in_place")
    with sdk_client(web, "hidden-after") as client, client.sandbox(task=task.slug) as sandbox:
        sandbox.exec("printf 'def test_mine():\\n    assert True\\n' > tests/test_calc.py")
        sandbox.exec("sed -i 's/a - b/a + b/' calc.py")
        result = sandbox.check()
        assert result.passed, result.summary
        after = sandbox.exec("cat tests/test_calc.py")
        assert "test_mine" in after.stdout and "add(2, 3)" not in after.stdout
        diff = sandbox.diff()
        assert "+    assert True" in diff.patch and "-    assert True" not in diff.patch


def test_a_task_that_rebuilds_after_the_changes_gets_only_its_declared_outputs(worker, make_task):
    """calc.py is generated by a build from src/calc.tmpl. The task's setup builds it on the
    base; its rebuild builds it again from the agent's changes, in a container of its own,
    and only build/ is carried into the check. A build script the agent rewrote to plant a
    plugin gets nothing into the check."""
    task = make_task(
        setup="sh build.sh",
        files={
            ".gitignore": "build/\n",
            "build.sh": "mkdir -p build && cp src/calc.tmpl build/calc.py\n",
            "src/calc.tmpl": "def add(a, b):\n    return a - b\n\n\ndef one():\n    return 1\n",
            "calc.py": "from build.calc import add, one  # noqa: F401\n",
        },
    )
    task.rebuild_command, task.rebuild_outputs = "sh build.sh", ["build/**"]
    task.save()
    honest = "sed -i 's/a - b/a + b/' src/calc.tmpl\n"
    planted = (
        "cat >> build.sh <<'EOF'\n"
        "cat > tests/conftest.py <<'PY'\n"
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    outcome.get_result().outcome = 'passed'\n"
        "PY\n"
        "cp tests/conftest.py build/conftest.py\n"
        "EOF\n"
    )
    result = run_all(("honest", task, honest), ("planted", task, planted))
    fixer, attack = result["honest"], result["planted"]
    assert fixer.outcome == Outcome.PASSED, verdict(fixer)
    assert not failed_with_zero({"planted": attack})
    rebuilt = attack.events.get(kind="file", data__action="rebuild").data
    assert rebuilt["refused"] == ["build/conftest.py"], rebuilt
