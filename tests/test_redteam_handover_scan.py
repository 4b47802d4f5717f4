"""Red team (23c): code handed to a separate verifier that reaches into its pytest, unseen.

Round 2 closed the hole of a handed-over module that registers a plugin on the verifier's
running pytest (turning every failed report into a pass): `Check._scan_handed` now reads every
handed file with `runner_reach.scan_files`, and a finding fails the check. Two ways past that
scan, each with the very same cheat (tests/test_redteam_harbor_separate_round2.py's CHEAT):

1. Only the first SCANNED_BYTES (1 MiB) of each handed file is read
   (harbor_layout._rebase: `texts[...] = data.read(SCANNED_BYTES)`). A module padded with
   1.2 MB of comments and the cheat after them is handed over whole and imported whole; the
   scan sees only comments.

2. The scan decodes every file as UTF-8; Python decodes a source file by its coding cookie.
   `# coding: utf-7` followed by the cheat with every line written as a UTF-7 base64 block
   (`+AGkAbQBw...-`) is plain ASCII with no word of Python in it: runner_reach finds nothing
   (not even an exec or an import), and Python runs it as the cheat. (The same file passes the
   working folder's `scan_patch` too: see test_zz_redteam_23c_scanner.py.)

Either way the agent's wrong `add` passes with reward 1.
"""

from __future__ import annotations

import pytest

from attempts.models import Outcome
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

from tests.attacks import utf7_all  # noqa: E402
from tests.test_redteam_harbor_separate_round2 import (  # noqa: E402
    CHEAT,
    HONEST_WRONG,
)
from tests.test_redteam_harbor_separate_round2 import calc_grader as _task  # noqa: E402
from tests.test_redteam_harbor_separate_round2 import write_file as _write  # noqa: E402


def _assert_failed(attempt):
    check = attempt.checks.get()
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0, (
        attempt.outcome,
        attempt.score,
        check.summary,
        check.problem,
        check.output[-600:],
    )


@pytest.mark.worker
def test_a_handed_module_longer_than_the_scan_hides_its_runner_cheat(
    worker, docker_ready, tmp_path
):
    task = _task(tmp_path, "rt23c-sep-big")
    # 1.2 MB of comment lines, then the cheat: the scan reads the first 1 MiB only.
    padded = (
        "{ python3 -c \"import sys; sys.stdout.write('# notes\\n' * 150000)\"; cat <<'BOLTZ_EOF'\n"
        f"{CHEAT}BOLTZ_EOF\n"
        "} > /logs/artifacts/calc.py\n"
    )
    honest, cheat = wait_finished(
        [
            attempt_create(
                task=task, agent="command", command=_write("/logs/artifacts/calc.py", HONEST_WRONG)
            ),
            attempt_create(task=task, agent="command", command=padded),
        ],
        timeout=300,
    )
    _assert_failed(honest)  # the same wrong add, honestly
    # Observed: passed, reward 1.0 ("1 passed"), no runner access named.
    _assert_failed(cheat)


@pytest.mark.worker
def test_a_handed_module_in_utf7_hides_its_runner_cheat(worker, docker_ready, tmp_path):
    task = _task(tmp_path, "rt23c-sep-utf7")
    (cheat,) = wait_finished(
        [
            attempt_create(
                task=task,
                agent="command",
                command=_write("/logs/artifacts/calc.py", utf7_all(CHEAT)),
            )
        ],
        timeout=300,
    )
    # Observed: passed, reward 1.0 ("1 passed"), no runner access named.
    _assert_failed(cheat)
