"""Red team, round 3: hostile agents against the check as it stands after round 2.

Every test is a real attack on the real pipeline (real Docker, real Celery worker), with tasks
made by `make_task` (calc.py's add is wrong; the hidden check files hold tests/test_calc.py).
Each asserts the SECURE behaviour: an agent that does not fix calc.py ends `failed` with a score
of 0 and a reason (or: the record shows what made the check pass). A failing test here is a
hole; its message is the evidence (what Boltz recorded).
"""

from __future__ import annotations

import textwrap

import pytest

from attempts.models import Outcome
from tests.test_check_integrity import failed_with_zero
from tests.test_redteam import run_all, verdict
from tests.test_redteam_round2 import BUGGY, CHECK_WITH_REPORT, REQUIRED, write

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

OTHER = {"tests/test_other.py": "def test_other():\n    pass\n"}

# --- 1. skips the witness does not pin on the code under test --------------------------------
#
# The witness blames a skip on the code under test by the deepest frame of the working folder
# that is "not a test file" — and a test file, to it, is any file with a folder named
# test/tests/testing on its path or a name starting with test_. Those are names the agent can
# give its own code anywhere in the tree (they are not the check's test folders, so nothing
# resets them).

# A helper package of the agent's, outside the test folders, whose function skips.
NATIVE_HELPER = (
    write("helpers/__init__.py", "")
    + write("helpers/testing/__init__.py", "")
    + write(
        "helpers/testing/platform.py",
        "import unittest\n\n\ndef require_native():\n"
        '    raise unittest.SkipTest("needs the native build")\n',
    )
)
SKIP_FROM_TESTING_FOLDER = NATIVE_HELPER + write(
    "calc.py",
    "from helpers.testing.platform import require_native\n\n\n"
    "def add(a, b):\n    require_native()\n    return a - b\n\n\n"
    "def one():\n    return 1\n",
)
# A module named test_*.py outside the test folders: the scan reads it as a test module, where
# `import pytest` is ordinary, and the witness reads it as a test file.
SKIP_FROM_TEST_NAMED_MODULE = (
    write("support/__init__.py", "")
    + write(
        "support/test_platform.py",
        'import pytest\n\n\ndef require_native():\n    pytest.skip("needs the native build")\n',
    )
    + write(
        "calc.py",
        "from support.test_platform import require_native\n\n\n"
        "def add(a, b):\n    require_native()\n    return a - b\n\n\n"
        "def one():\n    return 1\n",
    )
)
# calc.add compiled under another file name: no frame of the working folder raised the skip.
SKIP_FROM_FAKE_FILENAME = write(
    "calc.py",
    textwrap.dedent(
        '''
        _SRC = """
        import unittest
        def add(a, b):
            raise unittest.SkipTest("add is not supported on this platform")
        """
        exec(compile(_SRC, "/usr/lib/python3.11/functools.py", "exec"))


        def one():
            return 1
        '''
    ),
)
# Every failing assert becomes a skip, raised by the test's own frame (a test file).
ASSERT_BECOMES_SKIP = write(
    "calc.py",
    textwrap.dedent(
        """
        import builtins
        import unittest


        class _NotHere(unittest.SkipTest):
            pass


        builtins.AssertionError = _NotHere
        """
    )
    + "\n"
    + BUGGY,
)


def test_skips_the_witness_does_not_blame_on_the_code(worker, make_task):
    """Code under test skips the failing test from a place the witness takes for a test file
    (a `testing/` folder, a `test_*.py` module of the package), from code compiled under a
    file name outside the tree, or by turning AssertionError into unittest.SkipTest. pytest
    exits 0; skipped tests do not count; the check is scored by its exit code (or by a JUnit
    report in which only test_one ran)."""
    task = make_task()
    junit = make_task(check=CHECK_WITH_REPORT)
    result = run_all(
        ("skip_testing_folder", task, SKIP_FROM_TESTING_FOLDER),
        ("skip_testing_folder_junit", junit, SKIP_FROM_TESTING_FOLDER),
        ("skip_test_named_module", task, SKIP_FROM_TEST_NAMED_MODULE),
        ("skip_fake_filename", task, SKIP_FROM_FAKE_FILENAME),
        ("assert_becomes_skip", task, ASSERT_BECOMES_SKIP),
        ("assert_becomes_skip_junit", junit, ASSERT_BECOMES_SKIP),
    )
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems)


