#!/usr/bin/env python3
"""A scripted agent for the `fix-add` example task, driving a Boltz sandbox with the Python SDK.

It runs the tests, reads the failure, reads calc.py, writes a fix, runs the tests again, asks
Boltz to check the changes and prints the verdict and the diff. It exits 0 when the check passed.

Needs only the SDK (`pip install ./sdk` from the repository root) and a server to talk to:

    export BOLTZ_URL=http://127.0.0.1:8000
    export BOLTZ_TOKEN=...          # python manage.py create_token USER
    python examples/sdk_fix_add.py

The task must be loaded on the server (`python manage.py load_task examples/fix-add`).
"""

from __future__ import annotations

import re
import sys

from boltz import BoltzError, Client

TESTS = "python3 -m pytest -q tests"
# No __pycache__ folders in the diff.
ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


def fix_add(source: str) -> str:
    """calc.py with add() returning the sum: the body of `def add` has `a - b` where the
    failing test expects `a + b`."""
    match = re.search(r"^def add\(a, b\):\n(?:[ \t]+.*\n|\n)*", source, flags=re.MULTILINE)
    if match is None:
        raise SystemExit("calc.py has no `def add(a, b):`")
    body = match.group(0)
    fixed = body.replace("return a - b", "return a + b")
    if fixed == body:
        raise SystemExit(f"do not know how to fix add():\n{body}")
    return source[: match.start()] + fixed + source[match.end() :]


def main() -> int:
    with Client() as client, client.sandbox(task="fix-add", agent="sdk-example") as sb:
        print(f"sandbox {sb.name}: {sb.url}")

        # 1. Run the tests and read the failure.
        before = sb.exec(TESTS, env=ENV)
        print(f"$ {TESTS}  (exit {before.exit_code})\n{before.output}")
        failures = [line for line in before.stdout.splitlines() if line.startswith("FAILED")]
        if before.ok or not failures:
            print("the tests do not fail: nothing to fix")
        sb.message("assistant", "The tests fail:\n" + "\n".join(failures))

        # 2. Read calc.py and write the fix.
        source = sb.files.read("calc.py", text=True)
        sb.files.write("calc.py", fix_add(source))
        sb.message("assistant", "add() subtracted its arguments; it now returns a + b.")

        # 3. Run the tests again.
        after = sb.exec(TESTS, env=ENV)
        print(f"$ {TESTS}  (exit {after.exit_code})\n{after.output}")

        # 4. Boltz checks the changes on a clean copy, with the task's own (hidden) tests.
        check = sb.check()
        verdict = "PASSED" if check.passed else "FAILED"
        print(f"check: {verdict} score={check.score} {check.summary}")
        for test in check.tests:
            print(f"  {test.outcome:8} {test.name}")
        diff = sb.diff()
        print(f"diff ({len(diff.files)} file(s)):\n{diff.patch}")
        return 0 if check.passed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BoltzError as exc:
        print(f"boltz: {exc}", file=sys.stderr)
        sys.exit(2)
