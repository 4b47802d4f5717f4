"""What the check resets before it runs (issue 20): test folders are the task's, every spelling
of pytest's configuration is protected whatever its case, compiled files the agent adds are kept
out, and no default ever resets the repository's own code. Pure logic."""

from attempts.core.protected import (
    check_command_paths,
    folders_of_tests,
    protection_for,
    reset_plan,
)

BASE = ["calc.py", "README.md", "tests/test_calc.py", "tests/data/input.txt", "setup.cfg"]


def protection(**kwargs):
    kwargs.setdefault("base", BASE)
    return protection_for(kwargs.pop("patterns", []), kwargs.pop("hidden", []), **kwargs)


def test_every_spelling_of_pytests_configuration_is_protected_in_any_case():
    rules = protection()
    for path in [
        "pytest.toml",
        ".pytest.toml",
        "tests/pytest.ini",
        "sub/.pytest.ini",
        "tox.ini",
        "pkg/pyproject.toml",
        "x.DIST-INFO/entry_points.txt",
        "Evil-1.0.Dist-Info/METADATA",
        "lib/thing.EGG-INFO/entry_points.txt",
        "tests/CONFTEST.py",
        "Setup.CFG",
    ]:
        assert rules.covers(path), path
    assert not rules.covers("calc.py") and not rules.covers("docs/pytest.md")


def test_the_folders_of_the_checks_test_files_belong_to_the_task():
    rules = protection(hidden=["tests/test_calc.py"])
    # A module that shadows the code under test, a plugin, a new package: all the task's.
    for path in ["tests/calc.py", "tests/plugin.py", "tests/__init__.py", "tests/sub/x.py"]:
        assert rules.covers(path), path
    # A package the fix creates around a test folder (geom/__init__.py for geom/tests) is the
    # agent's: an honest fix may need it.
    assert not protection(hidden=["geom/tests/test_geom.py"]).covers("geom/__init__.py")
    assert not rules.covers("calc.py") and not rules.covers("helpers/util.py")


def test_a_task_that_asks_for_tests_leaves_its_test_folder_to_the_agent():
    rules = protection(hidden=["tests/test_calc.py"], agent_writes_tests=True)
    assert rules.covers("tests/test_calc.py")  # the hidden file itself stays the task's
    assert not rules.covers("tests/test_new.py")


def test_only_folders_named_for_tests_are_test_folders():
    assert folders_of_tests(["tests/test_a.py", "test_top.py", "pkg/test_b.py"]) == {"tests"}
    assert folders_of_tests(["pkg/core/tests/test_x.py", "pkg/core/tests/sub/test_y.py"]) == {
        "pkg/core/tests"
    }
    assert folders_of_tests(["src/testing/t.py", "a/unit_tests/t.py", "a/b/c.py"]) == {
        "src/testing",
        "a/unit_tests",
    }


def test_the_check_command_names_its_test_folders():
    named = check_command_paths(
        "python3 -m pytest -q --junitxml=$BOLTZ_CHECK_DIR/j.xml tests ./tests/test_calc.py::t",
        BASE,
    )
    assert named == ["tests/*", "tests/test_calc.py"]
    rules = protection(check_command="python3 -m pytest -q tests")
    assert rules.covers("tests/calc.py")
    assert check_command_paths("pytest 'unclosed", BASE) == []


def test_compiled_files_are_kept_out_unless_the_task_allows_them():
    rules = protection()
    for path in ["calc.cpython-311-x86_64-linux-gnu.so", "pkg/_speedups.abi3.so", "m.pyd"]:
        assert rules.covers(path), path
    assert rules.covers("__pycache__/calc.cpython-311.pyc") and rules.covers("calc.pyc")
    allowed = protection(compiled_files="allow")
    assert not allowed.covers("calc.cpython-311-x86_64-linux-gnu.so")
    assert allowed.covers("calc.pyc")  # bytecode is never the agent's to supply


def test_no_default_resets_the_repositorys_own_code():
    """tomli's and more-itertools' repositories hold a top-level package named like a pytest
    dependency: the fix is there, and it is never reset."""
    for package in ("tomli", "more_itertools", "pluggy", "packaging"):
        own = protection(base=[f"{package}/__init__.py", f"{package}/_parser.py", "tests/t.py"])
        assert not own.covers(f"{package}/_parser.py")
        assert not own.covers(f"{package}/new_module.py")
        # ... while in a repository without it, the same name shadows pytest's own.
        assert protection().covers(f"{package}/__init__.py")
    assert not protection(base=["argparse.py"]).covers("argparse.py")
    assert protection().covers("argparse.py")
    # A start-up hook the repository has is its own; a new one is not.
    assert not protection(base=["ci/sitecustomize.py"]).covers("ci/sitecustomize.py")
    assert protection().covers("lib/sitecustomize.py")


def test_the_reset_removes_what_the_agent_added_in_a_test_folder():
    rules = protection(hidden=["tests/test_calc.py"])
    entries = {
        "calc.py": "file",
        "tests": "dir",
        "tests/test_calc.py": "file",
        "tests/calc.py": "file",
        "tests/data": "dir",
        "tests/data/input.txt": "file",
    }
    plan = reset_plan(rules, entries=entries, base=BASE, targets=["tests/test_calc.py"])
    assert plan.remove == ["tests/calc.py", "tests/data", "tests/test_calc.py"]
    assert sorted(plan.restore) == ["setup.cfg", "tests/data/input.txt", "tests/test_calc.py"]