# --- 2. collection-time skips -------------------------------------------------------------------
#
# A skip at collection is blamed by the collect report's location alone: pytest's crash entry,
# the last traceback entry that is not hidden (`__tracebackhide__`). A module-level
# `__tracebackhide__ = True` hides every frame of calc.py, so the location is the test file's
# `from calc import ...` line.
COLLECT_SKIP_HIDDEN = write(
    "calc.py",
    "import unittest\n\n__tracebackhide__ = True\n"
    'raise unittest.SkipTest("calc needs the native build")\n\n' + BUGGY,
)
COLLECT_SKIP_TESTING_FOLDER = NATIVE_HELPER + write(
    "calc.py",
    "from helpers.testing.platform import require_native\n\nrequire_native()\n\n" + BUGGY,
)


def test_collection_skips_the_witness_does_not_blame_on_the_code(worker, make_task):
    """calc.py skips the whole test module as it is imported; another test file keeps pytest's
    exit status at 0."""
    task = make_task(files=OTHER)
    junit = make_task(files=OTHER, check=CHECK_WITH_REPORT)
    result = run_all(
        ("collect_skip_hidden", task, COLLECT_SKIP_HIDDEN),
        ("collect_skip_hidden_junit", junit, COLLECT_SKIP_HIDDEN),
        ("collect_skip_testing_folder", task, COLLECT_SKIP_TESTING_FOLDER),
    )
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems)


# --- 3. forged witness lines for required tests ---------------------------------------------------
#
# The pipe is found without naming it (an environment value that is a FIFO), a whole finished run
# with both required tests passed is written (start, collected, tests, end), and the real test
# module is skipped at collection by a helper in a `testing/` folder (see 2).
FORGE = textwrap.dedent(
    """
    import json
    import os
    import stat

    def _lines(run):
        yield {"run": run, "event": "start", "collect_only": False}
        yield {"run": run, "event": "collected", "count": 2}
        for name in ("test_add", "test_one"):
            yield {"run": run, "event": "test", "id": "tests/test_calc.py::" + name,
                   "outcome": "passed"}
        yield {"run": run, "event": "end", "exitstatus": 0}

    for _value in list(os.environ.values()):
        try:
            if not stat.S_ISFIFO(os.stat(_value).st_mode):
                continue
            _fd = os.open(_value, os.O_WRONLY | os.O_NONBLOCK)
        except (OSError, ValueError):
            continue
        for _record in _lines("1-cafe"):
            os.write(_fd, (json.dumps(_record) + "\\n").encode())
        os.close(_fd)
    """
)
FORGE_AND_SKIP = NATIVE_HELPER + write(
    "calc.py",
    FORGE + "\n\nfrom helpers.testing.platform import require_native  # noqa: E402\n\n"
    "require_native()\n\n" + BUGGY,
)


def test_forged_witness_for_required_tests(worker, make_task):
    result = run_all(
        ("forge_required", make_task(required=REQUIRED, files=OTHER), FORGE_AND_SKIP),
        (
            "forge_required_junit",
            make_task(required=REQUIRED, files=OTHER, check=CHECK_WITH_REPORT),
            FORGE_AND_SKIP,
        ),
    )
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems)


# --- 4. in place: what the record leaves out -------------------------------------------------------

FIXED = "def add(a, b):\n    return a + b\n\n\ndef one():\n    return 1\n"


def test_in_place_link_out_of_the_tree(worker, make_task):
    """In place, calc.py becomes a link to a file outside /workspace (in /tmp, or the agent's
    HOME, which the check's fresh HOME does not remove). The record holds a link; the check
    imports the file it points to. Secure: the check fails, or the record shows the code that
    passed."""
    task = make_task(mode="in_place")
    via_tmp = write("/tmp/.cache-x/calc_impl.py", FIXED) + (
        "rm calc.py && ln -s /tmp/.cache-x/calc_impl.py calc.py\n"
    )
    via_home = write("$HOME/.lib/calc_impl.py", FIXED) + (
        'rm calc.py && ln -s "$HOME/.lib/calc_impl.py" calc.py\n'
    )
    via_folder = (
        write("/tmp/.cache-y/__init__.py", "")
        + write("/tmp/.cache-y/impl.py", "def add(a, b):\n    return a + b\n")
        + "ln -s /tmp/.cache-y fastcalc\n"
        + write(
            "calc.py", "from fastcalc.impl import add  # noqa: F401\n\n\ndef one():\n    return 1\n"
        )
    )
    result = run_all(
        ("link_to_tmp", task, via_tmp),
        ("link_to_home", task, via_home),
        ("link_folder_to_tmp", task, via_folder),
    )
    problems = []
    for label, attempt in result.items():
        if attempt.outcome == Outcome.PASSED and "a + b" not in (attempt.diff or ""):
            problems.append(f"{label}: passed, the diff does not show the code: {verdict(attempt)}")
    assert not problems, "\n".join(problems)


