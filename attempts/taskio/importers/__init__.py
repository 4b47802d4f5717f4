"""Importing task sets people already have: Boltz task directories (or a zip of several),
SWE-bench style JSONL, and Harbor / Terminal-Bench style task directories.

Every importer yields one ImportItem per task it read; import_path() saves them, idempotently
(by slug: a second import updates, never duplicates) and reports what it created, updated
and refused, with the reason for each refusal.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction

from attempts.core.errors import TaskInvalid
from attempts.models import Task, TaskStep
from attempts.taskio.archives import ArchiveRefused, safe_extract
from attempts.taskio.importers import boltz_dirs, harbor, swebench
from attempts.taskio.importers.items import ImportItem


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    default_image: str = ""  # set when SWE-bench rows were read without an image: this one
    notes: dict[str, list[str]] = field(default_factory=dict)  # slug -> what the import noted

    def lines(self, *, image_hint: str = "use --image to choose") -> list[str]:
        """The report, a line each; `image_hint` says how to choose another image."""
        out = []
        if self.default_image:
            out.append(f"image: {self.default_image} (the default; {image_hint})")
        for verb, slugs in (("created", self.created), ("updated", self.updated)):
            for slug in slugs:
                out.append(f"{verb} {slug}")
                out += [f"  {note}" for note in self.notes.get(slug, [])]
        out += [f"refused {source}: {reason}" for source, reason in self.refused]
        out.append(
            f"{len(self.created)} created, {len(self.updated)} updated, {len(self.refused)} refused"
        )
        return out


def detect(path: Path) -> str:
    if path.is_file() and path.suffix in (".jsonl", ".json"):
        return "swebench"
    if path.is_file() and zipfile.is_zipfile(path):
        return "zip"
    if path.is_dir():
        one_step = (path / "instruction.md").is_file() and (path / "tests").is_dir()
        multi_step = (path / "steps").is_dir()  # Harbor's [[steps]]: steps/<name>/
        harbor = (one_step or multi_step) and not (path / "check").exists()
        if (path / "task.toml").is_file() and harbor:
            return "harbor"
        if (path / "task.toml").is_file():
            return "boltz"
        return "folder"  # a folder of task folders
    raise TaskInvalid(
        "path", f"{path} is not a task folder, a folder of them, a zip or a JSONL file"
    )


def read_items(path: Path, **options) -> list[ImportItem]:

    kind = detect(path)
    if kind == "swebench":
        return swebench.read(path, **options)
    if kind == "boltz":
        return [boltz_dirs.read_one(path, **options)]
    if kind == "harbor":
        return [harbor.read_one(path, **options)]
    if kind == "zip":
        scratch = Path(tempfile.mkdtemp(prefix="import-", dir=settings.DATA_DIR))
        try:
            safe_extract(path, scratch)
        except ArchiveRefused as exc:
            return [ImportItem(str(path), refused=f"archive refused: {exc}")]
        return _read_folder(scratch, **options)
    return _read_folder(path, **options)


def _read_folder(folder: Path, **options) -> list[ImportItem]:
    items: list[ImportItem] = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            kind = detect(child)
        except TaskInvalid:
            continue
        if kind in ("boltz", "harbor"):
            items += read_items(child, **options)
        elif kind == "folder":
            items += _read_folder(child, **options)
    if not items:
        items.append(ImportItem(str(folder), refused="no task directories found (task.toml)"))
    return items


def import_path(path: Path, **options) -> ImportReport:
    report = ImportReport()
    if detect(path) == "swebench" and not options.get("image"):
        report.default_image = settings.BOLTZ_DEFAULT_IMAGE  # what the rows' tasks run in
    for item in read_items(path, **options):
        if item.values is None:
            report.refused.append((item.source, item.refused))
            continue
        values = dict(item.values)
        slug = unique_slug(values.pop("slug"), values.pop("dataset", ""), values["source_dir"])
        steps = values.pop("steps", [])
        with transaction.atomic():
            task, created = Task.objects.update_or_create(slug=slug, defaults=values)
            task.steps.all().delete()  # a task's steps are its folder's, as imported now
            TaskStep.objects.bulk_create(
                TaskStep(task=task, position=i, **step) for i, step in enumerate(steps, start=1)
            )
        (report.created if created else report.updated).append(slug)
        if item.notes:
            report.notes[slug] = item.notes
    return report


def unique_slug(slug: str, dataset: str, source: str) -> str:
    """The task's slug; when another task from elsewhere has it (two datasets' tasks of one
    name), prefixed with the task's dataset. Importing the same folder again finds its own."""
    if not dataset or not source:
        return slug
    taken = Task.objects.filter(slug=slug).exclude(source_dir=source).exists()
    return f"{dataset}-{slug}"[:100] if taken else slug
