"""Boltz task directories (task.toml, repo/, check/, solution.patch)."""

from __future__ import annotations

from pathlib import Path

from attempts.taskio.folders import read_task_dir
from attempts.taskio.importers.items import ImportItem, guarded


def read_one(path: Path, **options) -> ImportItem:
    return guarded(str(path), lambda: read_task_dir(path, **options))
