"""Red team (23b): "Every failure says whose it is". The check's output is not only the task's:
a verifier runs the agent's program, and what that program prints lands in the same output.
`check_cause` reads the whole output and, on a line such as `curl: (6) Could not resolve
host`, says "the task's check needs network ...: the task's failure, not the agent's". So an
agent whose own program reaches for the network (by mistake, or on purpose: it can print the
line and exit 1) fails with a reason that blames the task. The outcome (failed) and the score
(0) stay; what is wrong is the word a reviewer reads: a task flagged as broken, an agent's
failure written off as the environment's."""

from __future__ import annotations

from attempts.models import CheckResult, Outcome
from attempts.run.director import check_cause, verdict_of

# A Harbor verifier (tests/test.sh) that runs the agent's program, as many do; the program is
# the agent's, and reaches for the network its task never gave it.
SHELL_VERIFIER = """\
+ cd /app
+ python3 /app/report.py
Traceback (most recent call last):
  File "/app/report.py", line 4, in <module>
    rates = urllib.request.urlopen("https://api.example.com/rates").read()
urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>
+ echo 0
"""

# The same from pytest: the test runs the agent's CLI, whose stderr pytest shows as it is.
PYTEST_VERIFIER = """\
============================= test session starts ==============================
collected 1 item

../tests/test_outputs.py F                                                [100%]

=================================== FAILURES ===================================
_________________________________ test_report __________________________________

    def test_report():
        run = subprocess.run(["python3", "/app/report.py"])
>       assert run.returncode == 0
E       assert 1 == 0

../tests/test_outputs.py:6: AssertionError
----------------------------- Captured stderr call -----------------------------
curl: (6) Could not resolve host: api.example.com
=========================== short test summary info ============================
FAILED ../tests/test_outputs.py::test_report - assert 1 == 0
============================== 1 failed in 0.31s ===============================
"""


def _failed(output: str) -> CheckResult:
    return CheckResult(
        passed=False, score=0.0, summary="reward 0 (reward.txt)", output=output, problem=""
    )


def test_the_agents_own_program_needing_network_is_not_called_the_tasks_failure():
    for output in (SHELL_VERIFIER, PYTEST_VERIFIER):
        outcome, reason = verdict_of(None, _failed(output))
        assert outcome == Outcome.FAILED
        # Observed: "the task's check needs network, which its sandbox does not have: the
        # task's failure, not the agent's: `curl: (6) Could not resolve host: ...`".
        assert "the task's failure" not in reason, reason


def test_an_agent_cannot_word_its_own_failure_as_the_tasks():
    """On purpose: the agent's program prints the line and exits 1 (any verifier that shows
    the program's stderr shows it)."""
    printed = "+ python3 /app/solve.py\ncurl: (6) Could not resolve host: astral.sh\n+ echo 0\n"
    reason = check_cause(printed)
    assert "not the agent's" not in reason, reason
