"""A task's environment per stage (Harbor's [environment.env], [solution.env], [verifier.env]).

Values are kept as the task wrote them; `${NAME}` (or `${NAME:-default}`) is read from the
worker's environment when the stage runs, so a secret is never stored in Boltz. No value is
ever shown: pages and exports show the names only. Pure logic but for os.environ.
"""

from __future__ import annotations

import os
import re

from attempts.core.errors import TaskInvalid

STAGES = ("environment", "solution", "verifier")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve(stage_env: dict, stage: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The stage's variables with `${NAME}` read from the worker's environment. A reference
    to a variable the worker does not set (and has no default) is TaskInvalid."""
    environ = os.environ if environ is None else environ
    values = {}
    for name, value in ((stage_env or {}).get(stage) or {}).items():

        def lookup(found: re.Match, name=name) -> str:
            ref, default = found.group(1), found.group(2)
            if ref in environ:
                return environ[ref]
            if default is not None:
                return default
            raise TaskInvalid(
                f"{stage}.env.{name}",
                f"refers to ${{{ref}}}, which the worker's environment does not set",
            )

        values[name] = _REFERENCE.sub(lookup, str(value))
    return values
