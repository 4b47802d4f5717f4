"""What the tests of the SDK's optional extras (boltz.gym, boltz.mini_swe_agent) share: the
`boltz` package must import without the extra's package, and the extra's module must say how to
install what it needs."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def assert_the_extra_is_optional(module: str, package: str, extra: str) -> None:
    """Importing `boltz` leaves `package` unimported; importing `module` without `package`
    raises an ImportError that says `pip install 'boltz-sdk[EXTRA]'` (in a fresh interpreter,
    where no earlier test has imported either)."""
    code = (
        f"import sys; import boltz; assert {package!r} not in sys.modules, 'imported';"
        f"sys.modules[{package!r}] = None\n"
        f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert f"pip install 'boltz-sdk[{extra}]'" in run.stdout
