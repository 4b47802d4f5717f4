"""Harbor / Terminal-Bench style task directories: not supported yet.

Their workspace is the image itself (built from environment/Dockerfile), their tests run as
root from /tests and write /logs/verifier/reward.txt, and their reference is a script
(solution/solve.sh). Boltz's sandboxes copy a repository into /workspace, run checks as the
sandbox user and restore hidden files into /workspace, so each of these needs its own support.
Until then such a directory is refused with this reason rather than imported wrongly.
"""

from __future__ import annotations

from pathlib import Path

from . import ImportItem


def read_one(path: Path, **_options) -> ImportItem:
    return ImportItem(
        str(path),
        refused="Harbor / Terminal-Bench task directories are not "
        "supported yet (see attempts/importers/harbor.py)",
    )