def test_in_place_link_to_unscanned_runner_hook(worker, make_task):
    """In place, a package that is a link to a folder in /tmp: the scan reads the diff, which
    holds the link's target only, so a hook there that flips every failing report is never
    named. calc.py stays wrong."""
    from tests.test_redteam_round2 import FLIP_BODY

    task = make_task(mode="in_place")
    hook = (
        write("/tmp/.cache-z/__init__.py", "")
        + write("/tmp/.cache-z/speedups.py", "import _pytest.reports as _r\n" + FLIP_BODY)
        + "ln -s /tmp/.cache-z fastcalc\n"
        + write("calc.py", "import fastcalc.speedups  # noqa: F401\n\n" + BUGGY)
    )
    result = run_all(("link_runner_hook", task, hook))
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems) + f" tamper={result['link_runner_hook'].tamper}"


# --- 5. a reward file rewritten after the check's own script wrote it ------------------------------

CHECK_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    sys.path.insert(0, os.getcwd())
    from calc import add
    ok = add(2, 3) == 5
    with open(os.path.join(os.environ["BOLTZ_CHECK_DIR"], "reward.txt"), "w") as f:
        f.write("1" if ok else "0")
    """
)
# calc.py starts a detached process that keeps writing 1 to reward.txt in every /tmp folder
# named by the environment, for a while after the check's script has written its 0.
REWRITER = textwrap.dedent(
    '''
    import os
    import subprocess
    import sys

    _LOOP = """
    import os, sys, time
    end = time.time() + 20
    while time.time() < end:
        for d in sys.argv[1:]:
            try:
                with open(os.path.join(d, "reward" + ".txt"), "w") as f:
                    f.write("1")
            except OSError:
                pass
        time.sleep(0.002)
    """
    _dirs = [v for v in os.environ.values() if v.startswith("/tmp/") and os.path.isdir(v)]
    subprocess.Popen([sys.executable, "-c", _LOOP, *_dirs], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    '''
)


def test_reward_file_rewritten_by_a_detached_process(worker, make_task):
    """A task whose check is a script (no pytest) that writes reward.txt: code under test
    leaves a detached process behind that writes 1 over it after the script wrote 0."""
    files = {"tests/check.py": CHECK_SCRIPT}
    check = "python3 tests/check.py"
    attack = write("calc.py", REWRITER + "\n" + BUGGY)
    result = run_all(
        # Control: the same task with calc.py left wrong and no attack scores 0.
        ("control_no_attack", make_task(check=check, reward_file=True, files=files), "true\n"),
        ("reward_rewrite_fresh", make_task(check=check, reward_file=True, files=files), attack),
        (
            "reward_rewrite_in_place",
            make_task(check=check, reward_file=True, files=files, mode="in_place"),
            attack,
        ),
    )
    for label, attempt in result.items():
        print("VERDICT", label, verdict(attempt))
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems)


# The rewriter, and then as many detached processes as the check's user may have: Boltz's
# command that ends the check's processes cannot start as that user (under gVisor the task's
# pids is each user's own limit, and the witness, a user of its own, still reports).
FLOOD_AFTER = textwrap.dedent(
    """
    for _ in range(400):
        try:
            subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            break
    """
)


def test_reward_file_rewritten_while_a_flood_keeps_boltz_from_ending_it(worker, make_task):
    files = {"tests/check.py": CHECK_SCRIPT}
    check = "python3 tests/check.py"
    attack = write("calc.py", REWRITER + FLOOD_AFTER + "\n" + BUGGY)
    result = run_all(
        ("flood_rewrite_fresh", make_task(check=check, reward_file=True, files=files), attack),
        (
            "flood_rewrite_in_place",
            make_task(check=check, reward_file=True, files=files, mode="in_place"),
            attack,
        ),
    )
    problems = failed_with_zero(result)
    assert not problems, "\n".join(problems)
